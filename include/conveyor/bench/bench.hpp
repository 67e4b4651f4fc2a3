// conveyor/bench/bench.hpp — the bench support module: everything benchmarks and examples
// use to measure and report.
#ifndef CONVEYOR_BENCH_BENCH_HPP
#define CONVEYOR_BENCH_BENCH_HPP

/** @file
    Bench support, namespace `conveyor::bench`:

    - `stopwatch`, `resource_usage` / `usage_now()`: wall time, CPU time, peak memory;
    - `latency_histogram`, `concurrent_histogram`, `median()`: latency percentiles;
    - `progress`: a rate-limited progress line on standard error;
    - `json_line`: one flat JSON object per line for results;
    - `html_report`, `svg_line_plot()`, `svg_share_plot()`, `machine_facts()`: one
      self-contained HTML page of results, with plain SVG plots and the machine's facts.

    It depends on nothing but the standard library and POSIX, so examples may use it
    without pulling in Boost.
*/

#include <conveyor/bench/histogram.hpp>
#include <conveyor/bench/json_line.hpp>
#include <conveyor/bench/progress.hpp>
#include <conveyor/bench/report.hpp>
#include <conveyor/bench/timer.hpp>

#endif
