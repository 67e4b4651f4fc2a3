// conveyor/file/detail/uring.hpp — an io_uring ring driven by an Asio io_context.
// Internal to the file module (the file source's backend); not part of the public API.
#ifndef CONVEYOR_FILE_DETAIL_URING_HPP
#define CONVEYOR_FILE_DETAIL_URING_HPP

#include <conveyor/detail/config.hpp>

#include <conveyor/core/buffer.hpp>
#include <conveyor/file/error.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/io_context.hpp>

#include <linux/openat2.h>

#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

namespace conveyor::file::detail {

namespace asio = boost::asio;

/** For tests only: when not 0, every read of a file's bytes (the ring's reads and `pread`)
    asks for at most this many bytes at a time. A read of a regular file may legally return
    fewer bytes than asked before its end (a signal, a network or FUSE file system); on a
    local disk it almost never does, so a test sets this to make every read short and see
    that each is continued. Never set by the library. */
inline std::atomic<std::uint32_t> read_cap_for_tests{0};

/// `n`, or less under `read_cap_for_tests`.
inline std::size_t capped_read(std::size_t n) noexcept
{
    const std::uint32_t cap = read_cap_for_tests.load(std::memory_order_relaxed);
    return cap != 0 && n > cap ? cap : n;
}

/// Settings of a ring.
struct uring_options {
    /// Submission queue entries (the completion queue gets twice as many).
    unsigned entries = 256;
    /// Files open at once: the size of the registered (direct) file table. Reads beyond
    /// this wait in a backlog until a slot frees.
    unsigned max_files = 256;
};

/// The error of a system call that returned `negative_res` (-errno).
CONVEYOR_DECL std::error_code errno_code(int negative_res) noexcept;

/** An open directory that reads resolve their paths against (`open(O_PATH | O_DIRECTORY)`).
    Reads hold it by `shared_ptr`, so it stays open while any of them is in the kernel.

    @par Thread Safety
    Safe (immutable once opened).
*/
class directory {
public:
    /// Opens `path`; if that fails, `error()` says why and `fd()` is -1.
    CONVEYOR_DECL explicit directory(const std::string& path);
    directory(const directory&) = delete;
    directory& operator=(const directory&) = delete;
    CONVEYOR_DECL ~directory();
    int fd() const noexcept { return fd_; }
    const std::error_code& error() const noexcept { return error_; }

private:
    int fd_ = -1;
    std::error_code error_;
};

/// Which file an operation opens.
struct file_ref {
    /// What `path` is relative to; null: the working directory (or `path` is absolute).
    std::shared_ptr<const directory> dir;
    std::string path;
    /// `path` must resolve below `dir`, through symlinks too (`openat2` with
    /// `RESOLVE_BENEATH`); a path that leaves it fails with `errc::path_escapes_root`.
    bool beneath = false;
    /// The listing found a regular file here, of the size the read asks for less one byte
    /// (`entry::size` known): a small read first tries without a `statx` (see
    /// `small_read_op` in impl/uring.ipp), and falls back to the checked way on anything
    /// but the whole file read at once from the page cache.
    bool listed_regular = false;

    int dirfd() const noexcept { return dir ? dir->fd() : AT_FDCWD; }
};

/// How a read opens `f` (`openat2`): read-only, with `extra` flags, and non-blocking (a
/// FIFO or device must not hold the open; it is refused after; for regular files the flag
/// changes nothing); below `f.dir` when `f.beneath`.
CONVEYOR_DECL open_how how_to_open(const file_ref& f, std::uint64_t extra = 0) noexcept;

/// The error of a failed open of `f` (-errno `res`): leaving the root under
/// RESOLVE_BENEATH is EXDEV, which says `errc::path_escapes_root`.
CONVEYOR_DECL std::error_code open_error(int res, const file_ref& f) noexcept;

/** A file opened with an ordinary descriptor (`O_RDONLY | O_CLOEXEC`), for reads at any
    offset on any lane's ring (`uring::async_read_at`) or with `pread`. Reads hold it by
    `shared_ptr`, so the descriptor is closed only after the last read has left the kernel.

    @par Thread Safety
    Safe (immutable once opened).
*/
class open_file {
public:
    /// Takes ownership of `fd` (closed by the destructor).
    explicit open_file(int fd) noexcept : fd_(fd) {}
    open_file(const open_file&) = delete;
    open_file& operator=(const open_file&) = delete;
    CONVEYOR_DECL ~open_file();
    int fd() const noexcept { return fd_; }

private:
    int fd_ = -1;
};

/** An io_uring ring whose completions are delivered on an `asio::io_context`.

    The ring's eventfd is registered with the kernel and watched by Asio, so completions
    wake the same event loop as network I/O. Operations prepared during one turn of the
    loop are submitted together by one `io_uring_submit` at the end of the turn; completions
    are reaped in batches (`io_uring_for_each_cqe`, then one `io_uring_cq_advance`).

    Whole-file reads use registered ("direct") file descriptors (opened without O_CLOEXEC,
    which the kernel rejects for them: they are not in the process's fd table at all) so
    that a small file is one linked chain of three SQEs — `openat2` into a slot, `read`,
    `close` of the slot — submitted at once with a `statx` beside it: one file costs no
    system call of its own. The `statx` tells a regular file from a FIFO, socket or device, which is refused
    (`errc::not_a_regular_file`) without waiting on it: the open is non-blocking and a read
    already waiting on such a file is cancelled.

    Cancellation: each operation honours its handler's cancellation slot (Asio's per-operation
    cancellation), and `cancel_group` cancels a whole group. A cancelled operation completes
    at once with `operation_canceled`; what the kernel cannot cancel at once (a read waiting
    on a hung network mount) is left to finish, and the operation keeps its buffer and
    state until the kernel lets go of them.

    The ring and its operations live in `uring::impl` (`detail/impl/uring.ipp`), so that
    only that file sees liburing.

    @par Thread Safety
    Unsafe: every member must be called on the thread running the io_context (the ring
    is single-issuer). Asynchronous operations complete through their handler's
    associated executor.
*/
class uring {
public:
    /// Handler of a read: the error, and the buffer given to the read, resized to the bytes
    /// read (empty on error).
    using read_handler = asio::any_completion_handler<void(std::error_code, buffer)>;
    using size_handler = asio::any_completion_handler<void(std::error_code, std::uint64_t)>;

    /// Creates the ring. If the kernel refuses (old kernel, seccomp, `io_uring_disabled`),
    /// `available()` is false and `unavailable_reason()` says why.
    CONVEYOR_DECL uring(asio::io_context& ctx, uring_options opts);

    uring(const uring&) = delete;
    uring& operator=(const uring&) = delete;

    CONVEYOR_DECL ~uring();

    CONVEYOR_DECL bool available() const noexcept;
    CONVEYOR_DECL const std::string& unavailable_reason() const noexcept;
    CONVEYOR_DECL asio::io_context& context() noexcept;
    /// Operations in flight (abandoned ones included, until the kernel is done with them)
    /// or waiting for a file slot.
    CONVEYOR_DECL std::size_t in_flight() const noexcept;

    /** Stat `f` (io_uring `statx`, following symlinks) and complete with its size.
        A directory or special file completes with `errc::not_a_regular_file`.
        @par Completion Signature
        `void(std::error_code, std::uint64_t size)` */
    template <class Token>
    auto async_file_size(file_ref f, std::uint64_t group, Token&& token)
    {
        return asio::async_initiate<Token, void(std::error_code, std::uint64_t)>(
            [this](auto handler, file_ref f, std::uint64_t group) {
                const bool here = completes_here(handler);
                start_file_size(std::move(f), group, size_handler(std::move(handler)), here);
            },
            token, std::move(f), group);
    }

    /** Read the first `buf.size()` bytes of `f` into `buf` with one linked chain:
        `openat2` (direct, non-blocking) → `read` → `close` (direct), and a `statx` beside
        it that refuses special files. Completes
        with the buffer resized to the bytes read, fewer than asked at end of file.
        @par Completion Signature
        `void(std::error_code, buffer)` */
    template <class Token>
    auto async_read_small(file_ref f, buffer buf, std::uint64_t group, Token&& token)
    {
        return asio::async_initiate<Token, void(std::error_code, buffer)>(
            [this](auto handler, file_ref f, buffer buf, std::uint64_t group) {
                const bool here = completes_here(handler);
                start_read_small(std::move(f), std::move(buf), group, read_handler(std::move(handler)), here);
            },
            token, std::move(f), std::move(buf), group);
    }

    /** Read the first `buf.size()` bytes of `f` into `buf` in chunks of `chunk` bytes, up to
        `parallel` chunks in flight: `statx` and `openat2` (direct), the reads, `close`
        (direct). Completes with the buffer resized to the bytes read.
        @par Completion Signature
        `void(std::error_code, buffer)` */
    template <class Token>
    auto async_read_large(file_ref f, buffer buf, std::uint32_t chunk, unsigned parallel, std::uint64_t group,
                          Token&& token)
    {
        return asio::async_initiate<Token, void(std::error_code, buffer)>(
            [this, chunk, parallel](auto handler, file_ref f, buffer buf, std::uint64_t group) {
                const bool here = completes_here(handler);
                start_read_large(std::move(f), std::move(buf), chunk, parallel, group, read_handler(std::move(handler)), here);
            },
            token, std::move(f), std::move(buf), group);
    }

    /** Read `buf.size()` bytes of `f` from `offset` into `buf` (io_uring `read` on an
        ordinary descriptor, that is `pread`), asking again after a partial read. Completes
        with the buffer resized to the bytes read: fewer than asked only at end of file.
        @par Completion Signature
        `void(std::error_code, buffer)` */
    template <class Token>
    auto async_read_at(std::shared_ptr<const open_file> f, buffer buf, std::uint64_t offset, std::uint64_t group,
                       Token&& token)
    {
        return asio::async_initiate<Token, void(std::error_code, buffer)>(
            [this](auto handler, std::shared_ptr<const open_file> f, buffer buf, std::uint64_t offset, std::uint64_t group) {
                const bool here = completes_here(handler);
                start_read_at(std::move(f), std::move(buf), offset, group, read_handler(std::move(handler)), here);
            },
            token, std::move(f), std::move(buf), offset, group);
    }

    /// Cancels every operation of `group`: each completes at once with `operation_canceled`
    /// (see the class comment for what the kernel still holds).
    CONVEYOR_DECL void cancel_group(std::uint64_t group);

    class impl;

private:
    /* Whether `h` completes on this ring's own io_context: its associated executor is that
       context's plain executor (as for a coroutine running on the ring's I/O thread), or it
       has none. Such a handler is called directly when its operation completes on the
       context's thread, which is what dispatching it there would do, without asking the
       type-erased handler for its executor (that wraps one type-erased executor in another,
       an allocation per operation). Anything else (a strand, another context) is dispatched
       through its executor. Known here, where the handler's type still is. */
    template <class Handler>
    bool completes_here(const Handler& h)
    {
        using context_executor = asio::io_context::executor_type;
        const auto ex = asio::get_associated_executor(h, context().get_executor());
        if constexpr (std::is_same_v<std::decay_t<decltype(ex)>, context_executor>) {
            return &ex.context() == &context();
        } else if constexpr (requires { ex.template target<context_executor>(); }) {
            const auto* t = ex.template target<context_executor>();
            return t && &t->context() == &context();
        } else {
            return false;
        }
    }

    // The initiations of the async_* operations: each starts its operation on the ring.
    // `here`: see completes_here.
    CONVEYOR_DECL void start_file_size(file_ref f, std::uint64_t group, size_handler h, bool here);
    CONVEYOR_DECL void start_read_small(file_ref f, buffer buf, std::uint64_t group, read_handler h, bool here);
    CONVEYOR_DECL void start_read_large(file_ref f, buffer buf, std::uint32_t chunk, unsigned parallel,
                                        std::uint64_t group, read_handler h, bool here);
    CONVEYOR_DECL void start_read_at(std::shared_ptr<const open_file> f, buffer buf, std::uint64_t offset,
                                     std::uint64_t group, read_handler h, bool here);

    std::unique_ptr<impl> impl_;
};

/** The ring of an `io_context`, as an Asio service: one ring per I/O thread, created on
    first use with the options given then.

    @par Thread Safety
    `get` is safe from any thread; the ring itself belongs to the context's thread.
*/
class uring_service : public asio::detail::execution_context_service_base<uring_service> {
public:
    explicit uring_service(asio::execution_context& ctx) : execution_context_service_base<uring_service>(ctx) {}

    /// The ring of `ctx` (whose service this is), created with `opts` if it is new.
    CONVEYOR_DECL uring& get(asio::io_context& ctx, const uring_options& opts);

    CONVEYOR_DECL void shutdown() override;

private:
    std::once_flag once_;
    std::unique_ptr<uring> ring_;
};

} // namespace conveyor::file::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/file/detail/impl/uring.ipp>
#endif

#endif
