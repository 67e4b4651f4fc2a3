// conveyor/http/error.hpp — error codes of the HTTP client, and which failures are worth a retry.
#ifndef CONVEYOR_HTTP_ERROR_HPP
#define CONVEYOR_HTTP_ERROR_HPP

#include <conveyor/core/error.hpp>

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/system/error_code.hpp>

#include <string>
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
    /// The body does not fit in the caller's `request::body_into`.
    body_too_large,
    /// The server closed the connection without sending any byte of a response.
    stale_connection,
    /// One attempt (one `send`, waiting for a connection included) took longer than
    /// `timeouts::attempt`.
    attempt_timeout,
};

namespace detail {
class http_category_impl final : public std::error_category {
public:
    const char* name() const noexcept override { return "conveyor.http"; }
    std::string message(int ev) const override
    {
        switch (static_cast<errc>(ev)) {
        case errc::connect_timeout: return "timed out connecting to the server";
        case errc::first_byte_timeout: return "timed out waiting for the response header";
        case errc::idle_timeout: return "timed out: no data moved for the idle timeout";
        case errc::total_timeout: return "timed out: the request took longer than its total timeout";
        case errc::body_truncated: return "the server closed the connection before the whole body arrived";
        case errc::body_too_large: return "the response body is larger than the destination buffer";
        case errc::stale_connection: return "the server closed the connection without responding";
        case errc::attempt_timeout: return "timed out: the attempt took longer than its attempt timeout";
        }
        return "unknown conveyor.http error";
    }
};
} // namespace detail

/// The category of `conveyor::http::errc`.
inline const std::error_category& http_category() noexcept
{
    static const detail::http_category_impl cat;
    return cat;
}

/// Makes a `std::error_code` from an HTTP client error value.
inline std::error_code make_error_code(errc e) noexcept
{
    return {static_cast<int>(e), http_category()};
}

/** True when a failure may well go away if the request is sent again: timeouts, a body
    cut short, a connection reset, refused or closed by the server, an unreachable
    network or host, a temporary DNS failure.

    False for everything else, notably `operation_aborted` (the caller cancelled),
    TLS failures such as certificate verification (retrying will not fix the
    certificate), an unknown host, `body_too_large`, malformed responses, and
    `std::errc::operation_not_permitted` (called off the runtime's I/O threads).
*/
inline bool is_transient(std::error_code ec) noexcept
{
    if (!ec) return false;
    if (ec.category() == http_category()) {
        switch (static_cast<errc>(ec.value())) {
        case errc::connect_timeout:
        case errc::first_byte_timeout:
        case errc::idle_timeout:
        case errc::total_timeout:
        case errc::attempt_timeout:
        case errc::body_truncated:
        case errc::stale_connection: return true;
        case errc::body_too_large: return false;
        }
        return false;
    }
    // errno values: std::system_category() maps them onto the generic conditions.
    if (ec == std::errc::connection_reset || ec == std::errc::connection_refused ||
        ec == std::errc::connection_aborted || ec == std::errc::broken_pipe ||
        ec == std::errc::network_unreachable || ec == std::errc::host_unreachable ||
        ec == std::errc::network_down || ec == std::errc::network_reset ||
        ec == std::errc::timed_out || ec == std::errc::not_connected)
        return true;
    // Asio's, Beast's and OpenSSL's categories, compared through their std adaptors.
    const auto is = [&](const boost::system::error_code& b) { return ec == static_cast<std::error_code>(b); };
    namespace asio = boost::asio;
    namespace bhttp = boost::beast::http;
    return is(asio::error::eof) || is(asio::error::host_not_found_try_again) ||
           is(asio::ssl::error::stream_truncated) || is(bhttp::error::end_of_stream) ||
           is(bhttp::error::partial_message);
}

} // namespace conveyor::http

template <>
struct std::is_error_code_enum<conveyor::http::errc> : std::true_type {};

#endif
