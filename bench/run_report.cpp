// run_report.cpp — the HTML report of `conveyor-bench run` (see run_bench.hpp): the run's
// metrics turned into the report module's plots and tables.
#include "run_bench.hpp"

#include "support/report.hpp"

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace conveyor::bench::run {

namespace {

namespace json = boost::json;

/// `v` as indented JSON, for people (Boost.JSON serializes on one line).
void pretty(const json::value& v, std::string& out, int indent)
{
    const std::string pad(static_cast<std::size_t>(indent) * 2, ' ');
    if (v.is_object() && !v.as_object().empty()) {
        out += "{\n";
        bool first = true;
        for (const auto& kv : v.as_object()) {
            if (!first) out += ",\n";
            first = false;
            out += pad + "  " + json::serialize(json::value(kv.key())) + ": ";
            pretty(kv.value(), out, indent + 1);
        }
        out += "\n" + pad + "}";
    } else {
        out += json::serialize(v);
    }
}

std::string fmt(const char* f, double v)
{
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

/** Items per second of stage `i` between consecutive snapshots, `t0` seconds added to x.
    Intervals shorter than `min_dt` are merged into the next (the final snapshot, taken as
    the run stops just after a periodic one, would otherwise end every line with a drop). */
void add_rates(const std::vector<stats_snapshot>& series, std::size_t i, double t0, double min_dt, plot_series& out)
{
    double prev_t = 0;
    std::uint64_t prev_items = 0;
    for (const auto& s : series) {
        if (i >= s.stages.size()) continue;
        const double t = std::chrono::duration<double>(s.elapsed).count();
        if (t - prev_t < min_dt) continue;
        out.x.push_back(t0 + t);
        out.y.push_back(static_cast<double>(s.stages[i].items - std::min(prev_items, s.stages[i].items)) / (t - prev_t));
        prev_t = t;
        prev_items = s.stages[i].items;
    }
}

/// The cumulative distribution of a latency histogram: x in ms (each bucket's upper end), y in [0, 1].
plot_series latency_cdf(const latency_histogram::counts& h, std::string name)
{
    plot_series s{.name = std::move(name)};
    if (h.count == 0) return s;
    // A step per occupied bucket: flat up to its low end, rising across it (values are
    // known only to the bucket), so empty ranges between buckets stay flat.
    std::uint64_t cum = 0;
    for (std::size_t b = 0; b < h.buckets.size(); ++b) {
        if (h.buckets[b] == 0) continue;
        const double lo = latency_histogram::bucket_low(b);
        const double hi = b + 1 < h.buckets.size() ? latency_histogram::bucket_low(b + 1) : lo * 1.2;
        if (s.x.empty() || s.x.back() < lo / 1e6) {
            s.x.push_back(lo / 1e6);
            s.y.push_back(static_cast<double>(cum) / static_cast<double>(h.count));
        }
        cum += h.buckets[b];
        s.x.push_back(hi / 1e6);
        s.y.push_back(static_cast<double>(cum) / static_cast<double>(h.count));
    }
    return s;
}

} // namespace

std::string build_report(const outcome& o)
{
    const run_config& c = o.config;
    html_report r("conveyor-bench run: " + c.storage.type + ", " + c.access + " access, work " + c.work.kind);
    {
        std::string what = "Storage " + c.storage.type + ", access " + c.access + ", work " + c.work.kind + ", in_flight " +
                           std::to_string(c.in_flight) + ", " + std::to_string(c.epochs) + " epoch(s); configuration from " + c.origin + ".";
        if (o.sweep) {
            what += " Sweep of " + o.sweep->field + " over";
            for (const auto& p : o.sweep->points) what += " " + fmt("%g", p.value);
            what += ".";
        }
        r.add_paragraph(what);
    }

    // Throughput over time: per stage for a single run (epochs one after another), per
    // point (the source) for a sweep.
    {
        line_plot p{.title = "Throughput over time", .x_label = "seconds", .y_label = "items/s (batches/s for batch stages)"};
        const double min_dt = 0.5 * static_cast<double>(c.stats_interval_ms) / 1e3;
        if (!o.sweep && !o.runs.empty()) {
            const auto& rr = o.runs.front();
            double t0 = 0;
            for (const auto& e : rr.epochs) {
                for (std::size_t i = 0; i < e.final.stages.size(); ++i) {
                    plot_series s{.name = e.final.stages[i].name + (rr.epochs.size() > 1 ? " (epoch " + std::to_string(e.epoch) + ")" : "")};
                    std::vector<stats_snapshot> series = e.series;
                    series.push_back(e.final);
                    add_rates(series, i, t0, min_dt, s);
                    p.series.push_back(std::move(s));
                }
                t0 += std::chrono::duration<double>(e.final.elapsed).count();
            }
        } else {
            for (const auto& rr : o.runs) {
                double t0 = 0;
                for (const auto& e : rr.epochs) {
                    const stage_stats* src = source_of(e.final);
                    if (!src) continue;
                    const auto i = static_cast<std::size_t>(src - e.final.stages.data());
                    plot_series s{.name = src->name + " " + rr.label};
                    std::vector<stats_snapshot> series = e.series;
                    series.push_back(e.final);
                    add_rates(series, i, t0, min_dt, s);
                    p.series.push_back(std::move(s));
                    t0 += std::chrono::duration<double>(e.final.elapsed).count();
                }
            }
        }
        p.y_min = 0;
        r.add_heading("Throughput");
        r.add_plot("throughput", p);
    }

    // Latency CDF per source (per point for a sweep).
    {
        line_plot p{.title = "Request latency (CDF)", .x_label = "latency (ms)", .y_label = "fraction of requests", .log_x = true};
        p.y_min = 0;
        for (const auto& rr : o.runs) {
            const auto h = rr.source_latency();
            std::string name = "source";
            if (!rr.epochs.empty())
                if (const stage_stats* src = source_of(rr.epochs.front().final)) name = src->name;
            if (o.sweep) name += " " + rr.label;
            if (h.count) p.series.push_back(latency_cdf(h, name));
        }
        r.add_heading("Latency");
        if (p.series.empty()) r.add_paragraph("No source recorded request latencies (the shard source streams whole shards).");
        r.add_plot("latency-cdf", p);
    }

    // Shares of the run (a sweep: the knee's point, else the last).
    {
        const run_result* rr = o.runs.empty() ? nullptr : &o.runs.back();
        if (o.sweep && o.sweep->knee) rr = &o.runs[*o.sweep->knee];
        share_plot p{.title = "Where each stage's time went"};
        if (rr && !rr->epochs.empty()) {
            const auto& s = rr->epochs.back().final;
            const auto neck = bottleneck(s);
            for (std::size_t i = 0; i < s.stages.size(); ++i)
                p.rows.push_back({.name = s.stages[i].name,
                                  .busy = s.stages[i].busy_share(),
                                  .starved = s.stages[i].starved_share(),
                                  .blocked = s.stages[i].blocked_share(),
                                  .bottleneck = neck && *neck == i});
            p.title += " (" + (o.sweep ? rr->label : std::string("last epoch")) + ")";
        }
        r.add_heading("Stages");
        r.add_plot("shares", p);
    }

    // The sweep curve against Little's law.
    if (o.sweep) {
        const auto& sw = *o.sweep;
        line_plot p{.title = "Throughput against " + sw.field, .x_label = sw.field, .y_label = "items/s"};
        plot_series measured{.name = "measured", .markers = true}, bound{.name = "Little's law: in_flight / mean latency", .dashed = true};
        double lo = 0, hi = 0;
        for (const auto& pt : sw.points) {
            measured.x.push_back(pt.value);
            measured.y.push_back(pt.items_per_s);
            if (pt.littles_law_items_per_s > 0) {
                bound.x.push_back(pt.value);
                bound.y.push_back(pt.littles_law_items_per_s);
            }
            lo = lo == 0 ? pt.value : std::min(lo, pt.value);
            hi = std::max(hi, pt.value);
        }
        // Sort by x (points run in the order given).
        auto sort_series = [](plot_series& s) {
            std::vector<std::size_t> idx(s.x.size());
            for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
            std::sort(idx.begin(), idx.end(), [&](auto a, auto b) { return s.x[a] < s.x[b]; });
            plot_series t = s;
            for (std::size_t i = 0; i < idx.size(); ++i) t.x[i] = s.x[idx[i]], t.y[i] = s.y[idx[i]];
            s = std::move(t);
        };
        sort_series(measured);
        sort_series(bound);
        p.log_x = lo > 0 && hi / lo >= 8;
        p.y_min = 0;
        p.series = {measured, bound};
        if (sw.knee) p.marks.push_back({sw.points[*sw.knee].value, "knee: " + sw.field + " = " + fmt("%g", sw.points[*sw.knee].value)});
        r.add_heading("Sweep");
        r.add_plot("sweep", p);
    }

    // Summary table.
    {
        std::vector<std::vector<std::string>> rows;
        for (const auto& rr : o.runs)
            for (const auto& e : rr.epochs) {
                const stage_stats* src = source_of(e.final);
                const auto neck = bottleneck(e.final);
                rows.push_back({rr.label, std::to_string(e.epoch), std::to_string(e.items), fmt("%.2f", e.seconds),
                                fmt("%.0f", e.seconds > 0 ? static_cast<double>(e.items) / e.seconds : 0.0),
                                fmt("%.1f", e.seconds > 0 ? static_cast<double>(e.bytes) / 1e6 / e.seconds : 0.0),
                                src && src->latency.count ? fmt("%.2f", src->latency.quantile_ns(0.5) / 1e6) : "-",
                                src && src->latency.count ? fmt("%.2f", src->latency.quantile_ns(0.99) / 1e6) : "-",
                                neck ? e.final.stages[*neck].name : "consumer"});
            }
        r.add_heading("Summary");
        r.add_table("summary", {"run", "epoch", "items", "seconds", "items/s", "MB/s", "p50 ms", "p99 ms", "bottleneck"}, rows);
    }

    // What produced it.
    {
        std::string text;
        pretty(c.effective, text, 0);
        if (o.sweep) {
            text += "\n\nswept: " + o.sweep->field + " =";
            for (const auto& p : o.sweep->points) text += " " + fmt("%g", p.value);
        }
        r.add_heading("Configuration");
        r.add_code("config", text);
        std::vector<std::string> paths;
        if (c.storage.type == "fs") paths = c.storage.dirs;
        auto facts = machine_facts(paths);
        facts.emplace_back("storage", c.storage.type);
        if (c.storage.type == "s3") {
            facts.emplace_back("s3 endpoint", c.storage.endpoint.empty() ? std::string("(from the environment or AWS)") : c.storage.endpoint);
            facts.emplace_back("s3 bucket", c.storage.bucket);
        }
        if (c.storage.type == "synthetic")
            facts.emplace_back("synthetic source", std::to_string(c.storage.items) + " items of " + std::to_string(c.storage.size) +
                                                       " bytes, " + fmt("%g", c.storage.latency_ms) + " ms per read");
        r.add_heading("Machine");
        r.add_facts("machine", facts);
    }
    return r.str();
}

} // namespace conveyor::bench::run
