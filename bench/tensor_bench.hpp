// tensor_bench.hpp — conveyor-bench's tensors subcommand (the seeds' tensor-loading cases:
// single_image, random_image, random_gpu, random_to_gpu), defined in tensor_bench.cpp.
#ifndef CONVEYOR_BENCH_TENSOR_BENCH_HPP
#define CONVEYOR_BENCH_TENSOR_BENCH_HPP

#include <CLI/CLI.hpp>

#include <functional>

/// Registers `tensors` on `app`; the result runs it when it was chosen after parsing and
/// returns its exit status, or -1 when it was not.
std::function<int()> add_tensor_subcommands(CLI::App& app);

#endif
