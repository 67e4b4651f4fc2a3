// conveyor's static library, store module (CONVEYOR_SEPARATE_COMPILATION).
#include <conveyor/store/impl/src.hpp>
