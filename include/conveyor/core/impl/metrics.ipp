// conveyor/core/impl/metrics.ipp — histogram buckets, snapshot arithmetic, the bottleneck rule.
#ifndef CONVEYOR_CORE_IMPL_METRICS_IPP
#define CONVEYOR_CORE_IMPL_METRICS_IPP

#include <conveyor/core/metrics.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>

namespace conveyor {

CONVEYOR_DECL std::size_t latency_histogram::bucket_of(std::uint64_t ns) noexcept
{
    if (ns < 4) return static_cast<std::size_t>(ns); // 0..3 exactly
    const int hi = std::bit_width(ns) - 1;           // ns in [2^hi, 2^(hi+1)), hi >= 2
    const auto quarter = static_cast<std::size_t>((ns >> (hi - 2)) & 3);
    return std::min<std::size_t>(static_cast<std::size_t>(hi) * 4 + quarter - 4, bucket_count - 1);
}

CONVEYOR_DECL double latency_histogram::bucket_low(std::size_t b) noexcept
{
    if (b < 4) return static_cast<double>(b);
    const auto hi = static_cast<int>((b + 4) / 4);
    const auto quarter = static_cast<double>((b + 4) % 4);
    return std::ldexp(1.0 + quarter / 4.0, hi);
}

CONVEYOR_DECL latency_histogram::counts latency_histogram::read() const noexcept
{
    counts c;
    for (std::size_t i = 0; i < bucket_count; ++i) c.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
    c.sum_ns = sum_ns_.load(std::memory_order_relaxed);
    c.count = 0; // the buckets' own total, so quantiles agree with them
    for (auto n : c.buckets) c.count += n;
    return c;
}

CONVEYOR_DECL double latency_histogram::counts::quantile_ns(double q) const noexcept
{
    if (count == 0) return 0.0;
    q = std::clamp(q, 0.0, 1.0);
    const double target = q * static_cast<double>(count);
    double seen = 0;
    for (std::size_t b = 0; b < bucket_count; ++b) {
        if (buckets[b] == 0) continue;
        const double n = static_cast<double>(buckets[b]);
        if (seen + n >= target) {
            const double lo = bucket_low(b);
            const double hi = b + 1 < bucket_count ? bucket_low(b + 1) : lo * 1.25;
            return lo + (hi - lo) * std::clamp((target - seen) / n, 0.0, 1.0);
        }
        seen += n;
    }
    return bucket_low(bucket_count - 1);
}

CONVEYOR_DECL latency_histogram::counts latency_histogram::counts::since(const counts& earlier) const noexcept
{
    counts d;
    for (std::size_t i = 0; i < bucket_count; ++i) d.buckets[i] = buckets[i] - std::min(buckets[i], earlier.buckets[i]);
    d.count = count - std::min(count, earlier.count);
    d.sum_ns = sum_ns - std::min(sum_ns, earlier.sum_ns);
    return d;
}

CONVEYOR_DECL const stage_stats* stats_snapshot::find(std::string_view name) const noexcept
{
    for (const auto& s : stages)
        if (s.name == name) return &s;
    return nullptr;
}

CONVEYOR_DECL stats_snapshot stats_snapshot::since(const stats_snapshot& earlier) const
{
    auto sub = [](auto a, auto b) { return a > b ? a - b : decltype(a){}; };
    stats_snapshot d = *this;
    d.elapsed = sub(elapsed, earlier.elapsed);
    d.delivered = sub(delivered, earlier.delivered);
    d.consumer_waited = sub(consumer_waited, earlier.consumer_waited);
    d.skipped = sub(skipped, earlier.skipped);
    // Stages are matched by position: a run's stages are fixed once it started.
    for (std::size_t i = 0; i < d.stages.size() && i < earlier.stages.size(); ++i) {
        auto& s = d.stages[i];
        const auto& e = earlier.stages[i];
        if (s.name != e.name) continue;
        s.items = sub(s.items, e.items);
        s.bytes = sub(s.bytes, e.bytes);
        s.elapsed = sub(s.elapsed, e.elapsed);
        s.active = sub(s.active, e.active);
        s.starved = sub(s.starved, e.starved);
        s.blocked = sub(s.blocked, e.blocked);
        s.busy = sub(s.active, s.starved + s.blocked);
        std::uint64_t samples = 0, earlier_samples = 0;
        for (std::size_t k = 0; k < s.queue_histogram.size(); ++k) {
            samples += s.queue_histogram[k];
            earlier_samples += e.queue_histogram[k];
            s.queue_histogram[k] = sub(s.queue_histogram[k], e.queue_histogram[k]);
        }
        const double sum = s.queue_mean * static_cast<double>(samples) - e.queue_mean * static_cast<double>(earlier_samples);
        s.queue_mean = samples > earlier_samples ? std::max(0.0, sum / static_cast<double>(samples - earlier_samples)) : 0.0;
        s.retries = sub(s.retries, e.retries);
        s.latency = s.latency.since(e.latency);
    }
    return d;
}

CONVEYOR_DECL std::optional<std::size_t> bottleneck(const stats_snapshot& s)
{
    double top = 0;
    for (const auto& st : s.stages) top = std::max(top, st.busy_share());
    if (top < 0.5) return std::nullopt;
    // Shares within 2 points of the top are a tie, decided by how much the stage after it
    // starves (for the last stage, the consumer).
    std::optional<std::size_t> best;
    double best_starves = -1;
    for (std::size_t i = 0; i < s.stages.size(); ++i) {
        if (s.stages[i].busy_share() < top - 0.02) continue;
        double starves = 0;
        if (i + 1 < s.stages.size()) starves = s.stages[i + 1].starved_share();
        else if (s.elapsed.count() > 0) starves = static_cast<double>(s.consumer_waited.count()) / static_cast<double>(s.elapsed.count());
        if (starves > best_starves) {
            best = i;
            best_starves = starves;
        }
    }
    return best;
}

CONVEYOR_DECL std::string format_shares(const stats_snapshot& s)
{
    const auto b = bottleneck(s);
    std::string line;
    for (std::size_t i = 0; i < s.stages.size(); ++i) {
        if (i) line += " | ";
        line += s.stages[i].name;
        char pct[16];
        std::snprintf(pct, sizeof pct, " %d%%", static_cast<int>(std::lround(s.stages[i].busy_share() * 100)));
        line += pct;
        if (b && *b == i) line += " (bottleneck)";
    }
    return line;
}

} // namespace conveyor

#endif
