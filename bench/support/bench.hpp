// bench/support/bench.hpp — the bench support library (target conveyor_bench_support):
// everything the benchmarks use to measure and report.
#ifndef CONVEYOR_BENCH_SUPPORT_BENCH_HPP
#define CONVEYOR_BENCH_SUPPORT_BENCH_HPP

/** @file
    Bench support, namespace `conveyor::bench`:

    - `stopwatch`, `resource_usage` / `usage_now()`: wall time, CPU time, peak memory;
    - `latency_histogram`, `concurrent_histogram`, `median()`: latency percentiles;
    - `progress`: a rate-limited progress line on standard error;
    - `json_line`: one flat JSON object per line for results;
    - `html_report`, `svg_line_plot()`, `svg_share_plot()`, `machine_facts()`: one
      self-contained HTML page of results, with plain SVG plots and the machine's facts.

    These depend on nothing but the standard library and POSIX (synthetic.hpp, not included
    here, uses conveyor's errors and generator). It is not part of conveyor: the library's
    users never build it; the command-line examples link it for `progress`.
*/

#include "support/histogram.hpp"
#include "support/json_line.hpp"
#include "support/progress.hpp"
#include "support/report.hpp"
#include "support/timer.hpp"

#endif
