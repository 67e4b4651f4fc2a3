// examples/progress.hpp — the progress line of the examples' long steps.
//
// Header-only and examples-only: a program built on conveyor has its own way of showing
// progress (a logger, tqdm, the pipeline's own `on_stats`); this one is what the examples
// need to show that a long step is moving, and nothing more.
#ifndef CONVEYOR_EXAMPLES_PROGRESS_HPP
#define CONVEYOR_EXAMPLES_PROGRESS_HPP

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

namespace examples {

/** `label: done/total (pct)  GB  rate/s` on standard error, redrawn in place at most four
    times a second, while standard error is a terminal; in a log it prints nothing (each
    example prints its own summary once the step is done). `finish()`, or the destructor,
    draws the final state and ends the line, if the line was drawn at all.

    `update()` may be called for every item: unless a redraw is due it only stores two
    numbers and reads the clock. Update from one thread.
*/
class progress_line {
public:
    /// `total` is the count expected (0: unknown; then no percentage).
    explicit progress_line(std::string label, std::uint64_t total = 0)
        : label_(std::move(label)), total_(total), on_terminal_(::isatty(STDERR_FILENO) == 1)
    {
    }
    progress_line(const progress_line&) = delete;
    progress_line& operator=(const progress_line&) = delete;
    ~progress_line() { finish(); }

    /// `done` items and `bytes` bytes so far (running totals, not increments).
    void update(std::uint64_t done, std::uint64_t bytes = 0)
    {
        done_ = done;
        bytes_ = bytes;
        if (on_terminal_ && clock::now() >= next_draw_) draw();
    }

    void finish()
    {
        if (drawn_) {
            draw();
            std::fputc('\n', stderr);
        }
        on_terminal_ = drawn_ = false;
    }

private:
    using clock = std::chrono::steady_clock;
    static constexpr std::chrono::milliseconds redraw_every{250};

    void draw()
    {
        const auto now = clock::now();
        next_draw_ = now + redraw_every;
        const double seconds = std::chrono::duration<double>(now - start_).count();
        const auto done = static_cast<double>(done_);
        std::string text = label_ + ": " + std::to_string(done_);
        char part[96];
        if (total_ > 0) {
            std::snprintf(part, sizeof part, "/%llu (%.0f%%)", static_cast<unsigned long long>(total_),
                          100.0 * done / static_cast<double>(total_));
            text += part;
        }
        if (bytes_ > 0) {
            std::snprintf(part, sizeof part, "  %.2f GB", static_cast<double>(bytes_) / 1e9);
            text += part;
        }
        if (seconds > 0) {
            std::snprintf(part, sizeof part, "  %.0f/s", done / seconds);
            text += part;
        }
        std::fprintf(stderr, "\r%s\033[K", text.c_str()); // \033[K: clear what a longer line left
        std::fflush(stderr);
        drawn_ = true;
    }

    std::string label_;
    std::uint64_t total_;
    bool on_terminal_;
    bool drawn_ = false;
    std::uint64_t done_ = 0;
    std::uint64_t bytes_ = 0;
    clock::time_point start_ = clock::now();
    clock::time_point next_draw_ = start_ + redraw_every;
};

} // namespace examples

#endif
