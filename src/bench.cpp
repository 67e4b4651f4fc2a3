// conveyor's static library, bench support module (CONVEYOR_SEPARATE_COMPILATION).
#include <conveyor/bench/impl/src.hpp>
