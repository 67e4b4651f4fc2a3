// conveyor/http/detail/client_impl.hpp — the state behind `http::client` (its pimpl) and
// its request coroutines; `exchange`, the one template among them (a plain socket or a
// TLS stream), is defined here. Included only by the http module's .ipp files.
#ifndef CONVEYOR_HTTP_DETAIL_CLIENT_IMPL_HPP
#define CONVEYOR_HTTP_DETAIL_CLIENT_IMPL_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/http/client.hpp>
#include <conveyor/http/detail/connection.hpp>
#include <conveyor/http/error.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/optional/optional.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace conveyor::http::detail {

/// OpenSSL's new-session callback: keeps a copy of a resumable session on the lane of the
/// connection it came to (see `lane_pool::tls_session`).
CONVEYOR_DECL int keep_tls_session(SSL* ssl, SSL_SESSION* session);

/// The parser of a response whose body is read into buffers the reader points it at.
using body_parser = boost::beast::http::response_parser<boost::beast::http::buffer_body>;

/** What a `client` holds (see `http::client`): its endpoint and settings, the TLS
    context, one pool per I/O lane and the counters, with the coroutines that carry a
    request. Only `client` makes one, and it is never moved. */
struct client_impl {
    using time_point = std::chrono::steady_clock::time_point;

    /// Throws `conveyor::error` (`std::errc::invalid_argument`) when the TLS settings
    /// cannot be used (see `client::client`).
    CONVEYOR_DECL client_impl(runtime& rt, endpoint ep, client_options o);

    CONVEYOR_DECL asio::awaitable<std::pair<std::error_code, response>> perform(lane_pool& pool, const request& req);
    CONVEYOR_DECL asio::awaitable<std::error_code> resolve(lane_pool& pool, time_point deadline, phase deadline_phase);
    CONVEYOR_DECL asio::awaitable<std::error_code> connect(lane_pool& pool, connection& c, const limit& outer);
    /** One request and its response on an open connection, in its phases: `send_request`,
        `read_response_header`, then the body: streamed to the caller's sink
        (`stream_body`), of a known length (`read_sized_body`) or chunked / up to the close
        (`read_unsized_body`). `stale`: the failure is a reused connection the server had
        closed (the caller sends again on another); `keep`: the connection may be pooled. */
    template <class Stream>
    asio::awaitable<std::error_code> exchange(Stream& s, connection& c, const request& req, response& resp,
                                              bool reused, bool& stale, bool& keep, const limit& outer);
    /// Writes the header and body in as few writes as the socket takes.
    template <class Stream>
    asio::awaitable<std::error_code> send_request(Stream& s, connection& c, const request& req, bool reused, bool& stale,
                                                  const limit& outer);
    /// Reads the final response's header into `parser`, past interim responses (1xx).
    template <class Stream>
    asio::awaitable<std::error_code> read_response_header(Stream& s, connection& c, const request& req, bool reused, bool& stale,
                                                          std::optional<body_parser>& parser, const limit& outer);
    /// A body of `length` bytes: those read with the header, then straight from the socket
    /// into place (`req.body_into`, or a pooled buffer of at most `max_body` bytes).
    template <class Stream>
    asio::awaitable<std::error_code> read_sized_body(Stream& s, connection& c, const request& req, response& resp, std::uint64_t length,
                                                     std::uint64_t max_body, std::size_t& received, const limit& outer);
    /// A chunked body or one up to the close, decoded by the parser into a destination that
    /// grows (pooled) up to `max_body` bytes, or into `req.body_into`.
    template <class Stream>
    asio::awaitable<std::error_code> read_unsized_body(Stream& s, connection& c, body_parser& p, const request& req, response& resp,
                                                       std::uint64_t max_body, std::size_t& received, const limit& outer);
    /// Reads the body that follows the header `p` parsed into `sink`, piece by piece
    /// (see `body_sink`); `received` counts the bytes committed.
    template <class Stream>
    asio::awaitable<std::error_code> stream_body(Stream& s, connection& c, body_parser& p, body_sink& sink, std::uint64_t& received,
                                                 const limit& outer);

    CONVEYOR_DECL void write_head(std::string& out, const request& req) const;

    runtime* rt_;
    endpoint ep_;
    client_options opts_;
    std::string host_header_;
    std::string port_;
    bool host_is_address_ = false;
    std::chrono::steady_clock::duration watch_step_{};
    std::unique_ptr<asio::ssl::context> tls_;
    std::vector<std::unique_ptr<lane_pool>> lanes_;
    std::atomic<std::uint64_t> opened_{0};
    std::atomic<std::uint64_t> requests_{0};
    std::atomic<std::uint64_t> reused_{0};
    std::atomic<std::uint64_t> stale_retries_{0};
    std::atomic<std::uint64_t> discarded_{0};
    std::atomic<std::uint64_t> tls_resumed_{0};
};

/// What a failed body read stands for: the caller's cancellation, a deadline, a cut body
/// (`errc::body_truncated`), or the transport's own error.
inline std::error_code body_failure(const connection& c, const asio::cancellation_state& cs, const boost::system::error_code& ec)
{
    namespace bhttp = boost::beast::http;
    if (!detail::cancelled(cs) && c.expired() == phase::none &&
        (ec == bhttp::error::partial_message || ec == asio::error::eof || ec == bhttp::error::end_of_stream ||
         ec == asio::ssl::error::stream_truncated))
        return make_error_code(errc::body_truncated);
    return detail::failure(c, cs, ec);
}

template <class Stream>
asio::awaitable<std::error_code> client_impl::exchange(Stream& s, connection& c, const request& req, response& resp,
                                                       bool reused, bool& stale, bool& keep, const limit& outer)
{
    namespace bhttp = boost::beast::http;
    // (No co_await inside a condition or a call's arguments in these coroutines: GCC 12 has
    // miscompiled such frames here.)
    auto sent = send_request(s, c, req, reused, stale, outer);
    std::error_code ec = co_await std::move(sent);
    if (ec) co_return ec;
    std::optional<body_parser> parser;
    auto header = read_response_header(s, c, req, reused, stale, parser, outer);
    ec = co_await std::move(header);
    if (ec) co_return ec;
    auto& p = *parser;

    const unsigned status = p.get().result_int();
    if (req.body_to && status >= 200 && status < 300) {
        // A streamed body: into the caller's sink, as it arrives.
        ec = req.body_to->on_header(status, p.get());
        if (ec) co_return ec;
        std::uint64_t streamed = 0;
        auto body = stream_body(s, c, p, *req.body_to, streamed, outer);
        ec = co_await std::move(body);
        if (ec) co_return ec;
        resp.status = status;
        resp.headers = std::move(static_cast<bhttp::fields&>(p.get()));
        resp.body_size = static_cast<std::size_t>(streamed);
        keep = p.keep_alive() && c.buf.size() == 0;
        co_return std::error_code{};
    }
    // What may be held of a body in a pooled buffer: an error reply's is short.
    const std::uint64_t max_body = status >= 200 && status < 300 ? req.max_body : std::min(req.max_body, detail::max_error_body_bytes);
    std::size_t received = 0;
    if (p.is_done()) {
        // No body: HEAD, 1xx, 204, 304, or Content-Length: 0.
    } else if (const auto length = p.content_length(); length && !p.chunked()) {
        auto body = read_sized_body(s, c, req, resp, *length, max_body, received, outer);
        ec = co_await std::move(body);
    } else {
        auto body = read_unsized_body(s, c, p, req, resp, max_body, received, outer);
        ec = co_await std::move(body);
    }
    if (ec) co_return ec;

    const bool into = !req.body_into.empty();
    resp.status = status;
    resp.headers = std::move(static_cast<bhttp::fields&>(p.get()));
    resp.body_size = received;
    if (!into && received == 0) resp.body = buffer{};
    // Bytes beyond the response mean the connection's framing is lost: do not reuse it.
    keep = p.keep_alive() && c.buf.size() == 0 && resp.status != 101;
    co_return std::error_code{};
}

template <class Stream>
asio::awaitable<std::error_code> client_impl::send_request(Stream& s, connection& c, const request& req, bool reused, bool& stale,
                                                           const limit& outer)
{
    using detail::clock_type;
    using detail::phase;
    const auto cs = co_await asio::this_coro::cancellation_state;
    write_head(c.head, req);
    const std::size_t head_size = c.head.size();
    const std::size_t request_size = head_size + req.body.size();
    for (std::size_t done = 0; done < request_size;) {
        if (detail::cancelled(cs)) co_return detail::aborted();
        const auto [at, ph] = detail::bound(clock_type::now(), opts_.timeouts.idle, phase::idle, outer);
        c.expire_at(at, ph);
        const std::size_t body_done = done > head_size ? done - head_size : 0;
        const std::array<asio::const_buffer, 2> parts{
            asio::const_buffer(c.head.data() + std::min(done, head_size), head_size - std::min(done, head_size)),
            asio::const_buffer(req.body.data() + body_done, req.body.size() - body_done)};
        auto [ec, n] = co_await s.async_write_some(parts, detail::no_throw_for<Stream>());
        if (ec) {
            stale = reused && !detail::cancelled(cs) && c.expired() == phase::none && detail::is_peer_close(ec);
            co_return detail::failure(c, cs, ec);
        }
        done += n;
    }
    co_return std::error_code{};
}

template <class Stream>
asio::awaitable<std::error_code> client_impl::read_response_header(Stream& s, connection& c, const request& req, bool reused,
                                                                   bool& stale, std::optional<body_parser>& parser, const limit& outer)
{
    namespace bhttp = boost::beast::http;
    using detail::clock_type;
    using detail::phase;
    const auto cs = co_await asio::this_coro::cancellation_state;
    for (;;) {
        parser.emplace();
        parser->header_limit(detail::max_header_bytes);
        parser->body_limit(boost::none);
        if (req.method == bhttp::verb::head) parser->skip(true);
        if (detail::cancelled(cs)) co_return detail::aborted();
        const auto [at, ph] = detail::bound(clock_type::now(), opts_.timeouts.first_byte, phase::first_byte, outer);
        c.expire_at(at, ph);
        auto [ec, n] = co_await bhttp::async_read_header(s, c.buf, *parser, detail::no_throw);
        if (ec) {
            if (!parser->got_some() && !detail::cancelled(cs) && c.expired() == phase::none && detail::is_peer_close(ec)) {
                stale = reused;
                if (ec == bhttp::error::end_of_stream || ec == asio::error::eof || ec == asio::ssl::error::stream_truncated)
                    co_return make_error_code(errc::stale_connection);
            }
            co_return detail::failure(c, cs, ec);
        }
        const unsigned status = parser->get().result_int();
        // A status code is three digits from 100 up (RFC 9110, 15); Beast's parser takes any
        // three. 000 to 099 stand for no status at all (and 0 for "no reply" to callers):
        // a malformed response, which ends the connection.
        if (status < 100) co_return to_std_error(bhttp::error::bad_status);
        if (status >= 100 && status < 200 && status != 101) continue; // 100 Continue, 103 Early Hints
        if (status == 408 && reused) {
            // A server that drops an idle connection may send 408 first; here it crossed
            // the request on the wire (the connection was clean when it was taken). Like
            // browsers, take it for the server's farewell: the caller sends again.
            stale = true;
            co_return make_error_code(errc::stale_connection);
        }
        co_return std::error_code{};
    }
}

template <class Stream>
asio::awaitable<std::error_code> client_impl::read_sized_body(Stream& s, connection& c, const request& req, response& resp,
                                                              std::uint64_t length, std::uint64_t max_body, std::size_t& received,
                                                              const limit& outer)
{
    using detail::clock_type;
    using detail::phase;
    const auto cs = co_await asio::this_coro::cancellation_state;
    std::byte* dst = nullptr;
    if (!req.body_into.empty()) {
        if (length > req.body_into.size()) co_return make_error_code(errc::body_too_large);
        dst = req.body_into.data();
    } else {
        if (length > max_body || length > std::numeric_limits<std::size_t>::max()) co_return make_error_code(errc::body_too_large);
        // A length no memory can hold (a server may announce terabytes): too large,
        // reported as the other limits are, not thrown out of the request.
        bool unheld = false; // (no co_return in a handler: GCC 12's coroutines)
        try {
            resp.body = rt_->buffers().acquire(static_cast<std::size_t>(length));
        } catch (const std::bad_alloc&) {
            unheld = true;
        }
        if (unheld) co_return make_error_code(errc::body_too_large);
        dst = resp.body.data();
    }
    const auto size = static_cast<std::size_t>(length);
    received = std::min(size, c.buf.size());
    if (received > 0) std::memcpy(dst, c.buf.data().data(), received);
    c.buf.consume(received);
    while (received < size) {
        if (detail::cancelled(cs)) co_return detail::aborted();
        const auto [at, ph] = detail::bound(clock_type::now(), opts_.timeouts.idle, phase::idle, outer);
        c.expire_at(at, ph);
        auto [ec, n] = co_await s.async_read_some(asio::mutable_buffer(dst + received, size - received), detail::no_throw_for<Stream>());
        received += n;
        if (ec) co_return body_failure(c, cs, ec);
    }
    co_return std::error_code{};
}

template <class Stream>
asio::awaitable<std::error_code> client_impl::read_unsized_body(Stream& s, connection& c, body_parser& p, const request& req,
                                                                response& resp, std::uint64_t max_body, std::size_t& received,
                                                                const limit& outer)
{
    namespace bhttp = boost::beast::http;
    using detail::clock_type;
    using detail::phase;
    const auto cs = co_await asio::this_coro::cancellation_state;
    p.eager(true); // decode every chunk already read, not one per call
    const bool into = !req.body_into.empty();
    std::byte* dst = nullptr;
    std::size_t capacity = 0;
    if (into) {
        dst = req.body_into.data();
        capacity = req.body_into.size();
    } else {
        resp.body = rt_->buffers().acquire(detail::first_unsized_body_bytes);
        dst = resp.body.data();
        capacity = resp.body.capacity();
    }
    while (!p.is_done()) {
        if (received == capacity && !into) {
            // Twice the room, or one byte past the limit: enough to tell a body of exactly
            // the limit from a longer one.
            const std::uint64_t next = max_body < std::uint64_t{capacity} * 2 ? max_body + 1 : std::uint64_t{capacity} * 2;
            buffer bigger;
            try {
                bigger = rt_->buffers().acquire(static_cast<std::size_t>(next));
            } catch (const std::bad_alloc&) {
            }
            if (bigger.capacity() == 0) co_return make_error_code(errc::body_too_large);
            std::memcpy(bigger.data(), dst, received);
            resp.body = std::move(bigger);
            dst = resp.body.data();
            capacity = resp.body.capacity();
        }
        // With no room left in body_into, a read still finishes a body that is complete (the
        // last chunk is all that is left); more body bytes are too many.
        const std::size_t room = capacity - received;
        auto& b = p.get().body();
        b.data = dst + received;
        b.size = room;
        if (detail::cancelled(cs)) co_return detail::aborted();
        const auto [at, ph] = detail::bound(clock_type::now(), opts_.timeouts.idle, phase::idle, outer);
        c.expire_at(at, ph);
        auto [ec, n] = co_await bhttp::async_read_some(s, c.buf, p, detail::no_throw);
        received += room - b.size;
        if (!into && received > max_body) co_return make_error_code(errc::body_too_large);
        if (ec == bhttp::error::need_buffer) {
            if (room == 0) co_return make_error_code(errc::body_too_large);
            continue;
        }
        if (ec) co_return body_failure(c, cs, ec);
    }
    if (!into) resp.body.resize(received);
    co_return std::error_code{};
}

template <class Stream>
asio::awaitable<std::error_code> client_impl::stream_body(Stream& s, connection& c, body_parser& p, body_sink& sink,
                                                          std::uint64_t& received, const limit& outer)
{
    namespace bhttp = boost::beast::http;
    using detail::clock_type;
    using detail::phase;
    const auto cs = co_await asio::this_coro::cancellation_state;
    const auto& limits = opts_.timeouts;
    if (p.is_done()) co_return std::error_code{};
    const bool sized = p.content_length().has_value() && !p.chunked();
    if (sized) {
        // Content-Length: what came with the header first, then straight from the socket
        // into the sink's room, one read per room at most.
        const std::uint64_t size = *p.content_length();
        while (received < size) {
            c.expire_never(); // the caller may take its time making room
            auto asked = sink.async_prepare(); // named, not a temporary in the co_await (GCC 12)
        std::span<std::byte> room = co_await std::move(asked);
            if (detail::cancelled(cs) || room.empty()) co_return detail::aborted();
            if (room.size() > size - received) room = room.first(static_cast<std::size_t>(size - received));
            if (c.buf.size() > 0) {
                const std::size_t n = std::min(room.size(), c.buf.size());
                std::memcpy(room.data(), c.buf.data().data(), n);
                c.buf.consume(n);
                sink.commit(n);
                received += n;
                continue;
            }
            const auto [at, ph] = detail::bound(clock_type::now(), limits.idle, phase::idle, outer);
            c.expire_at(at, ph);
            auto [ec, n] = co_await s.async_read_some(asio::mutable_buffer(room.data(), room.size()), detail::no_throw_for<Stream>());
            if (n > 0) {
                sink.commit(n);
                received += n;
            }
            if (ec) co_return body_failure(c, cs, ec);
        }
        co_return std::error_code{};
    }
    // Chunked, or up to the connection's close: Beast's parser decodes into the room.
    p.eager(true);
    while (!p.is_done()) {
        c.expire_never();
        auto asked = sink.async_prepare(); // named, not a temporary in the co_await (GCC 12)
        std::span<std::byte> room = co_await std::move(asked);
        if (detail::cancelled(cs) || room.empty()) co_return detail::aborted();
        auto& b = p.get().body();
        b.data = room.data();
        b.size = room.size();
        const auto [at, ph] = detail::bound(clock_type::now(), limits.idle, phase::idle, outer);
        c.expire_at(at, ph);
        auto [ec, n] = co_await bhttp::async_read_some(s, c.buf, p, detail::no_throw);
        const std::size_t wrote = room.size() - b.size;
        if (wrote > 0) {
            sink.commit(wrote);
            received += wrote;
        }
        if (ec == bhttp::error::need_buffer) continue;
        if (ec) co_return body_failure(c, cs, ec);
    }
    co_return std::error_code{};
}

} // namespace conveyor::http::detail

#endif
