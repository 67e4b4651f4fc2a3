// conveyor's static library, core module (CONVEYOR_SEPARATE_COMPILATION).
#include <conveyor/core/impl/src.hpp>
