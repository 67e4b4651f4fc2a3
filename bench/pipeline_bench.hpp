// pipeline_bench.hpp — conveyor-bench's pipeline subcommand, defined in pipeline_bench.cpp.
#ifndef CONVEYOR_BENCH_PIPELINE_BENCH_HPP
#define CONVEYOR_BENCH_PIPELINE_BENCH_HPP

#include <CLI/CLI.hpp>

#include <functional>

/// Registers `pipeline` on `app`; the result runs it when it was chosen after parsing and
/// returns its exit status, or -1 when it was not.
std::function<int()> add_pipeline_subcommands(CLI::App& app);

#endif
