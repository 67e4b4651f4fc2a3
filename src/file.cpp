// conveyor's static library, file module (CONVEYOR_SEPARATE_COMPILATION).
#include <conveyor/file/impl/src.hpp>
