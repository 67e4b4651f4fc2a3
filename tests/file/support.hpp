// tests/file/support.hpp — helpers shared by the file module's tests (not a translation unit).
#ifndef CONVEYOR_TESTS_FILE_SUPPORT_HPP
#define CONVEYOR_TESTS_FILE_SUPPORT_HPP

#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/file/error.hpp>
#include <conveyor/file/index.hpp>
#include <conveyor/file/source.hpp>
#include <conveyor/file/detail/uring.hpp>

#include <doctest/doctest.h>

#include "../support/common.hpp"

#include <liburing.h>

#include <boost/asio/post.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace ftest {

using namespace conveyor_test; // finishes_within, eventually, log_capture, run_probe, mix

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

/// How long something that must finish may take before the test calls it a hang.
/// Generous on purpose: the sanitizer builds run on a shared two-core machine.
inline constexpr std::chrono::seconds generous{60};
/// The limit for tests that reproduce a known hang (a bug), so the suite stays usable.
inline constexpr std::chrono::seconds known_hang{5};

/// A fresh directory under /tmp (mkdtemp), removed with everything in it afterwards.
class temp_dir {
public:
    temp_dir()
    {
        std::string tmpl = (fs::temp_directory_path() / "conveyor-file-test-XXXXXX").string();
        if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed: " + std::string(std::strerror(errno)));
        path_ = tmpl;
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
    ~temp_dir()
    {
        std::error_code ec;
        // Whatever a test chmod'ed must be removable again.
        for (auto it = fs::recursive_directory_iterator(path_, fs::directory_options::skip_permission_denied, ec);
             !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
            std::error_code ignored;
            if (!it->is_symlink(ignored)) fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ignored);
        }
        fs::remove_all(path_, ec);
    }
    const fs::path& path() const noexcept { return path_; }
    fs::path operator/(const std::string& rel) const { return path_ / rel; }

private:
    fs::path path_;
};


/// `size` bytes that depend on `seed` and on each byte's position, so that a chunk put in
/// the wrong place, a byte missing or one file's bytes delivered for another all show.
inline std::string content(std::uint64_t seed, std::size_t size)
{
    std::string s(size, '\0');
    std::uint64_t state = mix(seed * 0x100000001b3ULL + 17);
    for (std::size_t i = 0; i < size; i += 8) {
        state = mix(state + i);
        for (std::size_t k = 0; k < 8 && i + k < size; ++k) s[i + k] = static_cast<char>(state >> (8 * k));
    }
    return s;
}

/// Writes `bytes` to `p`, creating parent directories.
inline void write_file(const fs::path& p, std::string_view bytes)
{
    if (p.has_parent_path()) fs::create_directories(p.parent_path());
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    REQUIRE_MESSAGE(out.good(), "cannot create " << p);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    REQUIRE_MESSAGE(out.good(), "cannot write " << p);
}

inline std::string read_whole(const fs::path& p)
{
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void append_file(const fs::path& p, std::string_view bytes)
{
    std::ofstream out(p, std::ios::binary | std::ios::app);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    REQUIRE(out.good());
}

/// True if `got` is `want`, or an errno value equivalent to it (system vs generic category).
inline bool same_code(std::error_code got, std::error_code want)
{
    return got == want || got == want.default_error_condition();
}

inline std::string bytes_of(const conveyor::blob& b) { return std::string(b.data.view()); }

/// The two file backends, to run the same checks with each.
struct backend_case {
    conveyor::io_backend backend;
    const char* name;
};

/// True if this kernel lets this process create a ring with a sparse file table (what
/// conveyor's rings need): asked once, with liburing directly.
inline bool kernel_has_uring()
{
    static const bool yes = [] {
        io_uring ring{};
        if (io_uring_queue_init(4, &ring, 0) < 0) return false;
        const bool sparse = io_uring_register_files_sparse(&ring, 4) == 0;
        io_uring_queue_exit(&ring);
        return sparse;
    }();
    return yes;
}

/// A ring for a test, or a message saying why the test cannot run here.
#define REQUIRE_KERNEL_URING()                                                                        \
    do {                                                                                              \
        if (!ftest::kernel_has_uring()) {                                                             \
            MESSAGE("skipped: this kernel (or a seccomp filter) refuses io_uring with a file table"); \
            return;                                                                                   \
        }                                                                                             \
    } while (0)

/// The backends to test here: both, or only pread (saying why, once) where the kernel
/// refuses io_uring.
inline const std::vector<backend_case>& backends()
{
    static const std::vector<backend_case> all = [] {
        std::vector<backend_case> v;
        if (kernel_has_uring()) v.push_back({conveyor::io_backend::uring, "io_backend::uring"});
        else std::fprintf(stderr, "NOTE: io_uring is unavailable here: the io_backend::uring cases are skipped\n");
        v.push_back({conveyor::io_backend::pread, "io_backend::pread"});
        return v;
    }();
    return all;
}

/// True when CONVEYOR_IO_BACKEND would override `automatic` (tests about `automatic` skip).
inline bool backend_overridden_by_environment() { return std::getenv("CONVEYOR_IO_BACKEND") != nullptr; }



/// Like `finishes_within`, but a hang is a test failure (with a message) as well.
template <class F>
void must_finish(const char* what, F f, std::chrono::seconds limit = generous, const std::function<void()>& rescue = {})
{
    const bool ok = finishes_within(limit, what, std::move(f), rescue);
    CHECK_MESSAGE(ok, what << " did not finish within " << limit.count() << "s (hang)");
}



/// What a run delivered, or the exception it ended with.
struct outcome {
    std::vector<conveyor::blob> blobs;
    std::exception_ptr error;
    std::uint64_t skipped = 0;
};

/// Starts a run of `p` and reads it to its end or its error (bounded), then ends it.
inline outcome run_all(conveyor::pipeline<conveyor::blob>& p, const char* what = "reading a files() run")
{
    outcome o;
    must_finish(what, [&] {
        auto r = p.run();
        try {
            for (auto& b : r) o.blobs.push_back(std::move(b));
        } catch (...) {
            o.error = std::current_exception();
        }
        o.skipped = r.stats().skipped.load();
    });
    return o;
}

/** Like `run_all` for a pipeline that ends in `probe`, for runs that a known bug may leave
    stuck. Waits at most `limit`, then rescues the run: where `pump_rings` is set, it first
    keeps asking every lane's ring to submit (an empty submit makes the kernel flush the
    completions it holds back when the completion queue overflowed) and lets the run go on,
    and cancels it (and its sink) only if that does not help within `limit`; otherwise it
    cancels at once. `hung` says whether a rescue was needed. */
inline outcome run_all_rescued(conveyor::pipeline<conveyor::blob>& p, const run_probe& probe, conveyor::runtime& rt,
                               bool pump_rings, bool& hung, std::chrono::seconds limit = known_hang,
                               const char* what = "reading a files() run")
{
    outcome o;
    std::atomic<bool> stop_pump{false};
    std::thread pump;
    auto cancel = [&probe] {
        if (auto c = probe.run()) c->cancel();
        probe.cancel_stream();
    };
    const bool ended = finishes_within(
        limit, what,
        [&] {
            std::optional<conveyor::range<conveyor::blob>> r(p.run());
            try {
                for (auto& b : *r) o.blobs.push_back(std::move(b));
            } catch (...) {
                o.error = std::current_exception();
            }
            o.skipped = r->stats().skipped.load();
            r.reset();
        },
        [&] {
            if (!pump_rings) return cancel();
            pump = std::thread([&, cancel] {
                const auto give_up = std::chrono::steady_clock::now() + limit / 2;
                bool cancelled = false;
                while (!stop_pump) {
                    for (std::size_t lane = 0; lane < rt.io_lanes(); ++lane)
                        asio::post(rt.io_executor(lane), [&rt, lane] {
                            auto& ctx = rt.io_context(lane);
                            const auto& ro = rt.options();
                            auto& ring = asio::use_service<conveyor::file::detail::uring_service>(ctx).get(
                                ctx, {.entries = ro.ring_entries, .max_files = ro.ring_max_in_flight});
                            if (ring.available()) ring.cancel_group(~std::uint64_t{0}); // a group nobody uses: just a submit
                        });
                    if (!cancelled && std::chrono::steady_clock::now() > give_up) {
                        cancelled = true;
                        cancel();
                    }
                    std::this_thread::sleep_for(2ms);
                }
            });
        });
    stop_pump = true;
    if (pump.joinable()) pump.join();
    hung = !ended;
    return o;
}

/// The `conveyor::error` that `e` holds (fails the test if it holds something else).
inline std::optional<conveyor::error> as_error(std::exception_ptr e)
{
    if (!e) return std::nullopt;
    try {
        std::rethrow_exception(e);
    } catch (const conveyor::error& x) {
        return x;
    } catch (const std::exception& x) {
        FAIL_CHECK("expected a conveyor::error, got another exception: " << std::string(x.what()));
    } catch (...) {
        FAIL_CHECK("expected a conveyor::error, got something that is not a std::exception");
    }
    return std::nullopt;
}

/// Runs `f` and returns the `conveyor::error` it throws (nullopt, and a failed check, if none).
template <class F>
std::optional<conveyor::error> error_from(F&& f)
{
    try {
        f();
    } catch (...) {
        return as_error(std::current_exception());
    }
    FAIL_CHECK("expected a conveyor::error, nothing was thrown");
    return std::nullopt;
}

/// Runs `f(ring)` on lane `lane` of `rt` with that lane's ring (created there if new) and
/// returns its result.
template <class F>
auto on_lane_ring(conveyor::runtime& rt, std::size_t lane, F f)
{
    using R = std::invoke_result_t<F&, conveyor::file::detail::uring&>;
    std::packaged_task<R()> task([&rt, lane, f]() mutable {
        auto& ctx = rt.io_context(lane);
        const auto& o = rt.options();
        auto& ring = asio::use_service<conveyor::file::detail::uring_service>(ctx).get(
            ctx, {.entries = o.ring_entries, .max_files = o.ring_max_in_flight});
        return f(ring);
    });
    auto fut = task.get_future();
    asio::post(rt.io_executor(lane), [&task] { task(); });
    REQUIRE_MESSAGE(fut.wait_for(generous) == std::future_status::ready, "lane " << lane << " did not answer");
    return fut.get();
}

/// A small tree of files with known contents, for the source tests.
struct tree {
    std::vector<std::string> rel;      ///< relative paths, sorted as `walk` sorts them
    std::vector<std::string> contents; ///< contents by the same index
};

/// Writes `n` files named `d<k>/f<i>.bin` (k = i % dirs) with sizes from `size_of(i)`.
template <class SizeOf>
tree make_tree(const fs::path& root, std::size_t n, std::size_t dirs, SizeOf size_of)
{
    std::vector<std::pair<std::string, std::string>> files;
    files.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
        char name[64];
        std::snprintf(name, sizeof name, "d%02zu/f%05zu.bin", i % dirs, i);
        files.emplace_back(name, content(i + 1, size_of(i)));
    }
    for (const auto& [rel, bytes] : files) write_file(root / rel, bytes);
    std::sort(files.begin(), files.end());
    tree t;
    for (auto& [rel, bytes] : files) {
        t.rel.push_back(rel);
        t.contents.push_back(std::move(bytes));
    }
    return t;
}

/// Checks that `blobs` are exactly the files of `l` (whose contents are `t`), in order.
inline void check_in_order(const std::vector<conveyor::blob>& blobs, const conveyor::file::listing& l, const tree& t)
{
    REQUIRE(blobs.size() == l.size());
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < blobs.size(); ++i) {
        const auto& b = blobs[i];
        const bool ok = b.index == i && b.key == l.entries[i].path && b.origin == l.full_path(i) &&
                        b.label == l.entries[i].label && bytes_of(b) == t.contents[i];
        if (!ok && ++mismatches <= 5) {
            CHECK(b.index == i);
            CHECK(b.key == l.entries[i].path);
            CHECK(b.origin == l.full_path(i));
            CHECK(b.label == l.entries[i].label);
            CHECK_MESSAGE(bytes_of(b) == t.contents[i], "bytes of " << b.key << " differ (" << b.data.size()
                                                                     << " bytes read, " << t.contents[i].size()
                                                                     << " expected)");
        }
    }
    CHECK_MESSAGE(mismatches == 0, mismatches << " of " << blobs.size() << " blobs were wrong");
}

} // namespace ftest

#endif
