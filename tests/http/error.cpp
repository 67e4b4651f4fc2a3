// Tests of conveyor/http/error.hpp: the conveyor.http category and its messages, and which
// failures is_transient takes for worth a retry (errno values, Asio's, TLS's and Beast's
// codes).
#include <conveyor/http/error.hpp>

#include <conveyor/core/error.hpp>

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/system/error_code.hpp>

#include <doctest/doctest.h>

#include <cerrno>
#include <string>
#include <system_error>
#include <utility>

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
namespace cv = conveyor;
namespace ch = conveyor::http;

TEST_CASE("http errc values have their own messages in the conveyor.http category")
{
    const std::pair<ch::errc, const char*> cases[] = {
        {ch::errc::connect_timeout, "timed out connecting to the server"},
        {ch::errc::first_byte_timeout, "timed out waiting for the response header"},
        {ch::errc::idle_timeout, "timed out: no data moved for the idle timeout"},
        {ch::errc::total_timeout, "timed out: the request took longer than its total timeout"},
        {ch::errc::body_truncated, "the server closed the connection before the whole body arrived"},
        {ch::errc::body_too_large, "the response body is larger than the request allows (its destination buffer or limit)"},
        {ch::errc::stale_connection, "the server closed the connection without responding"},
        {ch::errc::attempt_timeout, "timed out: the attempt took longer than its attempt timeout"},
        {ch::errc::error_status, "the server answered with an error status"},
        {ch::errc::bad_range, "the server's answer does not hold the range asked for"},
        {ch::errc::resource_changed, "the resource changed while it was read"},
    };
    for (const auto& [e, text] : cases) {
        const std::error_code ec = e; // is_error_code_enum: converts implicitly
        CAPTURE(text);
        CHECK(ec.category() == ch::http_category());
        CHECK(std::string(ec.category().name()) == "conveyor.http");
        CHECK(ec.message() == text);
        CHECK(ec == e);
    }
    CHECK(ch::http_category().message(999) == "unknown conveyor.http error");
    // Distinct from the core module's codes with the same values.
    CHECK(std::error_code(ch::errc::connect_timeout) != std::error_code(cv::errc::cancelled));
}

TEST_CASE("is_transient tells failures worth a retry from final ones")
{
    using ch::is_transient;
    for (auto e : {ch::errc::connect_timeout, ch::errc::first_byte_timeout, ch::errc::idle_timeout, ch::errc::total_timeout,
                   ch::errc::attempt_timeout, ch::errc::body_truncated, ch::errc::stale_connection})
        CHECK(is_transient(e));
    for (auto e : {ch::errc::body_too_large, ch::errc::error_status, ch::errc::bad_range, ch::errc::resource_changed})
        CHECK_FALSE(is_transient(e));
    CHECK_FALSE(is_transient(std::error_code{}));

    for (int e : {ECONNRESET, ECONNREFUSED, ECONNABORTED, EPIPE, ENETUNREACH, EHOSTUNREACH, ETIMEDOUT, ENETDOWN})
        CHECK(is_transient(std::error_code(e, std::system_category())));
    CHECK(is_transient(cv::to_std_error(asio::error::connection_reset)));
    CHECK(is_transient(cv::to_std_error(asio::error::eof)));
    CHECK(is_transient(cv::to_std_error(asio::error::host_not_found_try_again)));
    CHECK(is_transient(cv::to_std_error(asio::ssl::error::stream_truncated)));
    CHECK(is_transient(cv::to_std_error(bhttp::error::end_of_stream)));
    CHECK(is_transient(cv::to_std_error(bhttp::error::partial_message)));

    CHECK_FALSE(is_transient(cv::to_std_error(asio::error::operation_aborted)));
    CHECK_FALSE(is_transient(cv::to_std_error(asio::error::host_not_found)));
    CHECK_FALSE(is_transient(std::make_error_code(std::errc::operation_not_permitted)));
    CHECK_FALSE(is_transient(std::make_error_code(std::errc::invalid_argument)));
    CHECK_FALSE(is_transient(cv::to_std_error(bhttp::error::bad_version)));
    // A certificate that fails verification: OpenSSL's error, in Asio's ssl category.
    CHECK_FALSE(is_transient(cv::to_std_error(boost::system::error_code(0x0A000086, asio::error::get_ssl_category()))));
}
