// conveyor/file/impl/chunks.ipp — ranged reads of a local file and its chunk reader.
#ifndef CONVEYOR_FILE_IMPL_CHUNKS_IPP
#define CONVEYOR_FILE_IMPL_CHUNKS_IPP

#include <conveyor/file/chunks.hpp>

#include <conveyor/core/detail/offload.hpp>
#include <conveyor/file/detail/uring.hpp>
// ring_for: the calling lane's ring, or none (pread), as the file source decides it.
#include <conveyor/file/impl/source.ipp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace conveyor::file {

namespace detail {

/// An open file and what reading it needs.
struct ranged_state {
    runtime* rt = nullptr;
    std::string path;
    std::shared_ptr<const open_file> file;
    std::uint64_t size = 0;
};

/// The error of a failed read or open of `path` at `offset` (-1: the open).
CONVEYOR_DECL conveyor::error ranged_error(std::error_code ec, const std::string& path, std::int64_t offset,
                                           std::string detail = {})
{
    return conveyor::error(ec, {.stage = "file", .where = path, .offset = offset, .detail = std::move(detail)});
}

/// Opens `path` read-only (non-blocking, so that a FIFO cannot hold the open; for a regular
/// file the flag changes nothing) and takes its size; throws naming the path.
CONVEYOR_DECL std::shared_ptr<const ranged_state> open_ranged(runtime& rt, std::string path)
{
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw ranged_error(std::error_code(errno, std::system_category()), path, -1);
    auto f = std::make_shared<const open_file>(fd);
    struct stat st {};
    if (::fstat(fd, &st) < 0) throw ranged_error(std::error_code(errno, std::system_category()), path, -1);
    if (!S_ISREG(st.st_mode)) throw ranged_error(make_error_code(errc::not_a_regular_file), path, -1);
    auto s = std::make_shared<ranged_state>();
    s->rt = &rt;
    s->path = std::move(path);
    s->file = std::move(f);
    s->size = static_cast<std::uint64_t>(st.st_size);
    return s;
}

/// The open as a call for the blocking pool (a named type: see pread_call).
struct open_ranged_call {
    runtime* rt;
    std::string path;
    std::shared_ptr<const ranged_state> operator()() { return open_ranged(*rt, std::move(path)); }
};

/// A read of `buf.size()` bytes at `offset` with `pread`, on the blocking pool: it owns
/// the file and the buffer, so that it may finish after its caller gave up on it.
struct pread_at_call {
    std::shared_ptr<const open_file> file;
    buffer buf;
    std::uint64_t offset = 0;

    std::pair<std::error_code, buffer> operator()()
    {
        std::size_t got = 0;
        while (got < buf.size()) {
            const ssize_t n = ::pread(file->fd(), buf.data() + got, buf.size() - got, static_cast<off_t>(offset + got));
            if (n < 0) {
                if (errno == EINTR) continue;
                return {std::error_code(errno, std::system_category()), buffer{}};
            }
            if (n == 0) break; // end of file
            got += static_cast<std::size_t>(n);
        }
        buf.resize(got);
        return {std::error_code{}, std::move(buf)};
    }
};

/** Reads `buf.size()` bytes of `s` at `offset` into `buf`, through `ring`, or with `pread`
    on the blocking pool where `ring` is null, and completes with the error and the buffer
    resized to the bytes read (fewer only at end of file). Cancellation: the handler's
    slot. What the kernel or the pool still holds keeps its buffer until it lets go.
    @par Completion Signature
    `void(std::error_code, buffer)` */
template <class Token>
auto async_read_at(const ranged_state& s, uring* ring, buffer buf, std::uint64_t offset, Token&& token)
{
    return asio::async_initiate<Token, void(std::error_code, buffer)>(
        [](auto handler, const ranged_state& s, uring* ring, buffer buf, std::uint64_t offset) {
            if (ring) {
                ring->async_read_at(s.file, std::move(buf), offset, 0, std::move(handler));
                return;
            }
            // pread: the pool's outcome (an exception only when cancelled) becomes an error code.
            struct adapt {
                decltype(handler) h;
                using cancellation_slot_type = asio::associated_cancellation_slot_t<decltype(handler)>;
                cancellation_slot_type get_cancellation_slot() const noexcept { return asio::get_associated_cancellation_slot(h); }
                using executor_type = asio::associated_executor_t<decltype(handler)>;
                executor_type get_executor() const noexcept { return asio::get_associated_executor(h); }
                void operator()(std::exception_ptr ep, std::pair<std::error_code, buffer> r)
                {
                    if (ep) {
                        std::error_code ec = std::make_error_code(std::errc::operation_canceled);
                        try {
                            std::rethrow_exception(ep);
                        } catch (const std::system_error& x) {
                            ec = x.code();
                        } catch (...) {
                        }
                        return std::move(h)(ec, buffer{});
                    }
                    std::move(h)(r.first, std::move(r.second));
                }
            };
            conveyor::detail::async_offload_abandonable(s.rt->blocking_executor(),
                                                        pread_at_call{s.file, std::move(buf), offset},
                                                        adapt{std::move(handler)});
        },
        token, std::cref(s), ring, std::move(buf), offset);
}

/// The ring of the lane the caller runs on (null: pread). Must run on an I/O lane of `rt`.
CONVEYOR_DECL uring* ring_here(runtime& rt)
{
    const auto lane = rt.current_io_lane();
    return lane ? ring_for(rt, *lane) : nullptr;
}

/// `ranged_file::async_read` on an I/O lane of the file's runtime.
CONVEYOR_DECL asio::awaitable<buffer> read_ranged_here(std::shared_ptr<const ranged_state> s, std::uint64_t offset,
                                                       std::size_t length)
{
    uring* ring = ring_here(*s->rt);
    buffer buf = s->rt->buffers().acquire(length);
    auto [ec, got] = co_await async_read_at(*s, ring, std::move(buf), offset, asio::as_tuple(asio::use_awaitable));
    if (ec) throw ranged_error(ec, s->path, static_cast<std::int64_t>(offset), "reading " + std::to_string(length) + " bytes");
    co_return std::move(got);
}

} // namespace detail

CONVEYOR_DECL ranged_file::ranged_file(runtime& rt, std::string path) : state_(detail::open_ranged(rt, std::move(path))) {}

CONVEYOR_DECL asio::awaitable<ranged_file> ranged_file::async_open(runtime& rt, std::string path)
{
    // A named call, not a temporary in the co_await: GCC 12 destroys such temporaries twice.
    detail::open_ranged_call call{&rt, std::move(path)};
    auto s = co_await conveyor::detail::offload(rt.blocking_executor(), std::move(call));
    co_return ranged_file(std::move(s));
}

CONVEYOR_DECL const std::string& ranged_file::path() const noexcept
{
    return state_->path;
}

CONVEYOR_DECL std::uint64_t ranged_file::size() const noexcept
{
    return state_->size;
}

CONVEYOR_DECL asio::awaitable<buffer> ranged_file::async_read(std::uint64_t offset, std::size_t length) const
{
    runtime& rt = *state_->rt;
    if (rt.current_io_lane()) co_return co_await detail::read_ranged_here(state_, offset, length);
    co_return co_await asio::co_spawn(rt.next_io_executor(), detail::read_ranged_here(state_, offset, length),
                                      asio::use_awaitable);
}

} // namespace conveyor::file

#endif
