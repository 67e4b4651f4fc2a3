// tests/support/common.hpp — test helpers shared by every conveyor test suite
// (bounded waits, log capture, run probes). Not a translation unit.
#ifndef CONVEYOR_TESTS_SUPPORT_COMMON_HPP
#define CONVEYOR_TESTS_SUPPORT_COMMON_HPP

#include <conveyor/core/pipeline.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <exception>
#include <thread>
#include <utility>
#include <vector>

#include <sys/mount.h>
#include <unistd.h>

namespace conveyor_test {

using namespace std::chrono_literals;

/** Runs `f` on a thread of its own and waits at most `limit` for it.

    Returns true when `f` finished (its exception, if any, is rethrown here). When it did
    not, the test fails with a message naming `what`; `rescue` is then called to unstick it
    (e.g. cancel the run's channel by hand) and false is returned. If there is no rescue or
    `f` is still stuck after it, the process ends with a message: a stuck thread holding the
    test's state cannot be left behind, and hanging until ctest's timeout says less. */
template <class F>
bool finishes_within(std::chrono::seconds limit, const char* what, F f, const std::function<void()>& rescue = {})
{
    std::packaged_task<void()> task(std::move(f));
    auto done = task.get_future();
    std::thread runner(std::move(task));
    if (done.wait_for(limit) == std::future_status::ready) {
        runner.join();
        done.get();
        return true;
    }
    if (rescue) {
        rescue();
        if (done.wait_for(limit) == std::future_status::ready) {
            runner.join();
            try {
                done.get();
            } catch (...) {
            }
            return false;
        }
    }
    std::fprintf(stderr, "\nFATAL: '%s' did not finish within %llds%s; ending the test run\n", what,
                 static_cast<long long>(limit.count()), rescue ? " even after the rescue" : "");
    std::fflush(stderr);
    std::_Exit(3);
}

/// Polls `pred` until it is true or `limit` passes; returns its last value.
template <class Pred>
bool eventually(Pred pred, std::chrono::seconds limit = std::chrono::seconds{60})
{
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!pred()) {
        if (std::chrono::steady_clock::now() > deadline) return pred();
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

/** Waits until `value()` stays the same for `quiet` (polling it every `quiet`), at most
    `limit`; true if it did. For counters that stop only when some buffer fills, such as the
    bytes a test server wrote to a peer that stopped reading: the kernel may still make room
    for a while after the peer stops (it grows the send buffer, it compacts a full receive
    queue and opens the window again), so one fixed window after a fixed pause is a flaky
    check on a loaded machine. */
template <class F>
bool settles(F value, std::chrono::milliseconds quiet = 200ms, std::chrono::seconds limit = std::chrono::seconds{20})
{
    return eventually([&] {
        const auto before = value();
        std::this_thread::sleep_for(quiet);
        return value() == before;
    }, limit);
}

/// Collects the lines a runtime logs.
class log_capture {
public:
    std::function<void(std::string_view)> sink() const
    {
        return [s = s_](std::string_view line) {
            std::lock_guard lk(s->mu);
            s->lines.emplace_back(line);
        };
    }
    std::vector<std::string> lines() const
    {
        std::lock_guard lk(s_->mu);
        return s_->lines;
    }
    /// Lines that contain every one of `parts`.
    std::vector<std::string> matching(std::initializer_list<std::string_view> parts) const
    {
        std::vector<std::string> out;
        for (const auto& l : lines()) {
            bool all = true;
            for (auto p : parts) all = all && l.find(p) != std::string::npos;
            if (all) out.push_back(l);
        }
        return out;
    }

private:
    struct state {
        std::mutex mu;
        std::vector<std::string> lines;
    };
    std::shared_ptr<state> s_ = std::make_shared<state>();
};

/** An identity stage that remembers the run it was built into and the stream it passes
    on (the sink, when it is the last stage): tests use it to watch a run, and to rescue one
    that a bug left stuck. Holds only weak references. */
class run_probe {
public:
    template <class T>
    conveyor::stream<T> operator()(const std::shared_ptr<conveyor::run_context>& ctx, conveyor::stream<T> in) const
    {
        std::lock_guard lk(s_->mu);
        s_->ctx = ctx;
        s_->out = conveyor::detail::channel_of(in);
        return in;
    }
    std::shared_ptr<conveyor::run_context> run() const
    {
        std::lock_guard lk(s_->mu);
        return s_->ctx.lock();
    }
    /// Cancels the whole run (what destroying its range does).
    void cancel_run() const
    {
        if (auto c = run()) c->cancel();
    }
    /// Cancels the stream this probe passed on, even where the run would keep it.
    void cancel_stream() const
    {
        std::shared_ptr<conveyor::detail::channel_base> ch;
        {
            std::lock_guard lk(s_->mu);
            ch = s_->out.lock();
        }
        if (ch) ch->cancel();
    }

private:
    struct state {
        std::mutex mu;
        std::weak_ptr<conveyor::run_context> ctx;
        std::weak_ptr<conveyor::detail::channel_base> out;
    };
    std::shared_ptr<state> s_ = std::make_shared<state>();
};

/// A 64-bit mix of `x` (SplitMix64's finaliser), for deterministic pseudo-random delays.
inline std::uint64_t mix(std::uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/// The `what()` of the exception `e` holds.
inline std::string what_of(std::exception_ptr e)
{
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& x) {
        return x.what();
    } catch (...) {
        return "(not a std::exception)";
    }
}

/// The code of the `std::system_error` (or `conveyor::error`) `e` holds; none otherwise.
inline std::error_code code_of(std::exception_ptr e)
{
    try {
        std::rethrow_exception(e);
    } catch (const std::system_error& x) {
        return x.code();
    } catch (...) {
        return {};
    }
}

/// True when `text` holds a C0 control character or DEL (what a terminal would act on).
inline bool has_control_byte(std::string_view text)
{
    return std::any_of(text.begin(), text.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u < 0x20 || u == 0x7F;
    });
}

/** A small file system of its own (a tmpfs of `bytes`) mounted on a fresh folder, for
    tests of full disks and read-only folders; unmounted and removed with the object.
    Mounting needs root (CAP_SYS_ADMIN): where it is refused, `ok()` is false and `why()`
    says so, for the test to skip with that message. */
class small_disk {
public:
    explicit small_disk(std::size_t bytes, bool read_only = false)
    {
        std::string t = (std::filesystem::temp_directory_path() / "conveyor-disk-XXXXXX").string();
        if (::mkdtemp(t.data()) == nullptr) {
            why_ = "mkdtemp failed";
            return;
        }
        path_ = t;
        const std::string opts = "size=" + std::to_string(bytes) + ",mode=0755";
        if (::mount("tmpfs", t.c_str(), "tmpfs", read_only ? MS_RDONLY : 0, opts.c_str()) != 0) {
            why_ = std::string("cannot mount a tmpfs (") + std::strerror(errno) + "): needs root";
            return;
        }
        mounted_ = true;
    }
    small_disk(const small_disk&) = delete;
    small_disk& operator=(const small_disk&) = delete;
    ~small_disk()
    {
        if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
        std::error_code ec;
        if (!path_.empty()) std::filesystem::remove_all(path_, ec);
    }
    bool ok() const noexcept { return mounted_; }
    const std::string& why() const noexcept { return why_; }
    const std::filesystem::path& path() const noexcept { return path_; }
    /// Makes the mounted file system read-only (or writable again).
    bool set_read_only(bool ro)
    {
        return ::mount(nullptr, path_.c_str(), nullptr, MS_REMOUNT | (ro ? MS_RDONLY : 0), nullptr) == 0;
    }
    /// The names in the folder, sorted.
    std::vector<std::string> names() const
    {
        std::vector<std::string> out;
        for (const auto& e : std::filesystem::directory_iterator(path_)) out.push_back(e.path().filename().string());
        std::sort(out.begin(), out.end());
        return out;
    }

private:
    std::filesystem::path path_;
    std::string why_;
    bool mounted_ = false;
};

/** Resident memory, as the kernel counts it for this process (`/proc/self/status`). */
struct resident_memory {
    std::uint64_t now = 0;  ///< VmRSS, bytes
    std::uint64_t peak = 0; ///< VmHWM (the high-water mark), bytes
};

inline resident_memory read_resident_memory()
{
    resident_memory m;
    std::FILE* f = std::fopen("/proc/self/status", "r");
    if (!f) return m;
    char line[256];
    while (std::fgets(line, sizeof line, f)) {
        unsigned long long kb = 0;
        if (std::sscanf(line, "VmRSS: %llu kB", &kb) == 1) m.now = kb << 10;
        if (std::sscanf(line, "VmHWM: %llu kB", &kb) == 1) m.peak = kb << 10;
    }
    std::fclose(f);
    return m;
}

/** How far this process's resident memory rose above its level at the start while `f`
    ran, in bytes: the kernel's high-water mark (VmHWM) is reset first (writing "5" to
    `/proc/self/clear_refs`), so that cases can be measured one after another. Empty where
    the kernel refuses the reset: the caller then says that the bound went unchecked.
    Everything the process does meanwhile counts (other threads, a test server's
    buffers), so a bound measured this way is an upper bound of what `f` took. */
template <class F>
std::optional<std::uint64_t> resident_growth(F&& f)
{
    std::FILE* clear = std::fopen("/proc/self/clear_refs", "w");
    const bool reset = clear && std::fputs("5", clear) >= 0 && std::fflush(clear) == 0;
    if (clear) std::fclose(clear);
    const resident_memory before = read_resident_memory();
    std::forward<F>(f)();
    const resident_memory after = read_resident_memory();
    if (!reset || before.now == 0) return std::nullopt;
    return after.peak > before.now ? after.peak - before.now : 0;
}

/// `bytes` in MiB with one decimal, for messages.
inline std::string mib(std::uint64_t bytes)
{
    char s[32];
    std::snprintf(s, sizeof s, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    return s;
}

#if defined(__SANITIZE_ADDRESS__)
#define CONVEYOR_TEST_ASAN 1
#elif defined(__SANITIZE_THREAD__)
#define CONVEYOR_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CONVEYOR_TEST_ASAN 1
#elif __has_feature(thread_sanitizer)
#define CONVEYOR_TEST_TSAN 1
#endif
#endif

/// Checks that `grew` (from `resident_growth`) stayed under `bound` bytes and says by how
/// much it grew, or says that it could not be measured. Under AddressSanitizer the bound is
/// doubled: its quarantine keeps freed memory resident, so resident memory there follows
/// what was allocated in all, not what was held at once. Under ThreadSanitizer it is only
/// reported: its shadow memory, several times what the process touches, counts as resident.
inline void check_resident_growth(const std::optional<std::uint64_t>& grew, std::uint64_t bound, const std::string& what)
{
#ifdef CONVEYOR_TEST_ASAN
    bound *= 2;
#endif
#ifdef CONVEYOR_TEST_TSAN
    if (grew) MESSAGE(what << ": peak resident memory grew by " << mib(*grew) << " under TSan (its shadow memory counts: not checked)");
    return;
#endif
    if (!grew) {
        MESSAGE(what << ": peak resident memory not measured (/proc/self/clear_refs refused)");
        return;
    }
    MESSAGE(what << ": peak resident memory grew by " << mib(*grew) << " (bound " << mib(bound) << ")");
    CHECK_MESSAGE(*grew < bound, what << ": peak resident memory grew by " << mib(*grew) << ", over " << mib(bound));
}

} // namespace conveyor_test

#endif
