// run_bench.hpp — `conveyor-bench run`: a benchmark described by a JSON configuration
// (run_config.hpp), run with the library's sources and stages, observed through the core
// metrics (per-stage time series, latency histograms, busy / starved / blocked shares),
// optionally swept over one numeric field, reported as JSON lines, a table and an HTML page.
#ifndef CONVEYOR_BENCH_RUN_BENCH_HPP
#define CONVEYOR_BENCH_RUN_BENCH_HPP

#include "run_config.hpp"

#include <conveyor/core/metrics.hpp>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace conveyor::bench::run {

/// What one epoch of one configuration did.
struct epoch_result {
    std::size_t epoch = 0;
    std::uint64_t items = 0; ///< samples the consumer got (images, for batches)
    std::uint64_t bytes = 0; ///< bytes the source read
    double seconds = 0;
    stats_snapshot final;                ///< the metrics at the end
    std::vector<stats_snapshot> series;  ///< every `stats_interval_ms` while it ran
};

/// One configuration's epochs (one point of a sweep, or the whole run).
struct run_result {
    run_config config;
    std::string label; ///< "in_flight=16" for a sweep point, "" otherwise
    std::vector<epoch_result> epochs;

    std::uint64_t items() const;
    std::uint64_t bytes() const;
    double seconds() const;
    double items_per_second() const;
    /// The first source's latency over all epochs.
    latency_histogram::counts source_latency() const;
};

/// One point of a sweep.
struct sweep_point {
    double value = 0;             ///< the swept field's value
    double items_per_s = 0;       ///< measured
    double mb_per_s = 0;          ///< measured
    double in_flight = 0;         ///< the point's in_flight
    double mean_latency_ms = 0;   ///< the source's mean request latency, measured
    double littles_law_items_per_s = 0; ///< in_flight / mean latency
};

/// A sweep's points and the knee.
struct sweep_result {
    std::string field;
    std::vector<sweep_point> points; ///< in the order run
    std::optional<std::size_t> knee; ///< index into `points`
    double best_items_per_s = 0;
};

/// The source stage of a snapshot (the first that is one; else the first stage), or null.
const stage_stats* source_of(const stats_snapshot& s);

/** The knee of a throughput curve: the index of the smallest `x` whose `y` reaches
    `fraction` of the largest `y`; nullopt when there are no points (or no positive y). */
std::optional<std::size_t> find_knee(const std::vector<double>& x, const std::vector<double>& y, double fraction = 0.95);

/// Little's law: the most items per second that `in_flight` requests of `mean_latency_s`
/// each can give (0 when the latency is not known).
double littles_law_bound(double in_flight, double mean_latency_s);

/// What the command line asks for.
struct invocation {
    std::string config_file;       ///< --config
    std::vector<std::string> sets; ///< --set key=value, in order
    std::string sweep;             ///< --sweep field=v1,v2,...
    std::string case_name;         ///< --case random-reads | loader
    bool quiet = false;            ///< no progress line (tests)
};

/// Everything a benchmark produced.
struct outcome {
    run_config config;             ///< the effective configuration (before the sweep)
    std::vector<run_result> runs;  ///< one per sweep point, or one
    std::optional<sweep_result> sweep;
    std::vector<std::string> json_lines; ///< what went to standard output
    std::string report_path, results_path; ///< written files ("" when output is "")
};

/// The configuration an invocation describes (defaults, the file, the case, the --set's).
config_builder configure(const invocation& inv);

/** Runs the benchmark an invocation describes: JSON lines on `out`, progress and the
    summary tables on `err`, files in the output folder. Throws `config_error` for
    mistakes in the configuration, other exceptions for failures while running. */
outcome execute(const invocation& inv, std::FILE* out = stdout, std::FILE* err = stderr);

/** Builds the HTML report of `o` (figures `throughput`, `latency-cdf`, `shares`, `sweep`
    for sweeps, tables `summary`, `config`, `machine`). */
std::string build_report(const outcome& o);

/// The built-in cases: name and one line on what each is.
const std::vector<std::pair<std::string, std::string>>& cases();

/// Registers `run` on `app`; the result runs it when chosen (exit status: 0 done, 1 failed,
/// 2 configuration error) or returns -1 when another subcommand was chosen.
std::function<int()> add_run_subcommands(CLI::App& app);

} // namespace conveyor::bench::run

#endif
