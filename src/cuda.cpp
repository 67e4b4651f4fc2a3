// conveyor's static library, CUDA module (CONVEYOR_SEPARATE_COMPILATION; empty without CUDA).
#include <conveyor/cuda/impl/src.hpp>
