// conveyor/file/impl/chunks.ipp — ranged reads of a local file and its chunk reader.
#ifndef CONVEYOR_FILE_IMPL_CHUNKS_IPP
#define CONVEYOR_FILE_IMPL_CHUNKS_IPP

#include <conveyor/file/chunks.hpp>

#include <conveyor/core/detail/chunk_window.hpp>
#include <conveyor/core/detail/offload.hpp>
#include <conveyor/file/detail/uring.hpp>
// ring_for: the calling lane's ring, or none (pread), as the file source decides it.
#include <conveyor/file/impl/source.ipp>

#include <conveyor/core/memory_budget.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <exception>
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
        const auto [ec, got] = pread_fully(file->fd(), buf.data(), buf.size(), offset);
        if (ec) return {ec, buffer{}};
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

/// A file's `chunk_reader` (see `read_chunks`): ranged reads of its chunks, several in
/// flight, through the `chunk_window` every chunk reader shares.
class file_chunk_reader final : public chunk_reader {
public:
    file_chunk_reader(runtime& rt, std::string path, chunk_options o) : rt_(rt), path_(std::move(path)), o_(o)
    {
        if (o_.chunk_size == 0) o_.chunk_size = 1;
        if (o_.chunks_in_flight == 0) o_.chunks_in_flight = 1;
        refill_ = [this] { fill(); };
    }

    ~file_chunk_reader() override
    {
        if (!win_) return;
        if (win_->lane().running_in_this_thread()) win_->close();
        else asio::post(win_->lane(), [w = win_] { w->close(); });
    }

    asio::awaitable<std::optional<chunk>> async_next() override
    {
        if (win_ && !win_->lane().running_in_this_thread())
            co_return co_await asio::co_spawn(win_->lane(), next_here(), asio::use_awaitable);
        if (!win_ && !rt_.current_io_lane())
            co_return co_await asio::co_spawn(rt_.next_io_executor(), next_here(), asio::use_awaitable);
        co_return co_await next_here();
    }

    const std::string& url() const noexcept override { return path_; }

    std::int64_t size() const noexcept override { return size_; }

private:
    CONVEYOR_DECL asio::awaitable<std::optional<chunk>> next_here();
    CONVEYOR_DECL asio::awaitable<void> open();
    CONVEYOR_DECL void fill();

    runtime& rt_;
    std::string path_;
    chunk_options o_;
    std::shared_ptr<conveyor::detail::chunk_window> win_;
    std::shared_ptr<const ranged_state> file_;
    uring* ring_ = nullptr;
    std::uint64_t next_ = 0; // the next byte to ask for
    std::uint64_t end_ = 0;  // one past the last byte to read
    std::exception_ptr failed_;
    std::int64_t size_ = -1;
    std::function<void()> refill_; // fill(), for the window's consumer loop
};

CONVEYOR_DECL asio::awaitable<void> file_chunk_reader::open()
{
    open_ranged_call call{&rt_, path_}; // named: see async_open
    auto file = co_await conveyor::detail::offload(rt_.blocking_executor(), std::move(call));
    auto lane = rt_.io_executor(*rt_.current_io_lane());
    ring_ = ring_here(rt_);
    next_ = o_.offset;
    end_ = o_.offset >= file->size ? o_.offset : o_.offset + std::min(o_.length, file->size - o_.offset);
    size_ = static_cast<std::int64_t>(file->size);
    file_ = std::move(file);
    // `chunks_in_flight` reads ahead of the consumer.
    win_ = std::make_shared<conveyor::detail::chunk_window>(rt_, o_, lane, o_.chunks_in_flight);
}

// Starts reads until the window is full or the range is asked for; then says the end.
CONVEYOR_DECL void file_chunk_reader::fill()
{
    while (win_->has_room() && next_ < end_) {
        const auto len = static_cast<std::size_t>(std::min<std::uint64_t>(o_.chunk_size, end_ - next_));
        const std::uint64_t at = next_;
        next_ += len;
        win_->reserve(at, len, [win = std::weak_ptr(win_), file = file_, ring = ring_](const std::shared_ptr<conveyor::detail::chunk_window::slot>& s) {
            auto w = win.lock();
            if (!w) return;
            buffer buf = w->rt().buffers().acquire(s->length);
            async_read_at(*file, ring, std::move(buf), s->offset,
                          asio::bind_cancellation_slot(s->cancel.slot(), asio::bind_executor(w->lane(), [w, s](std::error_code ec, buffer b) {
                                                           if (w->closed()) return;
                                                           w->complete(*s, std::move(b), ec);
                                                       })));
        });
    }
    if (next_ >= end_) win_->finish(nullptr); // the chunks in the window are the last
}

CONVEYOR_DECL asio::awaitable<std::optional<chunk>> file_chunk_reader::next_here()
{
    if (failed_) std::rethrow_exception(failed_);
    try {
        if (!win_) co_await open();
        // The next read starts as soon as there is room, while the consumer works on this chunk.
        auto s = co_await win_->async_take(refill_);
        if (!s) co_return std::nullopt;
        if (s->ec) throw ranged_error(s->ec, path_, static_cast<std::int64_t>(s->offset),
                                      "reading a chunk of " + std::to_string(s->length) + " bytes");
        if (s->buf.size() != s->length)
            throw ranged_error(make_error_code(errc::file_shrank), path_, static_cast<std::int64_t>(s->offset + s->buf.size()),
                               "the file ended " + std::to_string(s->length - s->buf.size()) + " bytes before the " +
                                   std::to_string(file_->size) + " it had when opened");
        fill();
        co_return chunk{leased_slice(std::move(s->buf), std::move(s->lease)), s->offset};
    } catch (const std::system_error& e) {
        if (e.code() == std::errc::operation_canceled) throw; // the caller went away: not the file's fault
        failed_ = std::current_exception();
        if (const auto* ce = dynamic_cast<const conveyor::error*>(&e); !ce)
            failed_ = std::make_exception_ptr(ranged_error(e.code(), path_, -1, e.what()));
        if (win_) win_->close();
        std::rethrow_exception(failed_);
    }
}

} // namespace detail

CONVEYOR_DECL std::unique_ptr<chunk_reader> read_chunks(runtime& rt, std::string path, chunk_options o)
{
    return std::make_unique<detail::file_chunk_reader>(rt, std::move(path), o);
}

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
