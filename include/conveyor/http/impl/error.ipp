// conveyor/http/impl/error.ipp — the conveyor.http category's messages, and which Asio, TLS
// and Beast failures are worth a retry.
#ifndef CONVEYOR_HTTP_IMPL_ERROR_IPP
#define CONVEYOR_HTTP_IMPL_ERROR_IPP

#include <conveyor/http/error.hpp>

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/system/error_code.hpp>

#include <string>

namespace conveyor::http {

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
        case errc::body_too_large: return "the response body is larger than the request allows (its destination buffer or limit)";
        case errc::stale_connection: return "the server closed the connection without responding";
        case errc::attempt_timeout: return "timed out: the attempt took longer than its attempt timeout";
        case errc::error_status: return "the server answered with an error status";
        case errc::bad_range: return "the server's answer does not hold the range asked for";
        case errc::resource_changed: return "the resource changed while it was read";
        }
        return "unknown conveyor.http error";
    }
};
} // namespace detail

CONVEYOR_DECL const std::error_category& http_category() noexcept
{
    static const detail::http_category_impl cat;
    return cat;
}

CONVEYOR_DECL std::error_code make_error_code(errc e) noexcept
{
    return {static_cast<int>(e), http_category()};
}

CONVEYOR_DECL bool is_transient(std::error_code ec) noexcept
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
        case errc::body_too_large:
        case errc::error_status:
        case errc::bad_range:
        case errc::resource_changed: return false;
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

#endif
