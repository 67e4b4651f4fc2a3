// conveyor/bench/progress.hpp — a rate-limited progress line for long runs.
#ifndef CONVEYOR_BENCH_PROGRESS_HPP
#define CONVEYOR_BENCH_PROGRESS_HPP

#include <conveyor/bench/timer.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

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
    explicit progress(std::string label, std::uint64_t total = 0, std::FILE* out = stderr)
        : label_(std::move(label)), total_(total), out_(out), tty_(out && ::isatty(::fileno(out)) == 1),
          interval_(tty_ ? std::chrono::milliseconds(250) : std::chrono::milliseconds(5000)), next_(interval_)
    {
    }
    progress(const progress&) = delete;
    progress& operator=(const progress&) = delete;
    ~progress() { finish(); }

    /// Reports that `done` items and `bytes` bytes are done so far (both running totals).
    void update(std::uint64_t done, std::uint64_t bytes = 0)
    {
        done_ = done;
        bytes_ = bytes;
        if (!out_ || finished_) return;
        const auto now = clock_.elapsed();
        if (now < next_) return;
        next_ = now + interval_;
        print(false);
    }

    /// Ends the progress line (prints the final state if anything was printed before).
    void finish()
    {
        if (finished_) return;
        finished_ = true;
        if (printed_) print(true);
    }

    /// Seconds since the progress line was made.
    double seconds() const noexcept { return clock_.seconds(); }

private:
    void print(bool last)
    {
        const double secs = clock_.seconds();
        const double rate = secs > 0 ? static_cast<double>(done_) / secs : 0.0;
        char buf[256];
        int n = std::snprintf(buf, sizeof buf, "%s: %llu", label_.c_str(), static_cast<unsigned long long>(done_));
        auto room = [&] { return n < static_cast<int>(sizeof buf) ? sizeof buf - static_cast<std::size_t>(n) : 0; };
        if (total_) {
            n += std::snprintf(buf + n, room(), "/%llu (%.1f%%)", static_cast<unsigned long long>(total_),
                               100.0 * static_cast<double>(done_) / static_cast<double>(total_));
        }
        if (bytes_) n += std::snprintf(buf + n, room(), "  %.2f GB", static_cast<double>(bytes_) / 1e9);
        n += std::snprintf(buf + n, room(), "  %.0f/s", rate);
        if (total_ && !last && rate > 0 && done_ < total_)
            n += std::snprintf(buf + n, room(), "  ETA %.0fs", static_cast<double>(total_ - done_) / rate);
        if (tty_) std::fprintf(out_, "\r%s\033[K%s", buf, last ? "\n" : "");
        else std::fprintf(out_, "%s\n", buf);
        std::fflush(out_);
        printed_ = true;
    }

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
