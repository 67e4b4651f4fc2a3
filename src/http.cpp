// conveyor's static library, http module (CONVEYOR_SEPARATE_COMPILATION).
#include <conveyor/http/impl/src.hpp>
