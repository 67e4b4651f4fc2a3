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
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <fcntl.h>
#include <sys/stat.h>
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
};

namespace detail {

/// What reading a file needs: the runtime's buffers, a ring (or none: `pread`), settings.
struct read_env {
    runtime* rt = nullptr;
    uring* ring = nullptr;     // null: the pread backend
    std::uint32_t chunk_size = 8u << 20;
    unsigned chunks_in_flight = 4;
    std::uint64_t group = 0;   // for cancellation
};

/// A read's outcome: an error (with `blob{}`), or the blob.
using read_result = std::pair<std::error_code, blob>;

inline read_result read_failed(std::error_code ec)
{
    return read_result(ec, blob{});
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

/// Reads file `i` of `l` with `pread` (run on the blocking pool).
inline read_result pread_file(runtime& rt, const listing& l, std::size_t i, std::string& detail)
{
    const std::string path = l.full_path(i);
    // O_NONBLOCK: a FIFO or device must not block the open (it is refused just below);
    // for regular files the flag changes nothing.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return read_failed(std::error_code(errno, std::system_category()));
    struct closer {
        int fd;
        ~closer() { ::close(fd); }
    } c{fd};
    struct stat st {};
    if (::fstat(fd, &st) < 0) return read_failed(std::error_code(errno, std::system_category()));
    if (!S_ISREG(st.st_mode)) return read_failed(make_error_code(errc::not_a_regular_file));
    const auto listed = l.entries[i].size;
    const std::uint64_t size = listed >= 0 ? static_cast<std::uint64_t>(listed) : static_cast<std::uint64_t>(st.st_size);
    buffer buf = rt.buffers().acquire(size + 1); // room for one more byte: did it grow?
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
    if (auto ec = size_check(size, got, detail)) return read_failed(ec);
    buf.resize(got);
    return read_result(std::error_code{}, blob{l.entries[i].path, std::move(buf), path, l.entries[i].label, i});
}

/** Reads file `i` of `l` whole. Must run on the thread of `env.ring`'s io_context when
    `env.ring` is set. Completes with an error code (and a detail for people) rather than
    throwing, so that skipping bad files costs no exception. */
inline asio::awaitable<read_result> read_file(const read_env& env, const listing& l, std::size_t i,
                                                                    std::string& detail)
{
    if (!env.ring) {
        co_return co_await conveyor::detail::offload(env.rt->blocking_executor(), [&] { return pread_file(*env.rt, l, i, detail); });
    }
    auto tok = asio::as_tuple(asio::use_awaitable);
    const entry& e = l.entries[i];
    std::string origin = l.full_path(i);
    std::uint64_t size;
    if (e.size >= 0) {
        size = static_cast<std::uint64_t>(e.size);
    } else {
        auto [ec, n] = co_await env.ring->async_file_size(origin, env.group, tok);
        if (ec) co_return read_failed(ec);
        size = n;
    }
    // One byte more than expected is asked for (and room kept for it): a file that grew
    // since it was listed is detected, not silently truncated.
    buffer buf = env.rt->buffers().acquire(size + 1);
    std::error_code ec;
    std::uint64_t got = 0;
    if (size < env.chunk_size) {
        std::tie(ec, got) = co_await env.ring->async_read_small(origin, buf.data(), static_cast<std::uint32_t>(size + 1),
                                                                env.group, tok);
    } else {
        std::tie(ec, got) = co_await env.ring->async_read_large(origin, buf.data(), size + 1, env.chunk_size,
                                                                env.chunks_in_flight, env.group, tok);
    }
    if (!ec) ec = size_check(size, got, detail);
    if (ec) co_return read_failed(ec);
    buf.resize(got);
    co_return read_result(std::error_code{}, blob{e.path, std::move(buf), std::move(origin), e.label, i});
}

// Shared state of one run of the file source.
struct source_state {
    std::shared_ptr<const listing> files;
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
    std::string detail;
    for (;;) {
        const std::uint64_t i = st->next.fetch_add(1, std::memory_order_relaxed);
        if (i >= l.size() || ctx->stopping()) co_return;
        const auto t0 = std::chrono::steady_clock::now();
        detail.clear();
        auto [ec, b] = co_await read_file(env, l, i, detail);
        if (ec) {
            if (ctx->stopping()) co_return;
            auto err = read_error(ec, l, i, detail);
            if (!co_await conveyor::detail::source_item_failed(*ctx, *out, o.errors, o.ordered, i, std::make_exception_ptr(err), err.what(),
                                                               "files", l.entries[i].path))
                co_return;
            continue;
        }
        if (o.on_read) o.on_read(b, std::chrono::steady_clock::now() - t0);
        if (!co_await conveyor::detail::source_deliver(*out, o.ordered, i, std::move(b))) co_return;
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
                           detail::read_env env{&rt, detail::ring_for(rt, lane), st->opts.chunk_size,
                                                st->opts.chunks_in_flight, group};
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
        : files_(std::make_shared<const listing>(std::move(l))), rt_(rt), o_(std::move(o))
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
        detail::read_env env{&rt_, detail::ring_for(rt_, lane), o_.chunk_size, o_.chunks_in_flight, 0};
        std::string detail_text;
        auto [ec, b] = co_await detail::read_file(env, *files_, i, detail_text);
        if (ec) {
            auto err = detail::read_error(ec, *files_, i, detail_text);
            err = conveyor::error(err.code(), [&] {
                auto c = err.ctx();
                c.stage = "dataset";
                return c;
            }());
            throw err;
        }
        co_return std::move(b);
    }

    std::shared_ptr<const listing> files_;
    runtime& rt_;
    source_options o_;
    std::atomic<std::size_t> next_lane_{0};
};

} // namespace conveyor::file

#endif
