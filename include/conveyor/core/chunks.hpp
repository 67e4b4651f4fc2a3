// conveyor/core/chunks.hpp — one object's bytes read as a sequence of chunks: how a shard
// on disk, in a bucket or behind a URL reaches the tar reader without being held whole.
#ifndef CONVEYOR_CORE_CHUNKS_HPP
#define CONVEYOR_CORE_CHUNKS_HPP

#include <conveyor/core/slice.hpp>
#include <conveyor/detail/config.hpp>

#include <boost/asio/awaitable.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

namespace conveyor {

namespace asio = boost::asio;

/// Bytes [`offset`, `offset + bytes.size()`) of an object.
struct chunk {
    slice bytes;
    std::uint64_t offset = 0;
};

/// How an object is read in chunks.
struct chunk_options {
    /** Bytes per chunk (the last one may be shorter). Also the pooled buffer size.
        2 MiB: the kernel's copy into a chunk is most of a warm local read, and it is much
        cheaper into a buffer that is still in cache. Measured reading 9 warm shards (2.2 GB,
        4 at once, 2 ahead): 18-18.5 GB/s with 2 MiB chunks, 14-16 GB/s with 8 MiB ones (cat:
        24 GB/s); over S3 with 20 ms to first byte the two were alike (2.6-2.9 GB/s), the
        smaller in 66 MB of RSS instead of 165. A streamed GET is one request whatever the
        chunk size, so smaller chunks cost no round trips. */
    std::size_t chunk_size = std::size_t{2} << 20;
    /// Chunks requested ahead of the consumer (prefetch): reads of chunks k+1 … k+n are in
    /// flight while chunk k is being consumed. At least 1.
    unsigned chunks_in_flight = 2;
    /// Where to start (resume, or a ranged read of part of a shard).
    std::uint64_t offset = 0;
    /// How many bytes to read from `offset` at most (the rest of the object by default).
    std::uint64_t length = std::numeric_limits<std::uint64_t>::max();
    /** Take each chunk's bytes from the runtime's memory budget before reading it (given
        back when the chunk's last slice is gone). False: the caller accounts for them, as
        the shard source does, which takes the read-ahead of all the shards a run has open
        at once in one piece when the run starts: a run that waited for room chunk by chunk
        while holding other chunks could wait for ever on memory that only its own
        progress would free. */
    bool use_memory_budget = true;
};

/** A sequential reader of one object's bytes in chunks, with prefetch and backpressure:
    at most `chunks_in_flight` chunks are read ahead of the consumer, so a slow consumer
    stops the reads and memory stays bounded whatever the object's size.
    Chunks come in order, contiguous, starting at `chunk_options::offset`. A reader is used
    by one coroutine at a time, on one of its runtime's I/O threads; destroying it cancels
    what is in flight.
*/
class chunk_reader {
public:
    virtual ~chunk_reader() = default;

    /** The next chunk, or nullopt after the last one.
        Throws `conveyor::error` naming `url()` and the byte offset when the object cannot
        be read (after the source's own retries).
        @par Completion Signature
        `std::optional<chunk>` */
    [[nodiscard]] virtual asio::awaitable<std::optional<chunk>> async_next() = 0;

    /// The object's full name: a path, `s3://bucket/key` or an `http(s)://` URL.
    virtual const std::string& url() const noexcept = 0;

    /// The object's total size in bytes when known (after the first chunk at the latest),
    /// else -1.
    virtual std::int64_t size() const noexcept = 0;
};

} // namespace conveyor

#endif
