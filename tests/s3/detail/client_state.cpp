// Tests of conveyor/s3/detail/client_state.hpp: the helpers of the request executor and
// the transfers (Content-Range parsing).
#include "../../support/common.hpp"

#include <conveyor/s3/detail/client_state.hpp>

#include <cstdint>

namespace s3 = conveyor::s3;

TEST_CASE("Content-Range values are parsed strictly")
{
    std::uint64_t f = 0, l = 0;
    std::int64_t t = 0;
    CHECK(s3::detail::parse_content_range("bytes 0-8388607/1073741824", f, l, t));
    CHECK(f == 0);
    CHECK(l == 8388607);
    CHECK(t == 1073741824);
    CHECK(s3::detail::parse_content_range("bytes 5-9/*", f, l, t));
    CHECK(t == -1);
    CHECK_FALSE(s3::detail::parse_content_range("bytes 9-5/10", f, l, t));
    CHECK_FALSE(s3::detail::parse_content_range("items 0-1/2", f, l, t));
    CHECK_FALSE(s3::detail::parse_content_range("bytes 0-x/2", f, l, t));
    CHECK_FALSE(s3::detail::parse_content_range("bytes -1/2", f, l, t));
}

TEST_CASE("HTTP Date fields are read as IMF-fixdate, and nothing else")
{
    using namespace std::chrono;
    const auto t = s3::detail::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT");
    REQUIRE(t);
    CHECK(duration_cast<seconds>(t->time_since_epoch()).count() == 784111777);
    const auto leap = s3::detail::parse_http_date("Thu, 29 Feb 2024 23:59:59 GMT");
    REQUIRE(leap);
    CHECK(duration_cast<seconds>(leap->time_since_epoch()).count() == 1709251199);
    CHECK_FALSE(s3::detail::parse_http_date(""));
    CHECK_FALSE(s3::detail::parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT")); // RFC 850: obsolete
    CHECK_FALSE(s3::detail::parse_http_date("Sun Nov  6 08:49:37 1994"));       // asctime: obsolete
    CHECK_FALSE(s3::detail::parse_http_date("Sun, 06 Nov 1994 08:49:37 UTC"));
    CHECK_FALSE(s3::detail::parse_http_date("Sun, 31 Feb 1994 08:49:37 GMT"));
    CHECK_FALSE(s3::detail::parse_http_date("Sun, 06 Foo 1994 08:49:37 GMT"));
    CHECK_FALSE(s3::detail::parse_http_date("Sun, 06 Nov 1994 24:49:37 GMT"));
    CHECK_FALSE(s3::detail::parse_http_date("Sun, 0x Nov 1994 08:49:37 GMT"));
}

TEST_CASE("the AWS clock skew error codes are recognised")
{
    for (const char* c : {"RequestTimeTooSkewed", "RequestExpired", "RequestInTheFuture", "InvalidSignatureException",
                          "SignatureDoesNotMatch", "AuthFailure"})
        CHECK(s3::detail::is_clock_skew_code(c));
    for (const char* c : {"", "AccessDenied", "SlowDown", "requesttimetooskewed", "ExpiredToken"})
        CHECK_FALSE(s3::detail::is_clock_skew_code(c));
}
