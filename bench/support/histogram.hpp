// bench/support/histogram.hpp — latency histograms with percentiles, and a thread-safe one.
#ifndef CONVEYOR_BENCH_SUPPORT_HISTOGRAM_HPP
#define CONVEYOR_BENCH_SUPPORT_HISTOGRAM_HPP

#include <array>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

namespace conveyor::bench {

/** A histogram of durations in nanoseconds, with percentiles.

    Buckets are log-linear (the HdrHistogram layout): values below 64 ns are exact, and
    each power of two above is split into 64 equal buckets, so a reported percentile is
    within 1/64 (1.6 %) of the true value, across the whole range of `std::uint64_t`.
    Recording is a few instructions and never allocates; the bucket array (30 KB) is
    allocated once, when the histogram is made.

    The exact minimum, maximum and sum are kept besides the buckets.

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe (use `concurrent_histogram` to record
    from many threads).
*/
class latency_histogram {
public:
    /// Sub-buckets per power of two: 2^6 = 64, which bounds the relative error by 1/64.
    static constexpr unsigned sub_bits = 6;
    static constexpr std::uint64_t sub_count = std::uint64_t{1} << sub_bits;
    /// Buckets in all: the exact ones below `sub_count` and 64 per octave above.
    static constexpr std::size_t bucket_count = (64 - sub_bits + 1) * sub_count;

    latency_histogram();

    latency_histogram(const latency_histogram& o);
    latency_histogram& operator=(const latency_histogram& o);
    latency_histogram(latency_histogram&&) noexcept = default;
    latency_histogram& operator=(latency_histogram&&) noexcept = default;

    /// Records one duration of `ns` nanoseconds.
    void record(std::uint64_t ns) noexcept;

    /// Records one duration (negative durations count as zero).
    template <class Rep, class Period>
    void record(std::chrono::duration<Rep, Period> d) noexcept
    {
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
        record(ns > 0 ? static_cast<std::uint64_t>(ns) : 0);
    }

    /// Adds all of `o`'s recordings to this one.
    void merge(const latency_histogram& o) noexcept;

    /// Forgets all recordings.
    void reset() noexcept;

    /// How many durations were recorded.
    std::uint64_t count() const noexcept { return count_; }
    /// The smallest recorded duration in nanoseconds (0 when empty).
    std::uint64_t min() const noexcept { return count_ ? min_ : 0; }
    /// The largest recorded duration in nanoseconds (0 when empty).
    std::uint64_t max() const noexcept { return max_; }
    /// The mean duration in nanoseconds (0 when empty).
    double mean() const noexcept { return count_ ? sum_ / static_cast<double>(count_) : 0.0; }

    /** The duration in nanoseconds below or at which `p` percent of the recordings lie
        (`p` in [0, 100]; 50 is the median). Returns the middle of the bucket that holds
        that rank, clamped to the exact minimum and maximum; 0 when empty. */
    double percentile(double p) const noexcept;

    /// `percentile(p)` in microseconds.
    double percentile_us(double p) const noexcept { return percentile(p) / 1e3; }

    /// The bucket that holds `ns`.
    static constexpr std::size_t bucket_of(std::uint64_t ns) noexcept
    {
        if (ns < sub_count) return static_cast<std::size_t>(ns);
        // Shift so that the value keeps sub_bits + 1 significant bits: [64, 128).
        const unsigned shift = static_cast<unsigned>(std::bit_width(ns)) - (sub_bits + 1);
        return static_cast<std::size_t>((shift + 1) * sub_count + ((ns >> shift) - sub_count));
    }

    /// The smallest value that lands in bucket `i`.
    static constexpr std::uint64_t bucket_low(std::size_t i) noexcept
    {
        if (i < sub_count) return i;
        const std::uint64_t shift = i / sub_count - 1;
        return (sub_count + i % sub_count) << shift;
    }

    /// The middle of bucket `i`'s range.
    static constexpr double bucket_middle(std::size_t i) noexcept
    {
        if (i < sub_count) return static_cast<double>(i);
        const std::uint64_t width = std::uint64_t{1} << (i / sub_count - 1);
        return static_cast<double>(bucket_low(i)) + static_cast<double>(width - 1) / 2.0;
    }

private:
    std::unique_ptr<std::array<std::uint64_t, bucket_count>> counts_;
    std::uint64_t count_ = 0;
    std::uint64_t min_ = std::numeric_limits<std::uint64_t>::max();
    std::uint64_t max_ = 0;
    double sum_ = 0;
};

/** A latency histogram that many threads record into at once, cheaply.

    Recordings go to one of several shards, each a `latency_histogram` behind its own
    mutex; a thread keeps to one shard (chosen round-robin the first time the thread
    records), so with no more threads than shards the mutexes are never contended and a
    recording costs an uncontended lock, about 20 ns. `merged()` adds the shards up.

    Meant for callbacks on I/O threads (e.g. a file source's `on_read`) that fire hundreds
    of thousands of times a second.

    @par Thread Safety
    Safe.
*/
class concurrent_histogram {
public:
    /// `shards` shards (at least one); more than the recording threads buys nothing.
    explicit concurrent_histogram(std::size_t shards = 16);

    /// Records one duration of `ns` nanoseconds.
    void record(std::uint64_t ns);

    /// Records one duration (negative durations count as zero).
    template <class Rep, class Period>
    void record(std::chrono::duration<Rep, Period> d)
    {
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
        record(ns > 0 ? static_cast<std::uint64_t>(ns) : 0);
    }

    /// The sum of all shards, as of now.
    latency_histogram merged() const;

    /// Forgets all recordings.
    void reset();

private:
    struct alignas(64) shard {
        mutable std::mutex mu;
        latency_histogram h;
    };

    static std::size_t my_shard() noexcept;

    std::vector<shard> shards_;
};

/** The median of `v` (the mean of the middle two for an even count); 0 when empty.
    Takes `v` by value because it reorders it. */
double median(std::vector<double> v);

} // namespace conveyor::bench

#endif
