// conveyor/s3/chunks.hpp — an S3 object read as a stream of chunks: one GET whose body
// arrives in pooled chunk buffers, resumed where it stopped after a failure.
#ifndef CONVEYOR_S3_CHUNKS_HPP
#define CONVEYOR_S3_CHUNKS_HPP

#include <conveyor/core/chunks.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/s3/client.hpp>

#include <memory>
#include <string>

namespace conveyor::s3 {

/** Reads object `key` of `bucket` as a sequence of chunks (`conveyor::chunk_reader`, whose
    `url()` is `s3://bucket/key`): bytes [`o.offset`, `o.offset + o.length`) of it,
    clamped to its end, in chunks of `o.chunk_size` bytes (the last one shorter).

    One GetObject (a ranged one unless the whole object is asked for) whose body is read
    from the socket straight into the chunks' buffers (pooled, `o.chunk_size` each) as it
    arrives. The reader reads ahead while the consumer works, until `o.chunks_in_flight`
    filled chunks wait for it: then the socket is not read (TCP's window stops the server)
    until the consumer takes one. So one object streams at close to the link's rate even
    behind a long first-byte latency, in bounded memory. Each chunk's bytes are taken from
    the runtime's `memory_budget` before it is filled, and given back when the chunk's
    last slice dies. The GET starts at the first `async_next`.

    Retries and errors are those of whole GETs (`retry_options`, `request_error` naming
    `s3://bucket/key`). A failure mid-body (a reset, a truncated body, a timeout) is not
    started over: the next attempt asks for the rest, `Range: bytes=<next>-`, with
    `If-Match: <ETag of the first reply>`, so the bytes delivered are those of one version
    of the object; an attempt that delivered bytes starts a new series of `max_attempts`.
    A 412 then means the object changed: `errc::object_changed`, saying so, with the byte
    offset reached. Errors carry the byte offset where the stream stood. An `o.offset` at
    or past the end of the object (S3's 416) reads no chunk.

    Destroying the reader (or the end of the `client`'s runtime) aborts the GET and closes
    its connection; cancelling a coroutine awaiting `async_next` ends that call with
    `operation_canceled`. The client's `http.timeouts.total`, when set, bounds the whole
    stream, time the consumer takes included; the idle limit does not run while the reader
    waits for the consumer.

    Use it from one coroutine on one of the runtime's I/O threads (a call from elsewhere
    hops to the lane it first ran on); `c`'s state is shared, so the client object itself
    may go. */
[[nodiscard]] CONVEYOR_DECL std::unique_ptr<chunk_reader> read_chunks(const client& c, std::string bucket, std::string key,
                                                                      chunk_options o = {});

/// `read_chunks(c, object.bucket(), object.key(), o)` for an S3 location; another kind of
/// location throws `conveyor::error` (`std::errc::invalid_argument`, stage "s3") naming it.
[[nodiscard]] CONVEYOR_DECL std::unique_ptr<chunk_reader> read_chunks(const client& c, const location& object, chunk_options o = {});

} // namespace conveyor::s3

#if CONVEYOR_HEADER_ONLY
#include <conveyor/s3/impl/chunks.ipp>
#endif

#endif
