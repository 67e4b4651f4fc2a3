// conveyor/http/client.hpp — HTTP/1.1 client: keep-alive pools per lane, TLS, timeouts,
// bodies read straight into pooled buffers.
#ifndef CONVEYOR_HTTP_CLIENT_HPP
#define CONVEYOR_HTTP_CLIENT_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/http/endpoint.hpp>
#include <conveyor/http/error.hpp>
#include <conveyor/http/options.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/verb.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <utility>

namespace conveyor {
namespace asio = boost::asio;
class runtime;
} // namespace conveyor

namespace conveyor::http {

namespace detail {
struct client_impl;
} // namespace detail

/** Where a streamed response body goes (`request::body_to`): the client asks for room,
    reads from the socket into it, and says how much it wrote, so that the body lands in
    the caller's buffers as it arrives, however large, and the socket is not read while the
    caller has no room (backpressure: TCP's window then stops the server).

    Only a 2xx response's body is streamed; any other reply is read whole into
    `response::body` as usual (an error's XML, say), and the sink is not called.

    The client calls the sink on the request's lane, from inside `async_send`.
*/
class body_sink {
public:
    virtual ~body_sink() = default;

    /** A 2xx response's header arrived, before any body byte. A non-empty error ends the
        request with that error (the connection is closed): a reply that does not fit what
        was asked (a wrong range, a changed object). */
    virtual std::error_code on_header(unsigned status, const boost::beast::http::fields& headers) = 0;

    /** Room for the next body bytes: at least one byte. May wait for the caller to make
        room; no deadline runs meanwhile (the idle limit restarts once it returns; the
        `total` and `attempt` limits keep running). An empty span ends the request with
        `operation_aborted` (the sink's own cancellation).
        @par Completion Signature
        `std::span<std::byte>` */
    virtual asio::awaitable<std::span<std::byte>> async_prepare() = 0;

    /// `n` (at least 1) bytes were written at the start of the span last prepared.
    virtual void commit(std::size_t n) = 0;
};

namespace detail {
/// The most body bytes of a reply whose status is not 2xx that are held: error bodies
/// are short documents (S3's are under a kilobyte); a larger one is `body_too_large`.
inline constexpr std::uint64_t max_error_body_bytes = std::uint64_t{1} << 20;
} // namespace detail

/** One HTTP request. The client reads its fields only while `async_send` runs: they must stay
    valid until its awaitable completes. */
struct request {
    boost::beast::http::verb method = boost::beast::http::verb::get;
    /// The encoded path [+ '?' + query], sent as is ("" sends "/").
    std::string target;
    /// Header fields. `Host` (from the endpoint) and `User-Agent` are added unless present;
    /// `Content-Length` and `Transfer-Encoding` are the client's own and are not sent from
    /// here.
    boost::beast::http::fields headers;
    /// The request body; `Content-Length` is set from it (also when it is empty, for
    /// methods that carry a body: POST, PUT, PATCH).
    std::span<const std::byte> body;
    /// If non-empty, the response body is written here instead of into a pooled buffer
    /// (e.g. to reassemble ranged parts of an object in place); a larger body fails with
    /// `errc::body_too_large`.
    std::span<std::byte> body_into;
    /// The largest response body held whole in a pooled buffer (not `body_into`, whose size
    /// is its limit, nor a body streamed to `body_to`): a larger one fails with
    /// `errc::body_too_large`, at once when its Content-Length says so, else before much
    /// more than this is held. Unlimited by default. Whatever it says, the body of a reply
    /// whose status is not 2xx is held up to `detail::max_error_body_bytes` (1 MiB).
    std::uint64_t max_body = std::numeric_limits<std::uint64_t>::max();
    /// If set, a 2xx response's body is handed to this sink as it arrives (see
    /// `body_sink`) instead of being held whole: `response::body` stays empty and
    /// `response::body_size` counts the bytes delivered. A failure mid-body (reset,
    /// truncation, timeout) returns its error after the bytes already committed: the
    /// caller may ask for the rest with a ranged request.
    body_sink* body_to = nullptr;
    /// The end of the caller's whole call: a caller that retries sets it once, from its
    /// `timeouts::total`, for all its attempts. The request fails with
    /// `errc::total_timeout` when it passes, whatever its own limits (which still apply).
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

/// One HTTP response: any status, 4xx and 5xx included, with its body read.
struct response {
    /// The status code, e.g. 200 or 404.
    unsigned status = 0;
    /// The header fields.
    boost::beast::http::fields headers;
    /// The body, in a buffer from the runtime's pool; empty when `request::body_into` was
    /// used (the body is there) and for bodies of no bytes.
    buffer body;
    /// Body bytes received (also when they went to `request::body_into`).
    std::size_t body_size = 0;
    /// True when the request went over a kept-alive connection opened earlier.
    bool reused_connection = false;
};

/** An HTTP/1.1 client for one endpoint (plain HTTP or HTTPS through OpenSSL).

    Connections are kept alive and pooled per lane: each I/O thread of the runtime has its
    own idle list and its own share of `max_connections` and `max_idle`, touched only from that thread,
    so no request takes a lock. A connection goes back to its pool only when its response
    was read completely, nothing came after it, and the server allows keep-alive; any
    error, timeout or cancellation closes it. Before a kept-alive connection is used
    again, a non-blocking peek makes sure nothing waits on it: a server that drops an idle
    connection may first send a reply nobody asked for (`408 Request Timeout` with
    `Connection: close`), or half-close it; such a connection is closed and another one
    used. When a request on a kept-alive connection fails before any byte of its response
    arrives (reset, end of stream), or is answered 408 (the server's farewell crossed the
    request on the wire), it is sent again at once on a new connection, once, within the
    same call of `async_send`.

    Response bodies are read into buffers from the runtime's pool (or into
    `request::body_into`): for a Content-Length body, the bytes that came with the header
    are copied and the rest is read from the socket straight into place. Chunked bodies
    and bodies that end at the connection's close go through Beast's parser.

    TLS sessions are resumed: each lane keeps the latest session ticket (TLS 1.3, where
    it arrives after the handshake, with the first response) or session (TLS 1.2) that
    the server gave one of its connections, and a new connection offers it, so that it
    skips the certificate exchange and its verification; a server that declines gets a
    full handshake.

    Host names are resolved asynchronously on first use on each lane and the addresses
    kept for 30 seconds (new connections take them in turn); a host that is an IP address
    is never resolved. Transport failures are returned as error codes, never thrown;
    `is_transient` tells which of them a retry may cure.

    @par Thread Safety
    `async_send` may be called concurrently from coroutines running on any of the runtime's
    I/O threads (each uses its own thread's pool). Called from any other thread it
    completes at once with `std::errc::operation_not_permitted`: it does not hop threads,
    because its caller's coroutine would then continue on a thread it did not choose.
    `where`, `options` and `stats` are safe from any thread. The destructor must not run
    while a request is in flight (a precondition); it closes the idle connections, on
    their own threads.
*/
class client {
public:
    /** A client for `ep` whose connections live on `rt`'s I/O lanes; `rt` must outlive it.

        Throws `conveyor::error` (`std::errc::invalid_argument`) when the TLS settings
        cannot be used, e.g. a `ca_file` that cannot be read. Nothing is connected until
        the first request. */
    CONVEYOR_DECL client(runtime& rt, endpoint ep, client_options o = {});
    CONVEYOR_DECL ~client();

    client(const client&) = delete;
    client& operator=(const client&) = delete;

    /// The server this client talks to.
    CONVEYOR_DECL const endpoint& where() const noexcept;
    /// The settings it was made with.
    CONVEYOR_DECL const client_options& options() const noexcept;
    /// The runtime whose I/O lanes its connections live on.
    CONVEYOR_DECL runtime& rt() const noexcept;

    /** Sends `req` and reads the whole response.

        Must be awaited by a coroutine running on one of the runtime's I/O threads; `req`
        and the memory its spans point to must stay valid until it completes.

        @par Completion Signature
        `(std::error_code, response)`: on success the error is empty and the response
        holds any status (a 408 on a fresh connection included). On failure the response is
        empty and the error is one of `errc` (timeouts, `body_truncated`,
        `body_too_large`, `stale_connection`), a
        system error (e.g. `connection_refused`), a resolver, TLS or HTTP parsing error,
        `asio::error::operation_aborted` when cancelled, or
        `std::errc::operation_not_permitted` off the I/O threads.

        @par Per-Operation Cancellation
        Terminal cancellation of the awaiting coroutine (its Asio cancellation slot, as a
        `run_context` or `awaitable_operators` deliver it) aborts the request wherever it
        is (resolving excepted: the system resolver finishes its lookup first), closes its
        connection, and completes with `operation_aborted`. The awaiting coroutine's
        `throw_if_cancelled` setting is left as it found it.
    */
    CONVEYOR_DECL asio::awaitable<std::pair<std::error_code, response>> async_send(const request& req);

    /// Counts since the client was made.
    struct counters {
        std::uint64_t connections_opened; ///< connections established (TCP, and TLS if used)
        std::uint64_t requests;           ///< calls of `async_send` that reached the pool
        std::uint64_t reused;             ///< requests sent on a kept-alive connection
        std::uint64_t stale_retries;      ///< requests sent again after a kept-alive connection was found closed
        std::uint64_t discarded;          ///< kept-alive connections closed instead of reused: bytes waited on them, or the server had closed its side
        std::uint64_t tls_resumed;        ///< TLS connections that resumed an earlier session (an abbreviated handshake)
        std::uint64_t idle_closed;        ///< kept-alive connections closed to stay within `client_options::max_idle`
    };
    /// The counters (relaxed atomic reads: safe from any thread).
    CONVEYOR_DECL counters stats() const noexcept;

private:
    // Sockets, TLS, pools and counters: defined where only the library's own code sees them.
    std::unique_ptr<detail::client_impl> impl_;
};

} // namespace conveyor::http

#if CONVEYOR_HEADER_ONLY
#include <conveyor/http/impl/client.ipp>
#endif

#endif
