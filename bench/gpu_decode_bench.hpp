// gpu_decode_bench.hpp — conveyor-bench's gpu-decode subcommand (JPEGs in memory decoded by
// cuda::decode_batches, for comparison with a plain nvJPEG loop and torchvision), defined in
// gpu_decode_bench.cpp. Built where the CUDA toolkit is.
#ifndef CONVEYOR_BENCH_GPU_DECODE_BENCH_HPP
#define CONVEYOR_BENCH_GPU_DECODE_BENCH_HPP

#include <CLI/CLI.hpp>

#include <functional>

/// Registers `gpu-decode` on `app`; the result runs it when it was chosen after parsing and
/// returns its exit status, or -1 when it was not.
std::function<int()> add_gpu_decode_subcommands(CLI::App& app);

#endif
