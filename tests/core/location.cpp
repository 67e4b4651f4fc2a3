// Tests of conveyor/core/location.hpp: one parser for every URL and path conveyor reads:
// kinds, the scheme in any case, file://, S3 buckets and keys, web URLs, and errors that
// name the URL without its user-info.
#include <conveyor/core/error.hpp>
#include <conveyor/core/location.hpp>

#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <system_error>

namespace cv = conveyor;
using cv::location;
using cv::location_kind;

namespace {

/// The message of what `f` throws (a conveyor::error), and its code.
std::string error_text(const std::function<void()>& f, std::error_code* code = nullptr)
{
    try {
        f();
    } catch (const cv::error& e) {
        if (code) *code = e.code();
        return e.what();
    }
    FAIL("no conveyor::error was thrown");
    return {};
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

} // namespace

TEST_CASE("locations are told apart by their scheme")
{
    CHECK(location("/data/a.tar").kind() == location_kind::local);
    CHECK(location("file:///data/a.tar").kind() == location_kind::local);
    CHECK(location("s3://b/k.tar").kind() == location_kind::s3);
    CHECK(location("https://host/k.tar").kind() == location_kind::http);
    CHECK(location("http://host:8080/k.tar?x=1").kind() == location_kind::http);
    CHECK(location("file:///data/a.tar").path() == "/data/a.tar");
    CHECK(location("s3://bucket/a/b.tar").bucket() == "bucket");
    CHECK(location("s3://bucket/a/b.tar").key() == "a/b.tar");
    CHECK(location("s3://bucket").bucket() == "bucket");
    CHECK(location("s3://bucket").key() == "");
    CHECK_THROWS_AS(location("s3:///k"), cv::error);
    CHECK_THROWS_AS(location("/k", location_kind::s3), cv::error);
    // A plain path is local, even when it holds what looks like a URL further on.
    CHECK(location("/data/s3://x").is_local());
    CHECK(location("relative/a.tar").path() == "relative/a.tar");
    CHECK(location("a:b/c.tar").is_local()); // a ':' in a file name is no scheme
    CHECK(location("data:2024/x.tar").path() == "data:2024/x.tar");
    CHECK(cv::to_string(location_kind::http) == std::string("http"));
}

TEST_CASE("the scheme is compared without regard to case, and url() spells it one way")
{
    CHECK(location("S3://b/k").is_s3());
    CHECK(location("S3://b/x").url() == "s3://b/x");
    CHECK(location("s3://b/x").url() == "s3://b/x");
    CHECK(location("FILE:///d/a.tar").is_local());
    CHECK(location("File:///d/a.tar").url() == "/d/a.tar");
    CHECK(location("HTTPS://Host/Path").is_http());
    CHECK(location("HTTPS://Host/Path").url() == "https://Host/Path"); // only the scheme is folded
    CHECK(location("/d/a.tar").url() == "/d/a.tar");
    CHECK(location("S3://b/x").url() == location("s3://b/x").url());
    CHECK(location("file:///d/a.tar").url() == location("/d/a.tar").url());
}

TEST_CASE("s3: URLs split into a bucket and a key, taken as written")
{
    const location u("s3://bucket/a/b.jpg", location_kind::s3);
    CHECK(u.bucket() == "bucket");
    CHECK(u.key() == "a/b.jpg");
    CHECK(location("s3://bucket", location_kind::s3).key() == "");
    CHECK(location("s3://bucket/", location_kind::s3).key() == "");
    CHECK(location("S3://Bucket_1/x", location_kind::s3).bucket() == "Bucket_1");
    CHECK(location("s3://b/my file%20?x#y.jpg", location_kind::s3).key() == "my file%20?x#y.jpg");
    CHECK(location("s3://b/données/été.jpg", location_kind::s3).key() == "données/été.jpg");
    CHECK(location("s3://b//leading", location_kind::s3).key() == "/leading");
}

TEST_CASE("a prefix ends with '/' (or is a bucket)")
{
    CHECK(location("s3://b/train/").is_prefix());
    CHECK(location("s3://b").is_prefix());
    CHECK(!location("s3://b/train").is_prefix());
    CHECK(location("/data/train/").is_prefix());
    CHECK(!location("/data/a.tar").is_prefix());
}

TEST_CASE("s3: URL errors name the URL")
{
    for (const char* url : {"http://bucket/key", "bucket/key", "s3:/bucket/key", "s3://", "s3:///key", "s3://bad bucket/k",
                            "s3://bucket:9000/k", ""}) {
        CAPTURE(url);
        std::error_code code;
        const auto w = error_text([&] { location(url, location_kind::s3); }, &code);
        CHECK(code == std::errc::invalid_argument);
        if (*url) CHECK(contains(w, url));
    }
}

TEST_CASE("a known scheme without '//', another scheme, and a web URL without a host are errors naming the URL")
{
    for (const char* url : {"s3:", "S3:", "s3:bucket/key", "s3:/bucket/key", "http:host/x", "file:relative", "gs://bucket/key",
                            "http://", "https:///path", "file://"}) {
        CAPTURE(url);
        std::error_code code;
        const auto w = error_text([&] { (void)location(url); }, &code);
        CHECK(code == std::errc::invalid_argument);
        CHECK(contains(w, url));
    }
    CHECK(contains(error_text([] { (void)location("s3:bucket/key"); }), "s3://bucket/key"));
    CHECK(contains(error_text([] { (void)location("gs://b/k"); }), "not one conveyor reads"));
    CHECK(contains(error_text([] { (void)location(""); }), "empty"));
    CHECK(contains(error_text([] { (void)location("/data/a.tar", location_kind::http); }), "not an http"));
}

TEST_CASE("errors and printable() never show user-info")
{
    const auto w = error_text([] { (void)location("s3://AKIA:SECRET-url@bucket/key"); });
    CHECK(!contains(w, "SECRET"));
    CHECK(!contains(w, "AKIA"));
    const location web("https://user:SECRET@host/x.tar");
    CHECK(!contains(web.printable(), "SECRET"));
    CHECK(contains(web.printable(), "host/x.tar"));
    const auto g = error_text([] { (void)location("gs://user:SECRET@host/x"); });
    CHECK(!contains(g, "SECRET"));
}

// Web URLs are read by Boost.URL (RFC 3986), the one tokenizer that http::parse_endpoint
// and http::read_chunks also go through; where the hand-written parser that came before
// it and Boost.URL disagreed, the rule chosen is the one below (and in location.hpp).

TEST_CASE("a web location gives its host, port and request target")
{
    const location v6("http://[::1]:8080/x");
    CHECK(v6.host() == "::1"); // an IPv6 address without its brackets
    CHECK(v6.port() == 8080);
    CHECK(v6.target() == "/x");
    CHECK(!v6.tls());
    CHECK(v6.url() == "http://[::1]:8080/x");
    CHECK(location("https://[2001:DB8::7]/a").host() == "2001:db8::7");

    const location upper("HTTPS://Host/Path?q=1#part");
    CHECK(upper.tls());
    CHECK(upper.host() == "Host");
    CHECK(upper.port() == 443); // the scheme's default
    CHECK(upper.target() == "/Path?q=1"); // no fragment: it is never sent
    CHECK(upper.url() == "https://Host/Path?q=1#part");

    CHECK(location("http://h").target() == "/");
    CHECK(location("http://h").port() == 80);
    CHECK(location("http://h:65535/x").port() == 65535);
    // Percent-escapes are kept as written in the target (the server decodes them).
    CHECK(location("http://h/a%20b/%C3%A9t%C3%A9.tar").target() == "/a%20b/%C3%A9t%C3%A9.tar");

    // Other kinds have no host, port or target.
    for (const char* url : {"s3://b/k", "/d/a.tar", "file:///d/a.tar"}) {
        CAPTURE(url);
        CHECK(location(url).host().empty());
        CHECK(location(url).port() == 0);
        CHECK(location(url).target().empty());
        CHECK(!location(url).tls());
    }
}

TEST_CASE("a web URL a server could not read is an error: a bad port, unescaped text, a broken IPv6 host")
{
    for (const char* url : {"http://h:0/x", "http://h:99999/x", "http://h:/x", "http://h:8o/x", "http://h/a b", "http://h/a%zz",
                            "http://h/shard-{0..9}.tar", "http://h/été", "http://[::1/x", "http://[::g]/x"}) {
        CAPTURE(std::string(url));
        std::error_code code;
        const auto w = error_text([&] { (void)location(url); }, &code);
        CHECK(code == std::errc::invalid_argument);
        CHECK(contains(w, "stage 'url'"));
        CHECK(contains(w, url));
    }
    CHECK(contains(error_text([] { (void)location("http://h:99999/x"); }), "port '99999' is not a port number (1 to 65535)"));
    CHECK(contains(error_text([] { (void)location("http://h/a b"); }), "must be percent-encoded"));
    // Boost.URL alone would read port 8 and the path "o/x".
    CHECK(contains(error_text([] { (void)location("http://h:8o/x"); }), "authority 'h:8o' is not [user-info@]host[:port]"));
    // The same texts are S3 keys and local paths as written: those are not URIs.
    CHECK(location("s3://b/a b/{0..9}%zz/été").key() == "a b/{0..9}%zz/été");
    CHECK(location("/d/a b%zz{1}.tar").path() == "/d/a b%zz{1}.tar");
    CHECK(location("file:///d/a%20b").path() == "/d/a%20b"); // not decoded
}

TEST_CASE("a web URL's user-info is accepted, and no part of a URL holding one is quoted in an error")
{
    const location u("https://user:SECRET@host:8443/x");
    CHECK(u.host() == "host");
    CHECK(u.port() == 8443);
    CHECK(!contains(u.printable(), "SECRET"));
    // "AKIA:99999/x@h" reads as host "AKIA" and port "99999": the port is a piece of a secret.
    const auto w = error_text([] { (void)location("http://AKIA:99999/x@h"); });
    CHECK(contains(w, "the port is not a port number"));
    CHECK(!contains(w, "99999"));
    CHECK(!contains(w, "AKIA"));
}
