// Writes a sample report with every kind of block, ordinary data and awkward data (gaps,
// NaN, an empty plot, a single point, equal values, markup in names), for
// report_html_check.py to validate. Usage: conveyor-bench-report-sample FILE
#include "support/report.hpp"

#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>

namespace bench = conveyor::bench;

int main(int argc, char** argv)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s FILE\n", argv[0]);
        return 2;
    }
    try {
        bench::html_report r("conveyor-bench <sample> & \"report\"");
        r.add_paragraph("A sample with every kind of block; ids: throughput latency shares sweep empty single "
                        "results machine config.");

        bench::line_plot throughput{.title = "Throughput per stage", .x_label = "time (s)", .y_label = "items/s"};
        for (const char* name : {"read", "decode <jpeg>", "batch & collate"}) {
            bench::plot_series s{.name = name};
            for (int i = 0; i <= 60; ++i) {
                s.x.push_back(i * 0.5);
                s.y.push_back(i == 20 ? NAN : 2000 + 800 * std::sin(i * 0.3) + 300.0 * static_cast<double>(s.name.size()));
            }
            throughput.series.push_back(std::move(s));
        }
        r.add_heading("Throughput");
        r.add_plot("throughput", throughput);

        bench::line_plot latency{.title = "Latency CDF per source", .x_label = "latency (ms)", .y_label = "fraction", .log_x = true};
        for (int k = 0; k < 2; ++k) {
            bench::plot_series s{.name = k ? "s3://bucket/a'b" : "file:///data"};
            for (int i = 1; i <= 100; ++i) {
                s.x.push_back((k ? 5.0 : 0.05) * std::exp(i * 0.05));
                s.y.push_back(i / 100.0);
            }
            latency.series.push_back(std::move(s));
        }
        r.add_plot("latency", latency);

        bench::share_plot shares{.title = "Where each stage's time goes"};
        shares.rows = {{"shards", 0.08, 0.9, 0.02}, {"decode_batches", 0.99, 0.01, 0, true}, {"to_cuda <gpu 0>", 0.1, 0.3, 0.6},
                       {"idle", 0, 0, 0}};
        r.add_plot("shares", shares);

        bench::line_plot sweep{.title = "Sweep: throughput against in-flight", .x_label = "in flight", .y_label = "objects/s",
                               .log_x = true};
        bench::plot_series measured{.name = "measured", .markers = true}, bound{.name = "Little's law bound", .dashed = true};
        for (int n = 1; n <= 256; n *= 2) {
            measured.x.push_back(n);
            measured.y.push_back(std::min(n / 0.02, 2800.0) * 0.9);
            bound.x.push_back(n);
            bound.y.push_back(n / 0.02);
        }
        sweep.series = {measured, bound};
        sweep.marks = {{64, "knee: 64"}};
        sweep.y_min = 0;
        r.add_plot("sweep", sweep);

        bench::line_plot empty{.title = "An empty plot", .x_label = "x", .y_label = "y"};
        empty.series.push_back({.name = "nothing", .x = {NAN, 1}, .y = {1, std::numeric_limits<double>::infinity()}});
        r.add_plot("empty", empty);

        bench::line_plot single{.title = "One point, and equal values"};
        single.series.push_back({.name = "one", .x = {3}, .y = {7}, .markers = true});
        single.series.push_back({.name = "flat", .x = {3, 3}, .y = {7, 7}});
        r.add_plot("single", single);

        r.add_table("results", {"stage", "items/s", "share"}, {{"decode", "2215", "99%"}, {"<script>", "n/a"}});
        r.add_facts("machine", bench::machine_facts({"/"}));
        r.add_code("config", "{\"batch\": 256, \"endpoint\": \"http://127.0.0.1:9000\", \"note\": \"</pre> <b>\"}");
        r.write(argv[1]);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "conveyor-bench-report-sample: %s\n", e.what());
        return 1;
    }
    return 0;
}
