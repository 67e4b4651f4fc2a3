// conveyor/file/source.hpp — the local file source and map-style random access.
#ifndef CONVEYOR_FILE_SOURCE_HPP
#define CONVEYOR_FILE_SOURCE_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/file/error.hpp>
#include <conveyor/file/index.hpp>
#include <conveyor/file/uring.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace conveyor::file {

/// Settings of the file source.
struct source_options {
    /// Reads in flight at once, spread over the runtime's I/O threads.
    std::size_t concurrency = 64;
    /// Deliver in listing order (true) or as reads complete (false).
    bool ordered = true;
    /// A file that cannot be read fails the pipeline, or is skipped and counted.
    on_error errors = on_error::fail;
    /// Blobs waiting between the source and the next stage (at least `concurrency`).
    std::size_t capacity = 64;
    /// Files larger than this are read in chunks of this size, several in flight.
    std::uint32_t chunk_size = 8u << 20;
    /// Chunks of one large file in flight at once.
    unsigned chunks_in_flight = 4;
    /// Called on an I/O thread after each successful read with the time it took (from
    /// the first submission to the last completion). Must be thread-safe and cheap.
    std::function<void(const blob&, std::chrono::nanoseconds)> on_read;
    /// A read that takes longer than this fails with `errc::read_timed_out`, naming the
    /// file (or is skipped and counted, under `on_error::skip`); zero: no limit. Meant for
    /// network file systems, where a hung server would otherwise stall the run for good.
    /// The kernel may keep such a read a while longer: its memory stays reserved until then.
    std::chrono::milliseconds read_timeout{0};
    /** Entries of a listing with a root (`walk`, `read_index`) are promised to stay below
        it, and by default that holds for symlinks too: each file is opened with
        `openat2(RESOLVE_BENEATH)` relative to the root, and an entry whose path or symlinks
        lead out of it fails with `errc::path_escapes_root`. Datasets that are symlink farms
        (links into another disk) set this to follow symlinks wherever they lead. Absolute
        entries and listings without a root are opened as given. */
    bool symlinks_may_leave_root = false;
};

namespace detail {

/// What reading a file needs: the runtime's buffers, a ring (or none: `pread`), settings.
struct read_env {
    runtime* rt = nullptr;
    uring* ring = nullptr;     // null: the pread backend
    std::uint32_t chunk_size = 8u << 20;
    unsigned chunks_in_flight = 4;
    std::uint64_t group = 0;   // for cancellation
    std::chrono::milliseconds timeout{0};
    std::shared_ptr<const directory> root; // the listing's root, opened; null if it has none
    bool beneath = true;                   // entries must resolve below `root`
};

/// The root of `l`, opened (null if it has none); a root that cannot be opened fails
/// each read with the reason.
inline std::shared_ptr<const directory> open_root(const listing& l)
{
    if (l.root.empty()) return nullptr;
    return std::make_shared<const directory>(l.root.string());
}

/// The environment for reading with settings `o` on `ring` (null: pread).
inline read_env make_read_env(runtime& rt, uring* ring, std::shared_ptr<const directory> root, const source_options& o,
                              std::uint64_t group)
{
    return {&rt, ring, o.chunk_size, o.chunks_in_flight, group, o.read_timeout, std::move(root), !o.symlinks_may_leave_root};
}

/// A read's outcome: an error (with an empty blob, and a detail for people), or the blob.
struct read_result {
    std::error_code ec;
    blob b;
    std::string detail;
};

inline read_result read_failed(std::error_code ec, std::string detail = {})
{
    return {ec, blob{}, std::move(detail)};
}

/// Which file entry `i` of `l` is, for opening: relative to the opened root where there is
/// one (and below it, unless symlinks may leave it), else the path as given.
inline file_ref file_of(const read_env& env, const listing& l, std::size_t i)
{
    const std::string& p = l.entries[i].path;
    if (!env.root || p.empty() || p.front() == '/') return {nullptr, l.full_path(i), false};
    return {env.root, p, env.beneath};
}

/// The ring of lane `lane`, or null if this runtime reads with pread (saying why, once).
inline uring* ring_for(runtime& rt, std::size_t lane)
{
    const auto& o = rt.options();
    if (o.backend == io_backend::pread) {
        rt.log_once("conveyor.file.backend", "conveyor: reading files with pread on the blocking pool (io_backend::pread)");
        return nullptr;
    }
    auto& ctx = rt.io_context(lane);
    uring& r = asio::use_service<uring_service>(ctx).get(ctx, {.entries = o.ring_entries, .max_files = o.ring_max_in_flight});
    if (r.available()) return &r;
    if (o.backend == io_backend::uring)
        throw conveyor::error(make_error_code(errc::uring_unavailable), {.stage = "files", .detail = r.unavailable_reason()});
    rt.log_once("conveyor.file.backend", "conveyor: io_uring is unavailable (" + r.unavailable_reason() +
                                             "); reading files with pread on " + std::to_string(o.blocking_threads) +
                                             " threads instead");
    return nullptr;
}

inline conveyor::error read_error(std::error_code ec, const listing& l, std::size_t i, std::string detail = {})
{
    if (ec == std::errc::is_a_directory) {
        ec = make_error_code(errc::not_a_regular_file);
        if (detail.empty()) detail = "is a directory, expected a file";
    }
    return conveyor::error(ec, {.stage = "files", .key = l.entries[i].path, .where = l.full_path(i), .offset = -1, .detail = std::move(detail)});
}

// Checks the bytes read against the size the file had when listed or stat'ed.
inline std::error_code size_check(std::uint64_t expected, std::uint64_t got, std::string& detail)
{
    if (got == expected) return {};
    detail = "listed with " + std::to_string(expected) + " bytes, read " + (got > expected ? "more than " + std::to_string(expected) : std::to_string(got));
    return make_error_code(got < expected ? errc::file_shrank : errc::file_grew);
}

/// Opens `f` as the ring does (`how_to_open`). Returns the fd, or -errno.
inline int open_for_read(const file_ref& f)
{
    const open_how how = how_to_open(f, O_CLOEXEC);
    if (!f.beneath) { // plain openat: this backend also serves kernels older than openat2 (5.6)
        const int fd = ::openat(f.dirfd(), f.path.c_str(), static_cast<int>(how.flags));
        return fd < 0 ? -errno : fd;
    }
    const long fd = ::syscall(SYS_openat2, f.dirfd(), f.path.c_str(), &how, sizeof how);
    return fd < 0 ? -errno : static_cast<int>(fd);
}

/// Reads entry `e` (file `f`, full path `origin`) with `pread`; runs on the blocking pool.
inline read_result pread_file(buffer_pool pool, const file_ref& f, const entry& e, std::string origin, std::size_t i)
{
    const int fd = open_for_read(f);
    if (fd < 0) {
        // A socket cannot be opened at all (ENXIO): say what it is, as the ring's statx does.
        struct stat st {};
        if (fd != -EXDEV && ::fstatat(f.dirfd(), f.path.c_str(), &st, 0) == 0 && !S_ISREG(st.st_mode))
            return read_failed(make_error_code(errc::not_a_regular_file));
        return read_failed(open_error(fd, f));
    }
    struct closer {
        int fd;
        ~closer() { ::close(fd); }
    } c{fd};
    struct stat st {};
    if (::fstat(fd, &st) < 0) return read_failed(std::error_code(errno, std::system_category()));
    if (!S_ISREG(st.st_mode)) return read_failed(make_error_code(errc::not_a_regular_file));
    const std::uint64_t size = e.size >= 0 ? static_cast<std::uint64_t>(e.size) : static_cast<std::uint64_t>(st.st_size);
    buffer buf = pool.acquire(size + 1); // room for one more byte: did it grow?
    const std::uint64_t want = size + 1;
    std::uint64_t got = 0;
    while (got < want) {
        const ssize_t n = ::pread(fd, buf.data() + got, want - got, static_cast<off_t>(got));
        if (n < 0) {
            if (errno == EINTR) continue;
            return read_failed(std::error_code(errno, std::system_category()));
        }
        if (n == 0) break;
        got += static_cast<std::uint64_t>(n);
    }
    std::string detail;
    if (auto ec = size_check(size, got, detail)) return read_failed(ec, std::move(detail));
    buf.resize(got);
    return {{}, blob{e.path, std::move(buf), std::move(origin), e.label, i}, {}};
}

/** Reads file `i` of `l` whole, as it is: no deadline. Must run on the thread of
    `env.ring`'s io_context when `env.ring` is set. Cancelling the awaiting coroutine ends
    the read at once with `operation_canceled` (what the kernel still holds keeps its
    memory until it lets go). Completes with an error code rather than throwing, so that
    skipping bad files costs no exception. */
inline asio::awaitable<read_result> read_file_now(const read_env& env, std::shared_ptr<const listing> lp, std::size_t i)
{
    const listing& l = *lp;
    const entry& e = l.entries[i];
    if (env.root && env.root->error())
        co_return read_failed(env.root->error(), "cannot open the dataset root " + l.root.string());
    file_ref f = file_of(env, l, i);
    if (!env.ring) {
        // A named closure, not a temporary in the co_await: GCC 12 destroys such temporaries twice.
        auto call = [pool = env.rt->buffers(), f = std::move(f), lp, i]() mutable {
            return pread_file(pool, f, lp->entries[i], lp->full_path(i), i);
        };
        auto [ep, r] = co_await conveyor::detail::async_offload_abandonable(env.rt->blocking_executor(), std::move(call),
                                                                            asio::as_tuple(asio::use_awaitable));
        if (!ep) co_return std::move(r);
        try {
            std::rethrow_exception(ep);
        } catch (const std::system_error& x) {
            co_return read_failed(x.code());
        }
    }
    auto tok = asio::as_tuple(asio::use_awaitable);
    std::uint64_t size;
    if (e.size >= 0) {
        size = static_cast<std::uint64_t>(e.size);
    } else {
        auto [ec, n] = co_await env.ring->async_file_size(f, env.group, tok);
        if (ec) co_return read_failed(ec);
        size = n;
    }
    // One byte more than expected is asked for (and room kept for it): a file that grew
    // since it was listed is detected, not silently truncated.
    buffer buf = env.rt->buffers().acquire(size + 1);
    std::error_code ec;
    if (size < env.chunk_size) {
        std::tie(ec, buf) = co_await env.ring->async_read_small(std::move(f), std::move(buf), env.group, tok);
    } else {
        std::tie(ec, buf) = co_await env.ring->async_read_large(std::move(f), std::move(buf), env.chunk_size,
                                                                env.chunks_in_flight, env.group, tok);
    }
    std::string detail;
    if (!ec) ec = size_check(size, buf.size(), detail);
    if (ec) co_return read_failed(ec, std::move(detail));
    co_return read_result{{}, blob{e.path, std::move(buf), l.full_path(i), e.label, i}, {}};
}

/** Reads file `i` of `l` whole, within `env.timeout` when one is set: past it, the read is
    abandoned and the result is `errc::read_timed_out`. */
inline asio::awaitable<read_result> read_file(const read_env& env, const std::shared_ptr<const listing>& l, std::size_t i)
{
    if (env.timeout.count() <= 0) co_return co_await read_file_now(env, l, i);
    auto ex = co_await asio::this_coro::executor;
    asio::steady_timer timer(ex, env.timeout);
    auto [order, ep, res, timer_ec] =
        co_await asio::experimental::make_parallel_group(asio::co_spawn(ex, read_file_now(env, l, i), asio::deferred),
                                                         timer.async_wait(asio::deferred))
            .async_wait(asio::experimental::wait_for_one(), asio::use_awaitable);
    if (order[0] == 0) {
        if (ep) std::rethrow_exception(ep);
        co_return std::move(res);
    }
    co_return read_failed(make_error_code(errc::read_timed_out),
                          "no answer within " + std::to_string(env.timeout.count()) + " ms (source_options::read_timeout)");
}

// Shared state of one run of the file source.
struct source_state {
    std::shared_ptr<const listing> files;
    std::shared_ptr<const directory> root; // opened once per run
    source_options opts;
    std::atomic<std::uint64_t> next{0};
    std::atomic<std::size_t> workers_left{0};
};

inline asio::awaitable<void> source_worker(std::shared_ptr<run_context> ctx, std::shared_ptr<source_state> st,
                                           std::shared_ptr<conveyor::detail::channel<blob>> out, read_env env)
{
    conveyor::detail::last_worker_closes<blob> closer{st->workers_left, *out};

    const listing& l = *st->files;
    const auto& o = st->opts;
    for (;;) {
        const std::uint64_t i = st->next.fetch_add(1, std::memory_order_relaxed);
        if (i >= l.size() || ctx->stopping()) co_return;
        const auto t0 = std::chrono::steady_clock::now();
        auto r = co_await read_file(env, st->files, i);
        if (r.ec) {
            if (ctx->stopping()) co_return;
            auto err = read_error(r.ec, l, i, std::move(r.detail));
            if (!co_await conveyor::detail::source_item_failed(*ctx, *out, o.errors, o.ordered, i, std::make_exception_ptr(err), err.what(),
                                                               "files", l.entries[i].path))
                co_return;
            continue;
        }
        if (o.on_read) o.on_read(r.b, std::chrono::steady_clock::now() - t0);
        if (!co_await conveyor::detail::source_deliver(*out, o.ordered, i, std::move(r.b))) co_return;
    }
}

} // namespace detail

/** The local file source: reads every file of a listing whole, many at once.

    Reads are spread over the runtime's I/O threads, each with its own io_uring ring
    (`concurrency` reads in flight in total); a small file costs one linked
    open/read/close submission, a large one is read in chunks. Where io_uring is
    unavailable, files are read with `pread` on the blocking pool, and that is said once.

    Errors name the path: a missing file, a permission denied, a directory where a file
    was expected, a file whose size differs from its listing. With
    `errors = on_error::skip` such files are counted in the run's stats and logged instead.

    @code
    auto pipe = conveyor::file::files(conveyor::file::walk("/data/train"), {.concurrency = 64})
              | conveyor::map(decode);
    @endcode
*/
inline pipeline<blob> files(std::shared_ptr<const listing> shared, source_options o = {})
{
    if (!shared) shared = std::make_shared<const listing>();
    if (o.concurrency == 0) o.concurrency = 1;
    return pipeline<blob>([shared, o](const std::shared_ptr<run_context>& ctx) {
        runtime& rt = ctx->rt();
        auto st = std::make_shared<detail::source_state>();
        st->files = shared;
        st->root = detail::open_root(*shared);
        st->opts = o;
        const std::size_t workers = std::max<std::size_t>(1, std::min<std::size_t>(o.concurrency, shared->size()));
        st->workers_left = workers;
        auto out = ctx->make_channel<blob>(std::max(o.capacity, o.concurrency));
        const std::uint64_t group = reinterpret_cast<std::uintptr_t>(ctx.get());
        const std::size_t lanes = rt.io_lanes();
        for (std::size_t w = 0; w < workers; ++w) {
            const std::size_t lane = w % lanes;
            // The ring must be created and used on its own thread: each worker asks for it
            // there, so a runtime's rings come up lazily on first use.
            auto ex = rt.io_executor(lane);
            ctx->spawn(ex,
                       [](std::shared_ptr<run_context> ctx, std::shared_ptr<detail::source_state> st,
                          std::shared_ptr<conveyor::detail::channel<blob>> out, std::size_t lane, std::uint64_t group,
                          bool first_on_lane) -> asio::awaitable<void> {
                           runtime& rt = ctx->rt();
                           detail::read_env env =
                               detail::make_read_env(rt, detail::ring_for(rt, lane), st->root, st->opts, group);
                           if (env.ring && first_on_lane) {
                               uring* ring = env.ring;
                               ctx->on_cancel(rt.io_executor(lane), [ring, group] { ring->cancel_group(group); });
                           }
                           co_await detail::source_worker(ctx, st, out, env);
                       }(ctx, st, out, lane, group, w < lanes),
                       "files");
        }
        return stream<blob>(ctx, out);
    });
}

/// Reads the files of `l` (moved or copied into the pipeline; pass a `shared_ptr` to share
/// one large listing between pipelines without copies).
inline pipeline<blob> files(listing l, source_options o = {})
{
    return files(std::make_shared<const listing>(std::move(l)), std::move(o));
}

/// Reads the given paths (see `from_paths`).
inline pipeline<blob> files(const std::vector<std::string>& paths, source_options o = {})
{
    return files(from_paths(paths), std::move(o));
}

/** Map-style random access to the files of a listing: `get(i)` reads file `i`.

    Calls may overlap freely (that is the point: many in flight). A coroutine on one of the
    runtime's I/O threads reads through that thread's ring directly; any other caller hops
    to an I/O thread and back.

    @par Thread Safety
    Safe.
*/
class dataset {
public:
    explicit dataset(listing l, runtime& rt = runtime::shared(), source_options o = {})
        : files_(std::make_shared<const listing>(std::move(l))), root_(detail::open_root(*files_)), rt_(rt), o_(std::move(o))
    {
    }

    std::size_t size() const noexcept { return files_->size(); }
    const listing& files() const noexcept { return *files_; }

    /** Reads file `i`; throws `conveyor::error` naming the path if it cannot.
        @par Completion Signature
        `blob` */
    [[nodiscard]] asio::awaitable<blob> get(std::size_t i)
    {
        check_index(i);
        if (const auto lane = rt_.current_io_lane()) co_return co_await read_here(*lane, i);
        const std::size_t target = next_lane_++ % rt_.io_lanes();
        co_return co_await asio::co_spawn(rt_.io_executor(target), read_here(target, i), asio::use_awaitable);
    }

    /// Reads file `i`, blocking the calling thread (which must not be an I/O thread).
    blob read(std::size_t i)
    {
        check_index(i);
        const std::size_t target = next_lane_++ % rt_.io_lanes();
        return asio::co_spawn(rt_.io_executor(target), read_here(target, i), asio::use_future).get();
    }

private:
    void check_index(std::size_t i) const
    {
        if (i >= files_->size())
            throw conveyor::error(std::make_error_code(std::errc::result_out_of_range),
                                  {.stage = "dataset", .detail = "index " + std::to_string(i) + " is past the end (" +
                                                                     std::to_string(files_->size()) + " files)"});
    }

    asio::awaitable<blob> read_here(std::size_t lane, std::size_t i)
    {
        detail::read_env env = detail::make_read_env(rt_, detail::ring_for(rt_, lane), root_, o_, 0);
        auto r = co_await detail::read_file(env, files_, i);
        if (r.ec) {
            auto err = detail::read_error(r.ec, *files_, i, std::move(r.detail));
            err = conveyor::error(err.code(), [&] {
                auto c = err.ctx();
                c.stage = "dataset";
                return c;
            }());
            throw err;
        }
        co_return std::move(r.b);
    }

    std::shared_ptr<const listing> files_;
    std::shared_ptr<const directory> root_;
    runtime& rt_;
    source_options o_;
    std::atomic<std::size_t> next_lane_{0};
};

} // namespace conveyor::file

#endif
