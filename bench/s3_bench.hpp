// s3_bench.hpp — conveyor-bench's S3 subcommands, defined in s3_bench.cpp.
#ifndef CONVEYOR_BENCH_S3_BENCH_HPP
#define CONVEYOR_BENCH_S3_BENCH_HPP

#include "support/json_line.hpp"

#include <conveyor/s3/client.hpp>

#include <CLI/CLI.hpp>

#include <functional>

/// Adds what an S3 client did between `before` and `now` to a benchmark's JSON line:
/// requests, retries, throttles, the in-flight limit, and the checksum counts (`checksums`:
/// "verified", or "off" with --no-checksums).
inline void add_s3_counters(conveyor::bench::json_line& line, const conveyor::s3::client_stats& now,
                            const conveyor::s3::client_stats& before, bool checksums_off)
{
    line.add("requests", now.requests - before.requests)
        .add("retries", now.retries - before.retries)
        .add("throttles", now.throttled - before.throttled)
        .add("limit", now.limit)
        .add("lowest_limit", now.lowest_limit)
        .add("checksums", checksums_off ? "off" : "verified")
        .add("checksums_verified", now.checksums_verified - before.checksums_verified)
        .add("checksum_failures", now.checksum_failures - before.checksum_failures)
        .add("checksums_skipped", now.checksums_skipped - before.checksums_skipped)
        .add("checksums_absent", now.checksums_absent - before.checksums_absent);
}

/// Registers s3-get and s3-put on `app`; the result runs whichever was chosen after
/// parsing and returns its exit status, or -1 when neither was.
std::function<int()> add_s3_subcommands(CLI::App& app);

#endif
