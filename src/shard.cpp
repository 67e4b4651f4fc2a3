// conveyor's static library, shard module (CONVEYOR_SEPARATE_COMPILATION).
#include <conveyor/shard/impl/src.hpp>
