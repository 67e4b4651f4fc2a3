// conveyor/file/chunks.hpp — reading parts of a local file: at any offset (ranged_file),
// or from start to end as prefetched chunks (read_chunks).
#ifndef CONVEYOR_FILE_CHUNKS_HPP
#define CONVEYOR_FILE_CHUNKS_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/chunks.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/file/error.hpp>

#include <boost/asio/awaitable.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace conveyor::file {

namespace detail {
struct ranged_state;
} // namespace detail

/** A local file opened once and read at any offsets, many reads in flight at once: the
    random access of a shard (a member by its index) and of the shard writer's shuffle.

    Each read goes through the io_uring ring of the I/O lane it is awaited on (a `read` at
    an offset of an ordinary descriptor, that is `pread`), or, where the runtime reads with
    `pread` (`io_backend::pread`, or io_uring refused), through `pread` on the runtime's
    blocking pool, as the file source does. A read awaited off the runtime's I/O threads
    hops to one of them.

    Copies share the open file (a `shared_ptr`): it is closed when the last copy and the
    last read in flight are gone.

    @par Thread Safety
    Distinct objects: safe. Shared objects: safe for `async_read` and the accessors (the
    object is immutable once open); reads of one file may be awaited on several lanes.
*/
class ranged_file {
public:
    /// No file (a value to assign an opened one to): only `is_open()` may be called.
    ranged_file() noexcept = default;

    /** Opens `path` for reading now (`open` and `fstat` on the calling thread: quick on a
        local disk; from an I/O thread prefer `async_open`). Throws `conveyor::error` naming
        the path when it cannot be opened or is not a regular file
        (`errc::not_a_regular_file`). */
    CONVEYOR_DECL ranged_file(runtime& rt, std::string path);

    /** Opens `path` on the runtime's blocking pool, so that a hung mount does not stall the
        I/O thread. Throws as the constructor does.
        @par Completion Signature
        `ranged_file` */
    [[nodiscard]] CONVEYOR_DECL static asio::awaitable<ranged_file> async_open(runtime& rt, std::string path);

    /// True for a file opened by the constructor or `async_open`.
    bool is_open() const noexcept { return state_ != nullptr; }

    /// The path as given.
    CONVEYOR_DECL const std::string& path() const noexcept;
    /// The file's size when it was opened.
    CONVEYOR_DECL std::uint64_t size() const noexcept;

    /** Reads `length` bytes from `offset` into a buffer of the runtime's pool.

        A read that reaches past the end of the file gives fewer bytes: those up to the end
        (none at or past it). That is not an error: the buffer's `size()` says how many
        were read, and the caller decides (the file may also have grown or shrunk since it
        was opened: the read sees the file as it is now). Throws `conveyor::error` naming
        the path and `offset` when the read fails. Cancelling the awaiting coroutine ends
        the read at once with `operation_canceled`; the kernel may still be writing into
        its buffer, which is kept until it lets go.
        @par Completion Signature
        `buffer` */
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<buffer> async_read(std::uint64_t offset, std::size_t length) const;

private:
    explicit ranged_file(std::shared_ptr<const detail::ranged_state> s) noexcept : state_(std::move(s)) {}

    std::shared_ptr<const detail::ranged_state> state_;
};

/** Reads the file at `path` as a sequence of chunks (`conveyor::chunk_reader`): bytes
    [`o.offset`, `o.offset + o.length`) of it, clamped to its end, in chunks of
    `o.chunk_size` bytes (the last one shorter), each a `slice` of a pooled buffer of its own.

    The file is opened on the runtime's blocking pool at the first `async_next` (errors
    name the path); its `size()` is known from then on (`fstat`). Reads go through the
    io_uring ring of the lane the reader is used on (or `pread` on the blocking pool, as the
    file source decides): `o.chunks_in_flight` chunks are read ahead of the consumer, never
    more, so a consumer that stops stops the reads. Before each read the reader takes the
    chunk's bytes from the runtime's `memory_budget` (waiting for room), and the chunk's
    storage gives them back when its last slice dies.

    Errors: `async_next` throws `conveyor::error` naming the path and the chunk's byte
    offset: a failed read, or `errc::file_shrank` when the file ends before the size it had
    at the open. Once failed, the reader throws the same error again.

    Destroying the reader cancels its reads in flight (the kernel may still be writing into
    their buffers: those are kept until it lets go); cancelling the coroutine awaiting
    `async_next` ends that call with `operation_canceled`. The reader must be used on one
    thread, that of an I/O lane of `rt` (a call from elsewhere hops to the lane it first
    ran on), and must not outlive `rt`. */
[[nodiscard]] CONVEYOR_DECL std::unique_ptr<chunk_reader> read_chunks(runtime& rt, std::string path, chunk_options o = {});

} // namespace conveyor::file

#if CONVEYOR_HEADER_ONLY
#include <conveyor/file/impl/chunks.ipp>
#endif

#endif
