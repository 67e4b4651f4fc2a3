// conveyor/http/chunks.hpp — a resource behind an http(s):// URL read as a stream of chunks
// (a shard on a web server): one GET whose body arrives in pooled chunk buffers, resumed
// where it stopped after a failure.
#ifndef CONVEYOR_HTTP_CHUNKS_HPP
#define CONVEYOR_HTTP_CHUNKS_HPP

#include <conveyor/core/chunks.hpp>
#include <conveyor/core/location.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/http/client.hpp>
#include <conveyor/http/options.hpp>

#include <memory>
#include <string>

namespace conveyor::http {

/** Reads the resource at `target` (an encoded path and query) of `c`'s endpoint as a
    sequence of chunks (`conveyor::chunk_reader`, whose `url()` is the endpoint's URL
    followed by `target`): bytes [`o.offset`, `o.offset + o.length`) of it, clamped to its
    end, in chunks of `o.chunk_size` bytes (the last one shorter). A plain GET: no signing.

    As `s3::read_chunks` does for an object: one GET (ranged unless the whole resource is
    asked for) streamed from the socket into the chunks' pooled buffers, read ahead until
    `o.chunks_in_flight` filled chunks wait and then not read until the consumer takes one;
    each chunk's bytes taken from the runtime's `memory_budget` first. Failures worth a
    retry (`is_transient`, and the statuses 408, 429, 500, 502, 503, 504) are retried, up to
    5 attempts in a row with a backoff of 50 ms doubling to 2 s; a failure mid-body resumes
    with `Range: bytes=<next>-` and `If-Match: <ETag of the first reply>` (when the server
    sent one), and an attempt that delivered bytes starts a new series. Errors
    (`conveyor::error`, stage "http", naming the URL and the byte offset reached):
    `errc::error_status` for another status (404...), `errc::resource_changed` for a 412 or
    another ETag, `errc::bad_range` for an answer that does not hold the bytes asked for
    (a server that ignores Range), or the transport's error after the last attempt. An
    `o.offset` at or past the end (416) reads no chunk.

    Destroying the reader aborts the GET and closes its connection. Use it from one
    coroutine on one of the runtime's I/O threads (a call from elsewhere hops to the lane it
    first ran on); it holds `c`. */
[[nodiscard]] CONVEYOR_DECL std::unique_ptr<chunk_reader> read_chunks(std::shared_ptr<client> c, std::string target,
                                                                      chunk_options o = {});

/** Reads the resource at `where` (an `http://` or `https://` location: its endpoint,
    `http::endpoint_of`, and its `target()`) as above, with a client of its own made with
    `co` (its connections are closed when the reader is gone). Throws `conveyor::error`
    (`std::errc::invalid_argument`, stage "url") for a location that is not a web one or
    whose URL holds credentials. */
[[nodiscard]] CONVEYOR_DECL std::unique_ptr<chunk_reader> read_chunks(runtime& rt, const location& where, chunk_options o = {},
                                                                      client_options co = {});

/** `read_chunks(rt, location(url), o, co)`: `url` is parsed by `conveyor::location`'s
    rules, and any error in it is that parser's. */
[[nodiscard]] CONVEYOR_DECL std::unique_ptr<chunk_reader> read_chunks(runtime& rt, std::string url, chunk_options o = {},
                                                                      client_options co = {});

} // namespace conveyor::http

#if CONVEYOR_HEADER_ONLY
#include <conveyor/http/impl/chunks.ipp>
#endif

#endif
