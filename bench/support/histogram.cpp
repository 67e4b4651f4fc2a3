// bench/support/histogram.cpp — latency histograms (see histogram.hpp).
#include "support/histogram.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>

namespace conveyor::bench {

latency_histogram::latency_histogram() : counts_(std::make_unique<std::array<std::uint64_t, bucket_count>>())
{
    counts_->fill(0);
}

latency_histogram::latency_histogram(const latency_histogram& o)
    : counts_(std::make_unique<std::array<std::uint64_t, bucket_count>>(*o.counts_)), count_(o.count_),
      min_(o.min_), max_(o.max_), sum_(o.sum_)
{
}

latency_histogram& latency_histogram::operator=(const latency_histogram& o)
{
    if (this != &o) {
        *counts_ = *o.counts_;
        count_ = o.count_;
        min_ = o.min_;
        max_ = o.max_;
        sum_ = o.sum_;
    }
    return *this;
}

void latency_histogram::record(std::uint64_t ns) noexcept
{
    ++(*counts_)[bucket_of(ns)];
    ++count_;
    min_ = std::min(min_, ns);
    max_ = std::max(max_, ns);
    sum_ += static_cast<double>(ns);
}

void latency_histogram::merge(const latency_histogram& o) noexcept
{
    for (std::size_t i = 0; i < bucket_count; ++i) (*counts_)[i] += (*o.counts_)[i];
    count_ += o.count_;
    min_ = std::min(min_, o.min_);
    max_ = std::max(max_, o.max_);
    sum_ += o.sum_;
}

void latency_histogram::reset() noexcept
{
    counts_->fill(0);
    count_ = 0;
    min_ = std::numeric_limits<std::uint64_t>::max();
    max_ = 0;
    sum_ = 0;
}

double latency_histogram::percentile(double p) const noexcept
{
    if (count_ == 0) return 0.0;
    p = std::clamp(p, 0.0, 100.0);
    // The rank of the wanted recording, 1-based: the smallest r with r >= p% of count.
    auto rank = static_cast<std::uint64_t>(std::ceil(p / 100.0 * static_cast<double>(count_)));
    rank = std::clamp<std::uint64_t>(rank, 1, count_);
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < bucket_count; ++i) {
        seen += (*counts_)[i];
        if (seen >= rank) {
            const double v = bucket_middle(i);
            return std::clamp(v, static_cast<double>(min_), static_cast<double>(max_));
        }
    }
    return static_cast<double>(max_);
}

concurrent_histogram::concurrent_histogram(std::size_t shards) : shards_(std::max<std::size_t>(shards, 1)) {}

void concurrent_histogram::record(std::uint64_t ns)
{
    auto& s = shards_[my_shard() % shards_.size()];
    std::lock_guard lk(s.mu);
    s.h.record(ns);
}

latency_histogram concurrent_histogram::merged() const
{
    latency_histogram all;
    for (auto& s : shards_) {
        std::lock_guard lk(s.mu);
        all.merge(s.h);
    }
    return all;
}

void concurrent_histogram::reset()
{
    for (auto& s : shards_) {
        std::lock_guard lk(s.mu);
        s.h.reset();
    }
}

std::size_t concurrent_histogram::my_shard() noexcept
{
    static std::atomic<std::size_t> next{0};
    thread_local const std::size_t mine = next.fetch_add(1, std::memory_order_relaxed);
    return mine;
}

double median(std::vector<double> v)
{
    if (v.empty()) return 0.0;
    const std::size_t mid = v.size() / 2;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
    const double hi = v[mid];
    if (v.size() % 2 == 1) return hi;
    const double lo = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
    return (lo + hi) / 2.0;
}

} // namespace conveyor::bench
