// tests/s3/support.hpp — what the S3 server tests share: the test servers' coordinates
// (exported by server/with_s3_server.sh), clients, and the proxy's admin API.
#ifndef CONVEYOR_TESTS_S3_SUPPORT_HPP
#define CONVEYOR_TESTS_S3_SUPPORT_HPP

#include "../support/common.hpp"

#include <conveyor/http/client.hpp>
#include <conveyor/s3/client.hpp>
#include <conveyor/s3/source.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json/parse.hpp>

#include <openssl/ssl.h>

#include <cstdlib>
#include <string>

namespace s3test {

namespace cv = conveyor;
namespace s3 = conveyor::s3;
namespace asio = boost::asio;

/// An environment variable set by with_s3_server.sh; fails the test run clearly without it.
inline std::string env(const char* name)
{
    const char* v = std::getenv(name);
    if (!v || !*v) {
        std::fprintf(stderr,
                     "FATAL: %s is not set. The S3 server tests run against s3rver behind a SigV4-checking proxy;\n"
                     "run them through tests/s3/server/with_s3_server.sh (ctest does).\n",
                     name);
        std::exit(2);
    }
    return v;
}

inline cv::runtime& rt()
{
    // OpenSSL first: its exit handler then runs after this runtime's destructor has joined
    // the I/O threads, whose per-thread OpenSSL state is freed as they end. (The other way
    // round, OpenSSL is cleaned up first and that state is left behind, which LeakSanitizer
    // reports.)
    static const bool openssl_ready = OPENSSL_init_ssl(0, nullptr) == 1;
    REQUIRE(openssl_ready);
    static cv::runtime r({.io_threads = 2});
    return r;
}

inline std::string bucket() { return env("CONVEYOR_TEST_S3_BUCKET"); }
inline std::string secret() { return env("CONVEYOR_TEST_S3_SECRET_KEY"); }

inline s3::config_options good_options()
{
    s3::config_options o;
    o.creds = s3::credentials{env("CONVEYOR_TEST_S3_ACCESS_KEY"), env("CONVEYOR_TEST_S3_SECRET_KEY"), "", "test"};
    o.region = env("CONVEYOR_TEST_S3_REGION");
    o.endpoint_url = env("CONVEYOR_TEST_S3_ENDPOINT");
    return o;
}

/// Anonymous, path-style requests to a scripted loopback server at `ep` (not the test
/// s3rver: its own settings are good_options()).
inline s3::config path_style_config(conveyor::http::endpoint ep)
{
    s3::config c;
    c.creds.source = "test";
    c.region = "us-east-1";
    c.endpoint = std::move(ep);
    c.aws_endpoint = false;
    c.style = s3::addressing::path;
    return c;
}

inline s3::client_options fast_retries(unsigned attempts = 10)
{
    s3::client_options o;
    o.retry.max_attempts = attempts;
    o.retry.base_delay = std::chrono::milliseconds(2);
    o.retry.max_delay = std::chrono::milliseconds(20);
    return o;
}

inline s3::client make_client(s3::client_options o = fast_retries()) { return s3::client(rt(), good_options(), std::move(o)); }

inline std::span<const std::byte> bytes_of(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

/// Deterministic content: `n` bytes that depend on `seed`.
inline std::string pattern(std::size_t n, std::uint64_t seed)
{
    std::string s(n, '\0');
    std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (std::size_t i = 0; i < n; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s[i] = static_cast<char>(x);
    }
    return s;
}

/// One request to the proxy's admin API (unsigned); returns (status, body).
inline std::pair<unsigned, std::string> admin(boost::beast::http::verb method, std::string target, std::string body = {})
{
    auto ep = cv::http::parse_endpoint(env("CONVEYOR_TEST_S3_ENDPOINT"));
    static cv::http::client hc(rt(), ep);
    return asio::co_spawn(rt().io_executor(0),
                          [method, target = std::move(target), body = std::move(body)]() -> asio::awaitable<std::pair<unsigned, std::string>> {
                              cv::http::request req;
                              req.method = method;
                              req.target = "/__conveyor" + target;
                              req.body = bytes_of(body);
                              if (!body.empty()) req.headers.set(boost::beast::http::field::content_type, "application/json");
                              auto [ec, resp] = co_await hc.async_send(req);
                              if (ec) throw std::system_error(ec, "admin request " + req.target);
                              co_return std::pair<unsigned, std::string>(resp.status, std::string(resp.body.view()));
                          },
                          asio::use_future)
        .get();
}

/// Arms a fault in the proxy for the next `count` requests whose path contains `key`.
inline void arm_fault(const std::string& key, const std::string& kind, unsigned count, unsigned status = 503,
                      const std::string& code = "SlowDown", const std::string& method = "GET")
{
    std::string json = R"({"key": ")" + key + R"(", "method": ")" + method + R"(", "kind": ")" + kind + R"(", "status": )" +
                       std::to_string(status) + R"(, "code": ")" + code + R"(", "count": )" + std::to_string(count) + "}";
    auto [st, text] = admin(boost::beast::http::verb::post, "/faults", json);
    REQUIRE_MESSAGE(st == 200, "arming a fault failed: " << text);
}

inline void clear_faults() { admin(boost::beast::http::verb::delete_, "/faults"); }

/// How many GETs the proxy has seen for this raw (encoded) path.
inline std::int64_t requests_for(const std::string& raw_path)
{
    auto [st, text] = admin(boost::beast::http::verb::get, "/stats?path=" + s3::encode_query(raw_path));
    REQUIRE_MESSAGE(st == 200, "stats request failed: " << text);
    return boost::json::parse(text).at("count").to_number<std::int64_t>();
}

/// The raw path of an object in the test bucket, as the client sends it (path-style).
inline std::string path_of(const std::string& key) { return "/" + bucket() + "/" + s3::encode_key(key); }

template <class F>
auto error_of(F f) -> std::optional<s3::request_error>
{
    try {
        f();
    } catch (const s3::request_error& e) {
        return e;
    }
    return std::nullopt;
}

} // namespace s3test

#endif
