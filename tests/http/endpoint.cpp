// Tests of conveyor/http/endpoint.hpp: parsing an endpoint from a URL or a location
// (defaults, IPv6, base paths, the same reading as conveyor::location), what it refuses
// and how it says so, and its Host header and URL. (An endpoint URL's secrets in every
// shape: tests/s3/config.cpp, beside the other ways in.)
#include <conveyor/http/endpoint.hpp>

#include <conveyor/core/error.hpp>
#include <conveyor/core/location.hpp>

#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <system_error>

namespace cv = conveyor;
namespace ch = conveyor::http;

namespace {

/// The conveyor::error that parsing `url` throws (its code checked), as its what().
std::string refusal(std::string_view url)
{
    try {
        (void)ch::parse_endpoint(url);
    } catch (const cv::error& e) {
        CHECK(e.code() == std::errc::invalid_argument);
        return e.what();
    }
    FAIL("'" << url << "' was accepted as an endpoint");
    return {};
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

} // namespace

TEST_CASE("parse_endpoint reads the scheme, host, port and base path of a URL")
{
    CHECK(ch::parse_endpoint("http://minio:9000") == ch::endpoint{.tls = false, .host = "minio", .port = 9000, .base_path = ""});
    CHECK(ch::parse_endpoint("https://s3.us-east-1.amazonaws.com") ==
          ch::endpoint{.tls = true, .host = "s3.us-east-1.amazonaws.com", .port = 443, .base_path = ""});
    CHECK(ch::parse_endpoint("http://127.0.0.1") == ch::endpoint{.tls = false, .host = "127.0.0.1", .port = 80, .base_path = ""});
    CHECK(ch::parse_endpoint("https://h:8443/") == ch::endpoint{.tls = true, .host = "h", .port = 8443, .base_path = ""});
    // The base path keeps its inner slashes and loses the trailing ones.
    CHECK(ch::parse_endpoint("http://gw.local/storage/s3//").base_path == "/storage/s3");
}

TEST_CASE("parse_endpoint takes an IPv6 address without its brackets, and host_header puts them back")
{
    const auto e = ch::parse_endpoint("http://[::1]:9000");
    CHECK(e.host == "::1");
    CHECK(e.port == 9000);
    CHECK(e.host_header() == "[::1]:9000");
    CHECK(e.url() == "http://[::1]:9000");
    CHECK(ch::parse_endpoint("https://[2001:db8::7]").host_header() == "[2001:db8::7]");
}

TEST_CASE("host_header leaves out the scheme's default port and url adds the base path")
{
    CHECK(ch::endpoint{.tls = false, .host = "h", .port = 80}.host_header() == "h");
    CHECK(ch::endpoint{.tls = true, .host = "h", .port = 443}.host_header() == "h");
    CHECK(ch::endpoint{.tls = true, .host = "h", .port = 80}.host_header() == "h:80");
    CHECK(ch::endpoint{.tls = false, .host = "h", .port = 443}.host_header() == "h:443");
    CHECK(ch::endpoint{.tls = true, .host = "h", .port = 9000, .base_path = "/b"}.url() == "https://h:9000/b");
    CHECK(ch::parse_endpoint("http://minio:9000/base/").url() == "http://minio:9000/base");
}

TEST_CASE("parse_endpoint refuses what is not an http or https server, naming the URL and the part at fault")
{
    auto w = refusal("ftp://files.example.com");
    CHECK(contains(w, "ftp://files.example.com"));
    CHECK(contains(w, "scheme 'ftp' is not http or https"));
    CHECK(contains(refusal("http://"), "no host"));
    CHECK(contains(refusal("http://h:0"), "port '0' is not a port number (1 to 65535)"));
    // Boost.URL alone would read 99999 as 34463.
    CHECK(contains(refusal("http://h:99999"), "port '99999' is not a port number (1 to 65535)"));
    CHECK(contains(refusal("http://h?list-type=2"), "an endpoint has no query or fragment"));
    CHECK(contains(refusal("http://h#top"), "an endpoint has no query or fragment"));
    CHECK(contains(refusal("not a url"), "not a URL"));
}

TEST_CASE("parse_endpoint refuses credentials in the URL without showing them")
{
    const auto w = refusal("http://AKIAUSER:s3cr3t@minio:9000");
    CHECK(contains(w, "credentials in the URL are not supported"));
    CHECK(contains(w, "***@minio:9000"));
    CHECK_FALSE(contains(w, "AKIAUSER"));
    CHECK_FALSE(contains(w, "s3cr3t"));
    // An '@' past the authority still counts: "user:12/34@host" would send half a secret as the path.
    const auto v = refusal("http://user:12/34@host");
    CHECK_FALSE(contains(v, "12/34"));
}

// parse_endpoint reads a URL through conveyor::location (one parser for the library):
// what location reads, an endpoint reads the same way.
TEST_CASE("parse_endpoint and endpoint_of read a URL as conveyor::location does")
{
    for (const char* url : {"http://[::1]:8080", "HTTPS://Host:8443", "Http://127.0.0.1", "https://[2001:DB8::7]", "http://h:65535"}) {
        CAPTURE(url);
        const cv::location where(url);
        const auto e = ch::parse_endpoint(url);
        CHECK(e.tls == where.tls());
        CHECK(e.host == where.host());
        CHECK(e.port == where.port());
        CHECK(e == ch::endpoint_of(where));
    }
    CHECK(ch::parse_endpoint("HTTP://minio:9000") == ch::endpoint{.tls = false, .host = "minio", .port = 9000, .base_path = ""});
    CHECK(ch::parse_endpoint("https://gw/a%20b/").base_path == "/a%20b"); // escapes kept as written
    // endpoint_of gives the server alone: a resource's path and query are its target.
    CHECK(ch::endpoint_of(cv::location("http://[::1]:8080/data/x.tar?v=1")) ==
          ch::endpoint{.tls = false, .host = "::1", .port = 8080, .base_path = ""});
}

TEST_CASE("parse_endpoint refuses what location refuses, and endpoint_of what is not a web server")
{
    CHECK(contains(refusal("http://h:/x"), "port '' is not a port number"));
    CHECK(contains(refusal("http://h/a b"), "must be percent-encoded"));
    CHECK(contains(refusal("http://minio:90o0"), "authority 'minio:90o0'"));
    CHECK(contains(refusal("HTTP:minio"), "must be followed by '//'"));
    auto refused = [](const cv::location& where) {
        try {
            (void)ch::endpoint_of(where);
        } catch (const cv::error& e) {
            CHECK(e.code() == std::errc::invalid_argument);
            return std::string(e.what());
        }
        FAIL("'" << where.url() << "' was accepted as an endpoint");
        return std::string();
    };
    CHECK(contains(refused(cv::location("s3://bucket/key")), "not an http:// or https:// URL"));
    CHECK(contains(refused(cv::location("/data/a.tar")), "not an http:// or https:// URL"));
    const auto w = refused(cv::location("https://AKIA:s3cr3t@host/x"));
    CHECK(contains(w, "credentials in the URL are not supported"));
    CHECK_FALSE(contains(w, "s3cr3t"));
}
