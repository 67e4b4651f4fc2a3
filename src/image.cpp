// conveyor's static library, image module (CONVEYOR_SEPARATE_COMPILATION).
#include <conveyor/image/impl/src.hpp>
