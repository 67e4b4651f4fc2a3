// shard_bench.hpp — conveyor-bench's shard subcommand, defined in shard_bench.cpp.
#ifndef CONVEYOR_BENCH_SHARD_BENCH_HPP
#define CONVEYOR_BENCH_SHARD_BENCH_HPP

#include <CLI/CLI.hpp>

#include <functional>

/// Registers `shards` on `app`; the result runs it when it was chosen after parsing and
/// returns its exit status, or -1 when it was not.
std::function<int()> add_shard_subcommands(CLI::App& app);

#endif
