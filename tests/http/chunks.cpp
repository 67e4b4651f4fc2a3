// Tests of conveyor/http/chunks.hpp: a resource behind a URL read as a stream of chunks,
// against the scripted loopback server: bytes in place, a reset mid-body resumed with Range
// and If-Match, retried statuses, error statuses, and a server that ignores Range.
#include <conveyor/http/chunks.hpp>

#include <conveyor/core/chunks.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/location.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/http/error.hpp>

#include "../support/common.hpp"
#include "../support/http_server.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
namespace cv = conveyor;
namespace ch = conveyor::http;
using conveyor_test::peer;
using conveyor_test::test_server;
using namespace std::chrono_literals;

namespace {

using http_request = bhttp::request<bhttp::string_body>;

std::string served_bytes(std::size_t n, unsigned seed)
{
    std::string s(n, '\0');
    for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>(conveyor_test::mix(i * 131 + seed));
    return s;
}

/** A web server with one file at /data/shard.tar (Range, If-Match, an ETag unless
    `etag` is empty); request `reset_on` is cut after `reset_after` body bytes; the first
    `fail_first` requests are answered `fail_status`; with `ignore_range` every answer is
    the whole file (200). */
struct web_server {
    std::string data;
    std::string etag = "\"abc\"";
    int reset_on = -1;
    std::size_t reset_after = 0;
    int fail_first = 0;
    unsigned fail_status = 503;
    bool ignore_range = false;
    std::string etag_after_reset; // the resource "changes" when the cut is made
    std::mutex mu;
    std::vector<std::pair<std::string, std::string>> seen; // (Range, If-Match)

    asio::awaitable<bool> serve(peer& p, const http_request& req)
    {
        int nth;
        std::string tag;
        {
            std::lock_guard lk(mu);
            nth = static_cast<int>(seen.size());
            seen.emplace_back(std::string(req[bhttp::field::range]), std::string(req[bhttp::field::if_match]));
            tag = etag;
        }
        if (req.target() != "/data/shard.tar?v=1") co_return co_await p.write(conveyor_test::reply(404, "not here"));
        if (nth < fail_first) co_return co_await p.write(conveyor_test::reply(fail_status, "busy"));
        const std::string_view if_match = req[bhttp::field::if_match];
        if (!if_match.empty() && if_match != tag) co_return co_await p.write(conveyor_test::reply(412, "changed"));
        std::size_t first = 0;
        const std::string_view range = req[bhttp::field::range];
        const bool ranged = !ignore_range && range.starts_with("bytes=");
        if (ranged) first = std::stoull(std::string(range.substr(6, range.find('-') - 6)));
        const std::string_view body = std::string_view(data).substr(first);
        std::string head = ranged ? "HTTP/1.1 206 Partial Content\r\n" : "HTTP/1.1 200 OK\r\n";
        head += "Content-Length: " + std::to_string(body.size()) + "\r\n";
        if (!tag.empty()) head += "ETag: " + tag + "\r\n";
        if (ranged) head += "Content-Range: bytes " + std::to_string(first) + "-" + std::to_string(data.size() - 1) + "/" + std::to_string(data.size()) + "\r\n";
        head += "\r\n";
        if (nth == reset_on) {
            if (!co_await p.write(head + std::string(body.substr(0, reset_after)))) co_return false;
            if (!etag_after_reset.empty()) {
                std::lock_guard lk(mu);
                etag = etag_after_reset;
            }
            co_await p.pause(100ms);
            p.reset();
            co_return false;
        }
        co_return co_await p.write(head + std::string(body));
    }
};

conveyor_test::script script_for(web_server& w)
{
    return [&w](peer& p, const http_request& req, std::size_t) -> asio::awaitable<bool> { return w.serve(p, req); };
}

/// Every byte of `r` (chunks checked contiguous from 0), or the conveyor::error it threw
/// (as a value: see tests/file/chunks.cpp).
asio::awaitable<std::pair<std::string, std::optional<cv::error>>> read_all(cv::chunk_reader& r)
{
    std::pair<std::string, std::optional<cv::error>> out;
    try {
        while (auto c = co_await r.async_next()) {
            if (c->offset != out.first.size()) throw std::runtime_error("a chunk out of place");
            out.first += c->bytes.view();
        }
    } catch (const cv::error& e) {
        out.second.emplace(e);
    }
    co_return out;
}

std::pair<std::string, std::optional<cv::error>> read_on(cv::runtime& rt, cv::chunk_reader& r)
{
    auto f = asio::co_spawn(rt.io_executor(0), read_all(r), asio::use_future);
    REQUIRE_MESSAGE(f.wait_for(60s) == std::future_status::ready, "the read did not finish (hang)");
    return f.get();
}

std::string url_of(const test_server& srv, std::string_view path) { return "http://127.0.0.1:" + std::to_string(srv.port()) + std::string(path); }

} // namespace

TEST_CASE("http read_chunks streams a URL's resource in chunks with one GET, every byte in place")
{
    web_server w{.data = served_bytes(3'000'001, 1)};
    test_server srv(script_for(w));
    cv::runtime rt({.io_threads = 1});
    const std::string url = url_of(srv, "/data/shard.tar?v=1");
    auto r = ch::read_chunks(rt, url, {.chunk_size = 1u << 20, .chunks_in_flight = 2});
    CHECK(r->url() == url);
    auto [bytes, err] = read_on(rt, *r);
    REQUIRE_FALSE(err);
    CHECK(bytes == w.data);
    CHECK(r->size() == 3'000'001);
    REQUIRE(w.seen.size() == 1);
    CHECK(w.seen[0].first.empty());
}

TEST_CASE("http read_chunks resumes after a reset mid-body with Range and If-Match; retries busy statuses")
{
    web_server w{.data = served_bytes(2'500'000, 2)};
    w.reset_on = 0;
    w.reset_after = 700'000;
    test_server srv(script_for(w));
    cv::runtime rt({.io_threads = 1});
    auto r = ch::read_chunks(rt, url_of(srv, "/data/shard.tar?v=1"), {.chunk_size = 256 * 1024});
    auto [bytes, err] = read_on(rt, *r);
    REQUIRE_FALSE(err);
    CHECK(bytes == w.data);
    REQUIRE(w.seen.size() == 2);
    CHECK(w.seen[1].first == "bytes=700000-2499999");
    CHECK(w.seen[1].second == "\"abc\"");

    web_server busy{.data = served_bytes(100'000, 3)};
    busy.fail_first = 2;
    test_server srv2(script_for(busy));
    auto r2 = ch::read_chunks(rt, url_of(srv2, "/data/shard.tar?v=1"));
    auto [bytes2, err2] = read_on(rt, *r2);
    REQUIRE_FALSE(err2);
    CHECK(bytes2 == busy.data);
    CHECK(busy.seen.size() == 3);
}

TEST_CASE("http read_chunks errors name the URL: a missing resource, a changed one, a server that ignores Range")
{
    cv::runtime rt({.io_threads = 1});
    {
        web_server w{.data = served_bytes(1000, 4)};
        test_server srv(script_for(w));
        const std::string url = url_of(srv, "/data/missing.tar");
        auto r = ch::read_chunks(rt, url);
        auto [bytes, err] = read_on(rt, *r);
        REQUIRE(err);
        CHECK(err->code() == ch::errc::error_status);
        CHECK(err->where() == url);
        CHECK(std::string(err->what()).find("404") != std::string::npos);
        CHECK(w.seen.size() == 1); // not retried
    }
    {
        web_server w{.data = served_bytes(2'000'000, 5)};
        w.reset_on = 0;
        w.reset_after = 500'000;
        w.etag = "\"v1\"";
        w.etag_after_reset = "\"v2\"";
        test_server srv(script_for(w));
        auto r = ch::read_chunks(rt, url_of(srv, "/data/shard.tar?v=1"), {.chunk_size = 100'000, .chunks_in_flight = 10});
        auto [bytes, err] = read_on(rt, *r);
        REQUIRE(err);
        CHECK(err->code() == ch::errc::resource_changed);
        CHECK(err->offset() == 500'000);
        CHECK(bytes == w.data.substr(0, bytes.size()));
    }
    {
        web_server w{.data = served_bytes(1'000'000, 6)};
        w.reset_on = 0;
        w.reset_after = 300'000;
        w.ignore_range = true;
        test_server srv(script_for(w));
        auto r = ch::read_chunks(rt, url_of(srv, "/data/shard.tar?v=1"), {.chunk_size = 100'000});
        auto [bytes, err] = read_on(rt, *r);
        REQUIRE(err);
        CHECK(err->code() == ch::errc::bad_range);
        CHECK(std::string(err->what()).find("ignored Range") != std::string::npos);
    }
    CHECK_THROWS_AS((void)ch::read_chunks(rt, "ftp://example.com/x"), cv::error);
}

TEST_CASE("http read_chunks takes a location: its endpoint and target, with no second parse")
{
    web_server w{.data = served_bytes(200'000, 7)};
    test_server srv(script_for(w));
    cv::runtime rt({.io_threads = 1});
    const cv::location where(url_of(srv, "/data/shard.tar?v=1#member"));
    auto r = ch::read_chunks(rt, where, {.chunk_size = 64 * 1024});
    CHECK(r->url() == url_of(srv, "/data/shard.tar?v=1")); // the fragment is not sent
    auto [bytes, err] = read_on(rt, *r);
    REQUIRE_FALSE(err);
    CHECK(bytes == w.data);

    auto refusal = [&](auto&& where_or_url) {
        try {
            (void)ch::read_chunks(rt, where_or_url);
        } catch (const cv::error& e) {
            CHECK(e.code() == std::errc::invalid_argument);
            return std::string(e.what());
        }
        FAIL("a read was started");
        return std::string();
    };
    CHECK(refusal(cv::location("s3://bucket/key")).find("not an http:// or https:// URL") != std::string::npos);
    const auto secret = refusal(std::string("http://user:s3cr3t@127.0.0.1/x"));
    CHECK(secret.find("credentials in the URL are not supported") != std::string::npos);
    CHECK(secret.find("s3cr3t") == std::string::npos);
}
