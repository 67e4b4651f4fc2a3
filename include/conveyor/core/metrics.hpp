// conveyor/core/metrics.hpp — per-stage metrics of a run: items, bytes, busy / starved /
// blocked time, queue occupancy, and for sources requests in flight, retries and latency.
#ifndef CONVEYOR_CORE_METRICS_HPP
#define CONVEYOR_CORE_METRICS_HPP

#include <conveyor/detail/config.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <ranges>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

namespace conveyor {

class buffer;
class slice;

/** Bytes of a `buffer` or a `slice` item (found by argument-dependent lookup, like a
    user's own `byte_size(const my_item&)`). */
template <class B>
    requires(std::same_as<B, buffer> || std::same_as<B, slice>)
std::size_t byte_size(const B& b) noexcept
{
    return b.size();
}

namespace detail {

/// Nanoseconds on the steady clock (the metrics' one time base).
inline std::int64_t now_ns() noexcept
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/** A cheaper clock for timing a channel's waits, which come up to twice per batch handed
    over: the CPU's invariant time-stamp counter on x86-64, which reads in a fraction of
    the steady clock's time (the steady clock goes through the vDSO, and on a VM often
    through a paravirtual clock), otherwise the steady clock itself. Its ticks are
    converted to nanoseconds when the waits are read (`ns_per_tick`). */
struct wait_clock {
    /// True where ticks are time-stamp counter cycles (else nanoseconds).
    static bool uses_tsc() noexcept
    {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        static const bool invariant = [] {
            unsigned a = 0, b = 0, c = 0, d = 0;
            if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u) return false;
            __get_cpuid(0x80000007u, &a, &b, &c, &d);
            return (d & (1u << 8)) != 0; // invariant TSC: one constant rate on every core
        }();
        return invariant;
#else
        return false;
#endif
    }
    static std::int64_t now() noexcept
    {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (uses_tsc()) return static_cast<std::int64_t>(__builtin_ia32_rdtsc());
#endif
        return now_ns();
    }
    /// Takes the reference point of `ns_per_tick` (each channel calls it when created).
    static void start() noexcept { (void)first(); }
    /// Nanoseconds per tick, from the ticks and nanoseconds passed since `start` was first
    /// called, so measured over the whole life of the channels so far.
    static double ns_per_tick() noexcept
    {
        if (!uses_tsc()) return 1.0;
        const auto& first = wait_clock::first();
        const auto [t, ns] = pair_now();
        if (t <= first.first || ns <= first.second) return 1.0 / nominal_ghz;
        return static_cast<double>(ns - first.second) / static_cast<double>(t - first.first);
    }

private:
    static constexpr double nominal_ghz = 2.0; // used only before a single tick has passed
    static const std::pair<std::int64_t, std::int64_t>& first() noexcept
    {
        static const std::pair<std::int64_t, std::int64_t> p = pair_now();
        return p;
    }
    // A tick count and the steady clock read together: retried when a read was interrupted.
    static std::pair<std::int64_t, std::int64_t> pair_now() noexcept
    {
        std::pair<std::int64_t, std::int64_t> best{0, 0};
        std::int64_t best_gap = -1;
        for (int i = 0; i < 4; ++i) {
            const auto a = now();
            const auto ns = now_ns();
            const auto b = now();
            if (best_gap < 0 || b - a < best_gap) {
                best_gap = b - a;
                best = {a + (b - a) / 2, ns};
            }
        }
        return best;
    }
};

/** How long a thread that is about to sleep for want of work spins (or polls) first, so
    work handed over from another thread is caught without a futex sleep and wake-up: up
    to 20 us after a spin that found what it waited for, half the last spin after one that
    did not (down to 1/64 of 20 us), and the full 20 us every 16th time, to notice when the
    other side speeds up. A thread that waits on slow work so hardly spins, and takes no
    core from the threads doing it. Used by the range-for consumer's channel wait and by
    the I/O lanes; one per waiting thread (not thread-safe). */
class spin_budget {
public:
    /// The next spin's length, in `wait_clock` ticks.
    std::int64_t next() noexcept { return ++spins_ % 16 == 0 ? max_ticks() : ticks_; }
    /// What the spin just made found: what it waited for (`hit`), or not.
    void record(bool hit) noexcept { ticks_ = hit ? max_ticks() : std::max(ticks_ / 2, max_ticks() / 64); }

private:
    static std::int64_t max_ticks() noexcept
    {
        static const auto ticks = static_cast<std::int64_t>(20'000 / wait_clock::ns_per_tick());
        return ticks;
    }
    std::int64_t ticks_ = max_ticks();
    std::uint64_t spins_ = 0;
};

/** Whether the bytes of a `T` are known. In this order:
    - a `byte_size(const T&)` found by argument-dependent lookup (the customization point:
      declare it beside your item type);
    - a data member `data` with `size()` (`blob`);
    - a member `fields`, a range of elements with a data member `data` with `size()`
      (`shard::sample`: the sum of its fields);
    - a range of items whose bytes are known (a batch: the sum). */
template <class T>
constexpr bool has_byte_size() noexcept
{
    if constexpr (requires(const T& x) { { byte_size(x) } -> std::convertible_to<std::size_t>; }) {
        return true;
    } else if constexpr (requires(const T& x) { { x.data.size() } -> std::convertible_to<std::size_t>; }) {
        return true;
    } else if constexpr (requires(const T& x) { { std::ranges::begin(x.fields)->data.size() } -> std::convertible_to<std::size_t>; }) {
        return true;
    } else if constexpr (std::ranges::input_range<T>) {
        using E = std::remove_cv_t<std::ranges::range_value_t<T>>;
        if constexpr (std::is_arithmetic_v<E> || std::same_as<E, std::remove_cv_t<T>>) return false;
        else return has_byte_size<E>();
    } else {
        return false;
    }
}

/// The bytes of `x` (see `has_byte_size`); 0 where they are not known.
template <class T>
std::size_t item_bytes(const T& x)
{
    if constexpr (requires { { byte_size(x) } -> std::convertible_to<std::size_t>; }) {
        return static_cast<std::size_t>(byte_size(x));
    } else if constexpr (requires { { x.data.size() } -> std::convertible_to<std::size_t>; }) {
        return static_cast<std::size_t>(x.data.size());
    } else if constexpr (requires { { std::ranges::begin(x.fields)->data.size() } -> std::convertible_to<std::size_t>; }) {
        std::size_t n = 0;
        for (const auto& f : x.fields) n += static_cast<std::size_t>(f.data.size());
        return n;
    } else if constexpr (has_byte_size<T>()) {
        std::size_t n = 0;
        for (const auto& e : x) n += item_bytes(e);
        return n;
    } else {
        return 0;
    }
}

} // namespace detail

/** A latency histogram: buckets of powers of two nanoseconds, each split in four
    (relative error of a quantile under 19%), from 1 ns to about 2.3 hours.

    @par Thread Safety
    Safe: `record` from any threads at once (relaxed atomic increments).
*/
class latency_histogram {
public:
    static constexpr std::size_t bucket_count = 4 * 43;

    /// What the histogram holds at one moment.
    struct counts {
        std::array<std::uint64_t, bucket_count> buckets{};
        std::uint64_t count = 0;  ///< values recorded
        std::uint64_t sum_ns = 0; ///< their sum

        /// The `q`-quantile (0 … 1) in nanoseconds, interpolated in its bucket; 0 when empty.
        CONVEYOR_DECL double quantile_ns(double q) const noexcept;
        /// The mean in nanoseconds; 0 when empty.
        double mean_ns() const noexcept { return count ? static_cast<double>(sum_ns) / static_cast<double>(count) : 0.0; }
        /// Counts recorded since `earlier` (a reading of the same histogram).
        CONVEYOR_DECL counts since(const counts& earlier) const noexcept;
    };

    void record(std::chrono::nanoseconds d) noexcept
    {
        const auto ns = static_cast<std::uint64_t>(d.count() > 0 ? d.count() : 0);
        buckets_[bucket_of(ns)].fetch_add(1, std::memory_order_relaxed);
        count_.fetch_add(1, std::memory_order_relaxed);
        sum_ns_.fetch_add(ns, std::memory_order_relaxed);
    }

    CONVEYOR_DECL counts read() const noexcept;

    /// The bucket of a value, and the smallest value of a bucket.
    CONVEYOR_DECL static std::size_t bucket_of(std::uint64_t ns) noexcept;
    CONVEYOR_DECL static double bucket_low(std::size_t b) noexcept;

private:
    std::array<std::atomic<std::uint64_t>, bucket_count> buckets_{};
    std::atomic<std::uint64_t> count_{0};
    std::atomic<std::uint64_t> sum_ns_{0};
};

/** What a source reports beyond what every stage counts: requests in flight, retries and
    the latency of each request. `keyed_source` (and so the file and S3 sources) keeps one
    for itself; a source of another kind gets one from `run_context::source_metrics_of(sink)`.

    @par Thread Safety
    Safe.
*/
class source_metrics {
public:
    /// A request started.
    void request_started() noexcept { in_flight_.fetch_add(1, std::memory_order_relaxed); }
    /// A request finished after `latency` (whether it gave an item or an error).
    void request_finished(std::chrono::nanoseconds latency) noexcept
    {
        in_flight_.fetch_sub(1, std::memory_order_relaxed);
        latency_.record(latency);
    }
    /// A request ended by the run's cancellation: no longer in flight, and no latency (it
    /// measured how long the run went on, not the storage).
    void request_abandoned() noexcept { in_flight_.fetch_sub(1, std::memory_order_relaxed); }
    /// Requests that were retries of earlier ones.
    void add_retries(std::uint64_t n) noexcept { retries_.fetch_add(n, std::memory_order_relaxed); }
    /** Where retries are counted elsewhere (an HTTP client's counters): `f()` is read with
        each snapshot and added to what `add_retries` counted. Set it before the run starts. */
    void retries_from(std::function<std::uint64_t()> f) { retries_fn_ = std::move(f); }

    std::int64_t in_flight() const noexcept { return in_flight_.load(std::memory_order_relaxed); }
    std::uint64_t retries() const { return retries_.load(std::memory_order_relaxed) + (retries_fn_ ? retries_fn_() : 0); }
    const latency_histogram& latency() const noexcept { return latency_; }

private:
    std::atomic<std::int64_t> in_flight_{0};
    std::atomic<std::uint64_t> retries_{0};
    std::function<std::uint64_t()> retries_fn_;
    latency_histogram latency_;
};

/** What one stage of a run did so far.

    Time is counted per task (a stage of N workers has N tasks): `active` is the tasks'
    time alive; of it, `starved` was spent waiting for input, `blocked` waiting for room in
    the stage's output queue, and `busy` is the rest: producing (computing, or waiting for
    its own I/O, which is a source's work), including time waiting for a free thread. The
    shares are of `active`, so 100% busy means every worker always had work. */
struct stage_stats {
    std::string name;          ///< the stage's name ("files", "map", "decode_image", …)
    std::size_t workers = 1;   ///< tasks producing its items at once
    bool finished = false;     ///< its output has ended
    std::uint64_t items = 0;   ///< items sent downstream
    std::uint64_t bytes = 0;   ///< their bytes, where `bytes_known`
    bool bytes_known = false;  ///< whether the item type's bytes are known (see `detail::has_byte_size`)
    std::chrono::nanoseconds elapsed{0}; ///< from the stage's start to its end (or now)
    std::chrono::nanoseconds active{0};  ///< its tasks' time alive, summed over workers
    std::chrono::nanoseconds busy{0};    ///< `active` less `starved` and `blocked`
    std::chrono::nanoseconds starved{0}; ///< time its tasks waited for input
    std::chrono::nanoseconds blocked{0}; ///< time its tasks waited for room downstream

    std::size_t queue_capacity = 0; ///< its output queue's capacity
    std::size_t queue_size = 0;     ///< items in it now
    /** How full the queue was each time the next stage came to take from it: empty,
        up to 1/4, 1/2, 3/4, less than full, full. */
    std::array<std::uint64_t, 6> queue_histogram{};
    double queue_mean = 0; ///< mean items in it at those times

    bool is_source = false;       ///< has the source fields below
    std::int64_t in_flight = 0;   ///< requests in flight now
    std::uint64_t retries = 0;    ///< requests that were retries
    latency_histogram::counts latency; ///< per request

    double busy_share() const noexcept { return share(busy); }
    double starved_share() const noexcept { return share(starved); }
    double blocked_share() const noexcept { return share(blocked); }
    /// Items per second over `elapsed`.
    double items_per_second() const noexcept
    {
        return elapsed.count() > 0 ? static_cast<double>(items) * 1e9 / static_cast<double>(elapsed.count()) : 0.0;
    }

private:
    double share(std::chrono::nanoseconds t) const noexcept
    {
        return active.count() > 0 ? static_cast<double>(t.count()) / static_cast<double>(active.count()) : 0.0;
    }
};

/** A snapshot of a run's metrics: every stage, in pipeline order (sources first), and the
    consumer that reads the last stage's output. Each stage's figures are read together
    (under its queue's lock); stages are read one after another. */
struct stats_snapshot {
    std::chrono::nanoseconds elapsed{0}; ///< since the run started
    std::vector<stage_stats> stages;     ///< in pipeline order
    std::uint64_t delivered = 0;         ///< items the consumer took
    std::chrono::nanoseconds consumer_waited{0}; ///< time the consumer waited for them
    std::uint64_t skipped = 0;           ///< items skipped on error (`run_stats::skipped`)

    /// The first stage called `name`, or null.
    CONVEYOR_DECL const stage_stats* find(std::string_view name) const noexcept;
    /** The figures of the interval since `earlier`, a snapshot of the same run (counts,
        times and histograms subtracted; queue sizes, in flight and `finished` are now's):
        for progress lines that show the recent shares rather than the whole run's. */
    CONVEYOR_DECL stats_snapshot since(const stats_snapshot& earlier) const;
};

/** The stage that limits the run: of the stages busy at least half of their time, the
    busiest (ties: the one whose downstream starves most). Upstream of it stages are
    blocked, downstream of it they starve. Nullopt when no stage is that busy: the
    consumer is the limit (or the run is idle). */
CONVEYOR_DECL std::optional<std::size_t> bottleneck(const stats_snapshot& s);

/// Each stage's busy share on one line, the bottleneck marked, e.g.
/// `files 12% | decode 95% (bottleneck) | batch 3%`.
CONVEYOR_DECL std::string format_shares(const stats_snapshot& s);

/// Called with snapshots while a run goes (see `pipeline::on_stats`).
using stats_callback = std::function<void(const stats_snapshot&)>;

} // namespace conveyor

#if CONVEYOR_HEADER_ONLY
#include <conveyor/core/impl/metrics.ipp>
#endif

#endif
