// s3_bench.hpp — conveyor-bench's S3 subcommands, defined in s3_bench.cpp.
#ifndef CONVEYOR_BENCH_S3_BENCH_HPP
#define CONVEYOR_BENCH_S3_BENCH_HPP

#include <CLI/CLI.hpp>

#include <functional>

/// Registers s3-get and s3-put on `app`; the result runs whichever was chosen after
/// parsing and returns its exit status, or -1 when neither was.
std::function<int()> add_s3_subcommands(CLI::App& app);

#endif
