// bench/support/progress.hpp — a rate-limited progress line for long runs.
#ifndef CONVEYOR_BENCH_SUPPORT_PROGRESS_HPP
#define CONVEYOR_BENCH_SUPPORT_PROGRESS_HPP

#include "support/timer.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace conveyor::bench {

/** A progress line on a terminal (standard error by default), for runs long enough that
    silence would look like a hang.

    `update()` is cheap enough to call for every item: it looks at the clock and prints
    only every `interval` (a quarter second on a terminal, where the line is redrawn in
    place with a carriage return; five seconds otherwise, one line each, so that logs stay
    short). Nothing is printed for runs shorter than the first interval. `finish()` ends
    the line; the destructor calls it.

    The line reads e.g. `gen-files: 12000/20000 (60.0%)  1.32 GB  2750/s  ETA 3s`.

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe (update from one thread).
*/
class progress {
public:
    /** `label` starts the line; `total` is the item count expected (0: unknown, no
        percentage or ETA). */
    explicit progress(std::string label, std::uint64_t total = 0, std::FILE* out = stderr);
    progress(const progress&) = delete;
    progress& operator=(const progress&) = delete;
    ~progress();

    /// Reports that `done` items and `bytes` bytes are done so far (both running totals).
    void update(std::uint64_t done, std::uint64_t bytes = 0);

    /// Ends the progress line (prints the final state if anything was printed before).
    void finish();

    /// Seconds since the progress line was made.
    double seconds() const noexcept { return clock_.seconds(); }

private:
    void print(bool last);

    std::string label_;
    std::uint64_t total_;
    std::FILE* out_;
    bool tty_;
    std::chrono::nanoseconds interval_;
    std::chrono::nanoseconds next_;
    stopwatch clock_;
    std::uint64_t done_ = 0;
    std::uint64_t bytes_ = 0;
    bool printed_ = false;
    bool finished_ = false;
};

} // namespace conveyor::bench

#endif
