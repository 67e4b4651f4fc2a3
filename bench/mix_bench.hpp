// mix_bench.hpp — conveyor-bench's mix subcommand, defined in mix_bench.cpp.
#ifndef CONVEYOR_BENCH_MIX_BENCH_HPP
#define CONVEYOR_BENCH_MIX_BENCH_HPP

#include <CLI/CLI.hpp>

#include <functional>

/// Registers `mix` on `app`; the result runs it when it was chosen after parsing and
/// returns its exit status, or -1 when it was not.
std::function<int()> add_mix_subcommands(CLI::App& app);

#endif
