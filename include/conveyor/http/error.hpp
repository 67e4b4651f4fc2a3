// conveyor/http/error.hpp — error codes of the HTTP client, and which failures are worth a retry.
#ifndef CONVEYOR_HTTP_ERROR_HPP
#define CONVEYOR_HTTP_ERROR_HPP

#include <conveyor/detail/config.hpp>

#include <system_error>
#include <type_traits>

namespace conveyor::http {

/** Error codes of the HTTP client.

    Socket and TLS failures keep their own codes (`std::system_category()` for errno
    values, Asio's and Beast's categories for the rest); these are the failures that have
    no such code. HTTP statuses are never errors: a 404 or a 503 is a `response`.
*/
enum class errc {
    /// Resolving, connecting and the TLS handshake together took longer than
    /// `timeouts::connect`.
    connect_timeout = 1,
    /// The response's header did not arrive within `timeouts::first_byte` of the request
    /// being written.
    first_byte_timeout,
    /// No byte moved for `timeouts::idle` while writing the request or reading the body.
    idle_timeout,
    /// The whole call took longer than `timeouts::total`, or reached the caller's
    /// `request::deadline` (a caller that retries sets it once for all its attempts).
    total_timeout,
    /// The server closed the connection before sending the whole body (fewer bytes than
    /// its Content-Length, or an unfinished chunked body).
    body_truncated,
    /// The body does not fit in the caller's `request::body_into`, or is larger than
    /// `request::max_body` (or than an error reply's limit).
    body_too_large,
    /// The server closed the connection without sending any byte of a response.
    stale_connection,
    /// One attempt (one `async_send`, waiting for a connection included) took longer than
    /// `timeouts::attempt`.
    attempt_timeout,
    /// The server answered a request for a resource's bytes with an error status (a 4xx or
    /// 5xx: the status is in the error's detail).
    error_status,
    /// A ranged answer does not hold the bytes asked for (its Content-Range starts
    /// elsewhere, or a 200 with the whole resource came back to a request from an offset).
    bad_range,
    /// The resource changed while it was read in parts: its ETag no longer matched (412 to
    /// `If-Match`, or another ETag).
    resource_changed,
};

/// The category of `conveyor::http::errc`.
CONVEYOR_DECL const std::error_category& http_category() noexcept;

/// Makes a `std::error_code` from an HTTP client error value.
CONVEYOR_DECL std::error_code make_error_code(errc e) noexcept;

/** True when a failure may well go away if the request is sent again: timeouts, a body
    cut short, a connection reset, refused or closed by the server, an unreachable
    network or host, a temporary DNS failure.

    False for everything else, notably `operation_aborted` (the caller cancelled),
    TLS failures such as certificate verification (retrying will not fix the
    certificate), an unknown host, `body_too_large`, malformed responses, and
    `std::errc::operation_not_permitted` (called off the runtime's I/O threads).
*/
CONVEYOR_DECL bool is_transient(std::error_code ec) noexcept;

} // namespace conveyor::http

template <>
struct std::is_error_code_enum<conveyor::http::errc> : std::true_type {};

#if CONVEYOR_HEADER_ONLY
#include <conveyor/http/impl/error.ipp>
#endif

#endif
