// bench/support/progress.cpp — the progress line (see progress.hpp).
#include "support/progress.hpp"

#include <unistd.h>

#include <utility>

namespace conveyor::bench {

progress::progress(std::string label, std::uint64_t total, std::FILE* out)
    : label_(std::move(label)), total_(total), out_(out), tty_(out && ::isatty(::fileno(out)) == 1),
      interval_(tty_ ? std::chrono::milliseconds(250) : std::chrono::milliseconds(5000)), next_(interval_)
{
}

progress::~progress()
{
    finish();
}

void progress::update(std::uint64_t done, std::uint64_t bytes)
{
    done_ = done;
    bytes_ = bytes;
    if (!out_ || finished_) return;
    const auto now = clock_.elapsed();
    if (now < next_) return;
    next_ = now + interval_;
    print(false);
}

void progress::finish()
{
    if (finished_) return;
    finished_ = true;
    if (printed_) print(true);
}

void progress::print(bool last)
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

} // namespace conveyor::bench
