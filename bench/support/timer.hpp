// bench/support/timer.hpp — wall-clock stopwatch, CPU time and peak memory of the process.
#ifndef CONVEYOR_BENCH_SUPPORT_TIMER_HPP
#define CONVEYOR_BENCH_SUPPORT_TIMER_HPP

#include <chrono>
#include <cstdint>

namespace conveyor::bench {

/** Measures elapsed wall-clock time on the monotonic clock.

    Starts when constructed; `restart()` starts again.

    @par Thread Safety
    Distinct objects: safe. Shared objects: safe to read, unsafe to restart concurrently.
*/
class stopwatch {
public:
    using clock = std::chrono::steady_clock;

    stopwatch() noexcept : start_(clock::now()) {}

    /// Starts timing again from now.
    void restart() noexcept { start_ = clock::now(); }

    /// Time since the start.
    std::chrono::nanoseconds elapsed() const noexcept { return clock::now() - start_; }

    /// Time since the start, in seconds.
    double seconds() const noexcept { return std::chrono::duration<double>(elapsed()).count(); }

    /// Time since the start, in whole nanoseconds.
    std::int64_t nanoseconds() const noexcept { return elapsed().count(); }

    /// The moment timing started.
    clock::time_point started() const noexcept { return start_; }

private:
    clock::time_point start_;
};

/** CPU time used and peak resident memory of the whole process (all its threads), from
    `getrusage(RUSAGE_SELF)`.

    CPU time and fault counts only mean something as differences: take one before and one
    after the work and subtract (`after - before`). Peak memory is a high-water mark since the
    process started; it never goes down, so it is reported as it is, not as a difference.
*/
struct resource_usage {
    double user_s = 0;              ///< CPU seconds in user mode
    double system_s = 0;            ///< CPU seconds in the kernel on the process's behalf
    std::int64_t max_rss_bytes = 0; ///< peak resident set size so far
    std::int64_t minor_faults = 0;  ///< page faults served without I/O (first touch of new memory)
    std::int64_t major_faults = 0;  ///< page faults that had to read from storage
    std::int64_t voluntary_switches = 0;   ///< context switches of threads that waited (sleep, lock, I/O)
    std::int64_t involuntary_switches = 0; ///< context switches of threads that were preempted

    /// User plus system CPU seconds.
    double cpu_s() const noexcept { return user_s + system_s; }
    /// Peak resident set size in megabytes (10^6 bytes).
    double max_rss_mb() const noexcept { return static_cast<double>(max_rss_bytes) / 1e6; }

    /// The CPU time and faults between `before` and `after`; the peak memory of `after`.
    friend resource_usage operator-(const resource_usage& after, const resource_usage& before) noexcept;
};

/// The process's resource usage now (all zeros if `getrusage` fails, which it does not
/// on Linux for `RUSAGE_SELF`).
resource_usage usage_now() noexcept;

/// The resident set size now, in bytes (from /proc/self/statm; 0 if unreadable).
std::int64_t current_rss_bytes() noexcept;

} // namespace conveyor::bench

#endif
