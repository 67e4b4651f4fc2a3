// conveyor/file/detail/impl/read_file.ipp — reading one file whole: the read environment of
// a lane, the io_uring path (sized: one linked open/read/close; unsized: statx first), the
// pread path where there is no ring, deadlines and the outcome of each read. Part of
// conveyor/file/impl/source.ipp (included from it, after its includes); the file source's
// reader and the dataset are built on it.
#ifndef CONVEYOR_FILE_DETAIL_IMPL_READ_FILE_IPP
#define CONVEYOR_FILE_DETAIL_IMPL_READ_FILE_IPP

namespace conveyor::file {

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
CONVEYOR_DECL std::shared_ptr<const directory> open_root(const listing& l)
{
    if (l.root.empty()) return nullptr;
    return std::make_shared<const directory>(l.root.string());
}

/// The environment for reading with settings `o` on `ring` (null: pread).
CONVEYOR_DECL read_env make_read_env(runtime& rt, uring* ring, std::shared_ptr<const directory> root, const source_options& o,
                              std::uint64_t group)
{
    return {&rt, ring, o.chunk_size, o.chunks_in_flight, group, o.read_timeout, std::move(root), !o.symlinks_may_leave_root};
}

/// A read's outcome: an error (with an empty blob, and a detail for people), or the blob.
struct file_read {
    std::error_code ec;
    blob b;
    std::string detail;
};

CONVEYOR_DECL file_read read_failed(std::error_code ec, std::string detail = {})
{
    return {ec, blob{}, std::move(detail)};
}

/// Which file entry `i` of `l` is, for opening: relative to the opened root where there is
/// one (and below it, unless symlinks may leave it), else the path as given.
CONVEYOR_DECL file_ref file_of(const read_env& env, const listing& l, std::size_t i)
{
    const std::string& p = l.entries[i].path;
    const bool regular = l.entries[i].size >= 0;
    if (!env.root || p.empty() || p.front() == '/') return {nullptr, l.full_path(i), false, regular};
    return {env.root, p, env.beneath, regular};
}

/// The ring of lane `lane`, or null if this runtime reads with pread (saying why, once).
CONVEYOR_DECL uring* ring_for(runtime& rt, std::size_t lane)
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

/// The error for file `i` of `l` that could not be read, as stage `stage` reports it.
CONVEYOR_DECL conveyor::error read_error(std::string_view stage, std::error_code ec, const listing& l, std::size_t i, std::string detail)
{
    if (ec == std::errc::is_a_directory) {
        ec = make_error_code(errc::not_a_regular_file);
        if (detail.empty()) detail = "is a directory, expected a file";
    }
    return conveyor::error(ec, {.stage = std::string(stage), .key = l.entries[i].path, .where = l.full_path(i), .offset = -1, .detail = std::move(detail)});
}

// Checks the bytes read against the size the file had when listed or stat'ed.
CONVEYOR_DECL std::error_code size_check(std::uint64_t expected, std::uint64_t got, std::string& detail)
{
    if (got == expected) return {};
    detail = "listed with " + std::to_string(expected) + " bytes, read " + (got > expected ? "more than " + std::to_string(expected) : std::to_string(got));
    return make_error_code(got < expected ? errc::file_shrank : errc::file_grew);
}

/// Opens `f` as the ring does (`how_to_open`). Returns the fd, or -errno.
CONVEYOR_DECL int open_for_read(const file_ref& f)
{
    const open_how how = how_to_open(f, O_CLOEXEC);
    if (!f.beneath) { // plain openat: this backend also serves kernels older than openat2 (5.6)
        const int fd = ::openat(f.dirfd(), f.path.c_str(), static_cast<int>(how.flags));
        return fd < 0 ? -errno : fd;
    }
    const long fd = ::syscall(SYS_openat2, f.dirfd(), f.path.c_str(), &how, sizeof how);
    return fd < 0 ? -errno : static_cast<int>(fd);
}

/** The one `pread` loop: reads up to `n` bytes of `fd` at `offset` into `p`, retrying after
    signals and short reads, until `n` or the end of the file. Returns the error, or the
    bytes read (fewer than `n` only at the end of the file). Blocks: the blocking pool's. */
CONVEYOR_DECL std::pair<std::error_code, std::size_t> pread_fully(int fd, std::byte* p, std::size_t n, std::uint64_t offset)
{
    std::size_t got = 0;
    while (got < n) {
        const ssize_t r = ::pread(fd, p + got, capped_read(n - got), static_cast<off_t>(offset + got));
        if (r < 0) {
            if (errno == EINTR) continue;
            return {std::error_code(errno, std::system_category()), got};
        }
        if (r == 0) break; // end of file
        got += static_cast<std::size_t>(r);
    }
    return {std::error_code{}, got};
}

/// Reads entry `e` (file `f`, full path `origin`) with `pread`; runs on the blocking pool.
CONVEYOR_DECL file_read pread_file(buffer_pool pool, const file_ref& f, const entry& e, std::string origin, std::size_t i)
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
    const auto [ec, got] = pread_fully(fd, buf.data(), static_cast<std::size_t>(size + 1), 0);
    if (ec) return read_failed(ec);
    std::string detail;
    if (auto ec = size_check(size, got, detail)) return read_failed(ec, std::move(detail));
    buf.resize(got);
    return {{}, blob{e.path, std::move(buf), std::move(origin), e.label, i}, {}};
}

/// `pread_file` of entry `i` as a call that owns what it reads with (the blocking pool may
/// finish it after the reader gave up on it). A named type: a closure in a non-inline
/// coroutine's frame has no linkage.
struct pread_call {
    buffer_pool pool;
    file_ref f;
    std::shared_ptr<const listing> lp;
    std::size_t i;
    file_read operator()() { return pread_file(pool, f, lp->entries[i], lp->full_path(i), i); }
};

/// The failed read of file `i` of `l`, as stage `stage` reports it.
CONVEYOR_DECL read_outcome<blob> read_failure(std::string_view stage, const listing& l, std::size_t i, std::error_code ec,
                                              std::string detail = {})
{
    return read_outcome<blob>(read_error(stage, ec, l, i, std::move(detail)));
}

/// What a read of file `i` of `l` gives the stage `stage`: the blob, or the error naming the file.
CONVEYOR_DECL read_outcome<blob> outcome_of(std::string_view stage, const listing& l, std::size_t i, file_read r)
{
    if (r.ec) return read_failure(stage, l, i, r.ec, std::move(r.detail));
    return read_outcome<blob>(std::move(r.b));
}

/// The token a read's operations complete with: a tuple, cancelled through `slot`.
inline auto read_token(asio::cancellation_slot slot)
{
    return asio::as_tuple(asio::bind_cancellation_slot(slot, asio::use_awaitable));
}

/// `read_file_now` with the pread backend: `pread_file` on the blocking pool.
CONVEYOR_DECL asio::awaitable<read_outcome<blob>> read_with_pread(const read_env& env, std::shared_ptr<const listing> lp,
                                                                  std::size_t i, std::string_view stage,
                                                                  asio::cancellation_slot slot)
{
    if (!slot.is_connected()) slot = (co_await asio::this_coro::cancellation_state).slot();
    // A named closure, not a temporary in the co_await: GCC 12 destroys such temporaries twice.
    pread_call call{env.rt->buffers(), file_of(env, *lp, i), lp, i};
    auto [ep, r] = co_await conveyor::detail::async_offload_abandonable(env.rt->blocking_executor(), std::move(call),
                                                                        read_token(slot));
    if (!ep) co_return outcome_of(stage, *lp, i, std::move(r));
    try {
        std::rethrow_exception(ep);
    } catch (const std::system_error& x) {
        co_return read_failure(stage, *lp, i, x.code());
    }
}

/// File `i` of `l`, read whole into `buf`.
CONVEYOR_DECL read_outcome<blob> read_success(const listing& l, std::size_t i, buffer buf)
{
    const entry& e = l.entries[i];
    return read_outcome<blob>(blob{e.path, std::move(buf), l.full_path(i), e.label, i});
}

/* The completion of a ring read of file `i` of `lp` whose size is known: checks the bytes
   read against it and completes `handler` with the outcome. Whatever is associated with
   the handler (executor, cancellation slot, allocator) is the read's (the
   `asio::associator` below). */
template <class Handler>
struct ring_read_done {
    Handler handler;
    std::shared_ptr<const listing> lp;
    std::size_t i;
    std::string_view stage;
    std::uint64_t size;
    // Where a cancellation comes from when not the handler's own slot (a read deadline's
    // signal): a value, not a binder, so that one handler type serves both.
    asio::cancellation_slot slot;

    asio::cancellation_slot cancellation() const noexcept
    {
        return slot.is_connected() ? slot : asio::get_associated_cancellation_slot(handler);
    }

    void operator()(std::error_code ec, buffer buf)
    {
        std::string detail;
        if (!ec && !(ec = size_check(size, buf.size(), detail))) return std::move(handler)(read_success(*lp, i, std::move(buf)));
        std::move(handler)(read_failure(stage, *lp, i, ec, std::move(detail)));
    }
};

} // namespace detail
} // namespace conveyor::file

namespace boost::asio {
// A ring read's completion has what its handler has associated with it (the same
// defaults included: a handler with no allocator of its own keeps Asio's recycling one),
// except a cancellation slot of its own when it has one.
template <template <class, class> class Associator, class Handler, class DefaultCandidate>
struct associator<Associator, conveyor::file::detail::ring_read_done<Handler>, DefaultCandidate>
    : Associator<Handler, DefaultCandidate> {
    static typename Associator<Handler, DefaultCandidate>::type
    get(const conveyor::file::detail::ring_read_done<Handler>& h) noexcept
    {
        return Associator<Handler, DefaultCandidate>::get(h.handler);
    }
    static auto get(const conveyor::file::detail::ring_read_done<Handler>& h, const DefaultCandidate& c) noexcept
        -> decltype(Associator<Handler, DefaultCandidate>::get(h.handler, c))
    {
        return Associator<Handler, DefaultCandidate>::get(h.handler, c);
    }
};

template <class Handler, class DefaultCandidate>
struct associated_cancellation_slot<conveyor::file::detail::ring_read_done<Handler>, DefaultCandidate> {
    using type = cancellation_slot;
    static type get(const conveyor::file::detail::ring_read_done<Handler>& h) noexcept { return h.cancellation(); }
    static type get(const conveyor::file::detail::ring_read_done<Handler>& h, const DefaultCandidate&) noexcept
    {
        return h.cancellation();
    }
};
} // namespace boost::asio

namespace conveyor::file {
namespace detail {

/// Starts a ring read of file `i` of `lp`, `size` bytes, into `buf`: small files as one
/// linked chain, large ones in chunks.
struct start_ring_read {
    const read_env* env;
    asio::cancellation_slot slot; // see ring_read_done
    template <class Handler>
    void operator()(Handler h, file_ref f, buffer buf, std::shared_ptr<const listing> lp, std::size_t i,
                    std::string_view stage, std::uint64_t size) const
    {
        ring_read_done<Handler> done{std::move(h), std::move(lp), i, stage, size, slot};
        if (size < env->chunk_size) {
            env->ring->async_read_small(std::move(f), std::move(buf), env->group, std::move(done));
        } else {
            env->ring->async_read_large(std::move(f), std::move(buf), env->chunk_size, env->chunks_in_flight, env->group,
                                        std::move(done));
        }
    }
};

/* `read_file_now` through the lane's ring, for a file whose size is known: one
   asynchronous operation, not a coroutine around one (a coroutine frame is allocated per
   file, and its resumption and return cost more than building the outcome in the read's
   completion). The file reference and the buffer are made here, before the operation
   starts, so that a failure to make them is thrown to the caller at once. */
CONVEYOR_DECL asio::awaitable<read_outcome<blob>> read_sized_with_ring(const read_env& env, std::shared_ptr<const listing> lp,
                                                                       std::size_t i, std::uint64_t size,
                                                                       std::string_view stage, asio::cancellation_slot slot)
{
    using signature = void(read_outcome<blob>);
    file_ref f = file_of(env, *lp, i);
    // One byte more than expected is asked for (and room kept for it): a file that grew
    // since it was listed is detected, not silently truncated.
    buffer buf = env.rt->buffers().acquire(size + 1);
    // The read listens on `slot` when one is given (a deadline's), else on the awaiting
    // coroutine's own slot, which its handler carries (ring_read_done::cancellation).
    return asio::async_initiate<const asio::use_awaitable_t<>&, signature>(
        start_ring_read{&env, slot}, asio::use_awaitable, std::move(f), std::move(buf), std::move(lp), i, stage, size);
}

/// `read_file_now` through the lane's ring, for a file listed without its size: a `statx`
/// first (an index file may leave sizes out).
CONVEYOR_DECL asio::awaitable<read_outcome<blob>> read_unsized_with_ring(const read_env& env, std::shared_ptr<const listing> lp,
                                                                         std::size_t i, std::string_view stage,
                                                                         asio::cancellation_slot slot)
{
    if (!slot.is_connected()) slot = (co_await asio::this_coro::cancellation_state).slot();
    auto [ec, size] = co_await env.ring->async_file_size(file_of(env, *lp, i), env.group, read_token(slot));
    if (ec) co_return read_failure(stage, *lp, i, ec);
    co_return co_await read_sized_with_ring(env, std::move(lp), i, size, stage, slot);
}

/// `read_file_now` through the lane's ring.
CONVEYOR_DECL asio::awaitable<read_outcome<blob>> read_with_ring(const read_env& env, std::shared_ptr<const listing> lp,
                                                                 std::size_t i, std::string_view stage,
                                                                 asio::cancellation_slot slot)
{
    const std::int64_t listed = lp->entries[i].size;
    if (listed < 0) return read_unsized_with_ring(env, std::move(lp), i, stage, slot);
    return read_sized_with_ring(env, std::move(lp), i, static_cast<std::uint64_t>(listed), stage, slot);
}

/// A read that ended before it began (it failed): `r`, as an awaitable.
CONVEYOR_DECL asio::awaitable<read_outcome<blob>> ready(read_outcome<blob> r)
{
    co_return std::move(r);
}

/** Reads file `i` of `l` whole, as it is: no deadline; failures are errors of stage
    `stage` naming the file. Must run on the thread of `env.ring`'s io_context when
    `env.ring` is set, else reads with pread on the blocking pool. A cancellation through
    `slot` (by default the awaiting coroutine's own) ends the read at once with
    `operation_canceled` (what the kernel still holds keeps its memory until it lets go).
    Completes with the error rather than throwing, so that skipping bad files costs no
    exception thrown. */
CONVEYOR_DECL asio::awaitable<read_outcome<blob>> read_file_now(const read_env& env, std::shared_ptr<const listing> lp,
                                                                std::size_t i, std::string_view stage,
                                                                asio::cancellation_slot slot = {})
{
    if (env.root && env.root->error())
        return ready(read_failure(stage, *lp, i, env.root->error(), "cannot open the dataset root " + lp->root.string()));
    if (env.ring) return read_with_ring(env, std::move(lp), i, stage, slot);
    return read_with_pread(env, std::move(lp), i, stage, slot);
}

/// A read's deadline: a timer that, once expired, cancels the read through a signal of
/// its own (as do cancellations of the awaiting coroutine, forwarded to it).
struct read_deadline {
    read_deadline(const asio::any_io_executor& ex, std::chrono::milliseconds after) : timer(ex, after) {}
    asio::steady_timer timer;
    asio::cancellation_signal signal;
    bool expired = false;
};

/** Reads file `i` of `l` whole, within `env.timeout`: past it, the read is abandoned and
    the result is `errc::read_timed_out`. A timer and a cancellation signal rather than a
    parallel group of the read and the timer: the same behaviour, and a user's
    translation unit of the header-only library compiles in 26 MB less memory. */
CONVEYOR_DECL asio::awaitable<read_outcome<blob>> read_file(const read_env& env, std::shared_ptr<const listing> l,
                                                            std::size_t i, std::string_view stage)
{
    auto d = std::make_shared<read_deadline>(co_await asio::this_coro::executor, env.timeout);
    d->timer.async_wait([d](const boost::system::error_code& ec) { // holds `d` until it runs (expired or cancelled)
        if (ec) return;
        d->expired = true;
        d->signal.emit(asio::cancellation_type::terminal);
    });
    // The awaiting coroutine's own cancellation reaches the read through the same signal.
    asio::cancellation_slot outer = (co_await asio::this_coro::cancellation_state).slot();
    if (outer.is_connected())
        outer.assign([d](asio::cancellation_type_t type) { d->signal.emit(type); });
    read_outcome<blob> r = co_await read_file_now(env, l, i, stage, d->signal.slot());
    if (outer.is_connected()) outer.clear();
    d->timer.cancel();
    if (d->expired && !r)
        co_return read_failure(stage, *l, i, make_error_code(errc::read_timed_out),
                               "no answer within " + std::to_string(env.timeout.count()) + " ms (source_options::read_timeout)");
    co_return r;
}

} // namespace detail
} // namespace conveyor::file

#endif
