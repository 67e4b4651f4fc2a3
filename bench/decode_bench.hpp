// decode_bench.hpp — conveyor-bench's decode subcommand, defined in decode_bench.cpp.
#ifndef CONVEYOR_BENCH_DECODE_BENCH_HPP
#define CONVEYOR_BENCH_DECODE_BENCH_HPP

#include <CLI/CLI.hpp>

#include <functional>

/// Registers `decode` on `app`; the result runs it when it was chosen after parsing and
/// returns its exit status, or -1 when it was not.
std::function<int()> add_decode_subcommands(CLI::App& app);

#endif
