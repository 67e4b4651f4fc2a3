// fuzz/main.cpp — libFuzzer's entry point for one target, chosen when compiled
// (CONVEYOR_FUZZ_TARGET: its function in targets.hpp).
#include "targets.hpp"

#ifndef CONVEYOR_FUZZ_TARGET
#error "define CONVEYOR_FUZZ_TARGET as the target's function (fuzz/CMakeLists.txt does)"
#endif

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    conveyor::fuzz::CONVEYOR_FUZZ_TARGET(conveyor::fuzz::input(data, size));
    return 0;
}
