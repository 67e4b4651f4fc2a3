// h2d_bench.hpp — conveyor-bench's h2d subcommand (host-to-device staging), defined in
// h2d_bench.cpp. Built where the CUDA toolkit is; the subcommand says when there is no GPU.
#ifndef CONVEYOR_BENCH_H2D_BENCH_HPP
#define CONVEYOR_BENCH_H2D_BENCH_HPP

#include <CLI/CLI.hpp>

#include <functional>

/// Registers `h2d` on `app`; the result runs it when it was chosen after parsing and
/// returns its exit status, or -1 when it was not.
std::function<int()> add_h2d_subcommands(CLI::App& app);

#endif
