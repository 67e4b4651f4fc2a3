// conveyor's static library, s3 module (CONVEYOR_SEPARATE_COMPILATION).
#include <conveyor/s3/impl/src.hpp>
