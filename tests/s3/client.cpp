// Tests of conveyor/s3/client.hpp against a real S3-compatible server (s3rver) behind a
// proxy that checks every request's SigV4 signature with botocore: objects, ranges,
// listings, multipart uploads, awkward keys, errors, retries. Then the client against
// servers scripted here (tests/support/http_server.hpp), for what needs a server that
// misbehaves on purpose and no real S3: listings that go round in circles, deadlines and
// timeouts, aborted uploads.
#include "support.hpp"

#include "../support/http_server.hpp"

#include <conveyor/core/location.hpp>
#include <conveyor/s3/chunks.hpp>
#include <conveyor/s3/multipart.hpp>
#include <conveyor/s3/sigv4.hpp>

#include <atomic>
#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

using namespace s3test;
using boost::beast::http::verb;

TEST_CASE("s3 client puts an object, heads it and gets it back")
{
    auto c = make_client();
    const std::string body = pattern(110'000, 1);
    auto put = c.run(c.async_put(bucket(), "client/roundtrip.bin", bytes_of(body), "application/octet-stream"));
    CHECK(put.bytes == body.size());
    CHECK(put.parts == 0);
    CHECK_FALSE(put.etag.empty());

    auto info = c.run(c.async_head(bucket(), "client/roundtrip.bin"));
    CHECK(info.size == 110'000);
    CHECK(info.etag == put.etag);

    auto got = c.run(c.async_get(bucket(), "client/roundtrip.bin"));
    CHECK(got.view() == body);
    // Unknown size: a ranged first request is the whole object when it is smaller than a part.
    CHECK(c.run(c.async_get(bucket(), "client/roundtrip.bin", 110'000)).view() == body);
    CHECK(c.stats().retries == 0);
}

TEST_CASE("s3 client reads byte ranges")
{
    auto c = make_client();
    const std::string body = pattern(100'000, 2);
    c.run(c.async_put(bucket(), "client/range.bin", bytes_of(body)));
    CHECK(c.run(c.async_get_range(bucket(), "client/range.bin", 0, 10)).view() == body.substr(0, 10));
    CHECK(c.run(c.async_get_range(bucket(), "client/range.bin", 12'345, 54'321)).view() == body.substr(12'345, 54'321));
    CHECK(c.run(c.async_get_range(bucket(), "client/range.bin", 99'990, 100)).view() == body.substr(99'990));
}

TEST_CASE("s3 client round-trips keys with spaces, unicode, plus, equals, percent and tilde")
{
    auto c = make_client();
    const std::vector<std::string> keys = {"odd keys/with space.jpg", "odd keys/données/été.jpg", "odd keys/a+b=c.jpg",
                                           "odd keys/100% done~1.jpg", "odd keys/semi;colon,comma&amp.jpg"};
    for (std::size_t i = 0; i < keys.size(); ++i) {
        CAPTURE(keys[i]);
        const auto body = pattern(1000 + i, 10 + i);
        c.run(c.async_put(bucket(), keys[i], bytes_of(body)));
        CHECK(c.run(c.async_get(bucket(), keys[i])).view() == body);
        CHECK(c.run(c.async_head(bucket(), keys[i])).size == static_cast<std::int64_t>(body.size()));
    }
    auto listed = c.run(c.async_list_all(bucket(), "odd keys/"));
    std::set<std::string> got;
    for (auto& o : listed) got.insert(o.key);
    CHECK(got == std::set<std::string>(keys.begin(), keys.end()));
}

TEST_CASE("s3 client lists more than 1,000 keys across pages, with prefix and delimiter")
{
    auto c = make_client();
    // Uploaded through the upload sink, 32 at a time.
    auto blobs = cv::generate(1100, [](std::uint64_t i) {
        char name[64];
        std::snprintf(name, sizeof name, "dir%d/obj-%05d", static_cast<int>(i % 3), static_cast<int>(i));
        return cv::blob{name, cv::buffer::copy_of(std::to_string(i)), "", -1, i};
    });
    auto [n, bytes] = s3::upload_all(std::move(blobs).on(rt()), c, bucket(), {.prefix = "many/", .concurrency = 32});
    CHECK(n == 1100);
    CHECK(bytes > 0);

    auto all = c.run(c.async_list_all(bucket(), "many/"));
    REQUIRE(all.size() == 1100);
    CHECK(std::is_sorted(all.begin(), all.end(), [](auto& a, auto& b) { return a.key < b.key; }));
    std::set<std::string> unique;
    for (auto& o : all) unique.insert(o.key);
    CHECK(unique.size() == 1100);

    auto page = c.run(c.async_list(bucket(), {.prefix = "many/", .delimiter = "/"}));
    CHECK(page.objects.empty());
    CHECK(page.common_prefixes == std::vector<std::string>{"many/dir0/", "many/dir1/", "many/dir2/"});

    auto small = c.run(c.async_list(bucket(), {.prefix = "many/dir1/", .max_keys = 100}));
    CHECK(small.objects.size() == 100);
    CHECK(small.truncated);

    // The parallel lister (top level with '/', then each prefix on its own) finds the same.
    auto listed = s3::list_url(c, "s3://" + bucket() + "/many/");
    REQUIRE(listed.size() == 1100);
    CHECK(listed.objects.front().key == all.front().key);
    CHECK(listed.objects.back().key == all.back().key);
}

TEST_CASE("s3 client uploads in parts and downloads in ranged parts, reassembled in place")
{
    auto o = fast_retries();
    o.multipart_threshold = 5u << 20;
    o.upload_part_size = 5u << 20;
    o.part_size = 4u << 20;
    o.parts_in_flight = 3;
    auto c = make_client(o);
    const std::string body = pattern((12u << 20) + 12345, 3);
    auto put = c.run(c.async_put(bucket(), "client/multipart.bin", bytes_of(body)));
    CHECK(put.parts == 3);
    CHECK(put.bytes == body.size());
    CHECK(c.run(c.async_head(bucket(), "client/multipart.bin")).size == static_cast<std::int64_t>(body.size()));

    const auto before = requests_for(path_of("client/multipart.bin"));
    auto got = c.run(c.async_get(bucket(), "client/multipart.bin"));
    REQUIRE(got.size() == body.size());
    CHECK(got.view() == body);
    // 12 MiB + 12345 bytes in 4 MiB parts: 4 ranged GETs.
    CHECK(requests_for(path_of("client/multipart.bin")) - before == 4);

    // A known size skips nothing: still 4 parts, same bytes.
    CHECK(c.run(c.async_get(bucket(), "client/multipart.bin", static_cast<std::int64_t>(body.size()))).view() == body);
}

TEST_CASE("s3 client takes an s3:// location for get, range, head, put and list, as its bucket and key")
{
    auto c = make_client();
    const std::string body = pattern(50'000, 3);
    const cv::location where("S3://" + bucket() + "/client/by location/été.bin", cv::location_kind::s3);
    const auto put = c.run(c.async_put(where, bytes_of(body), "application/octet-stream"));
    CHECK(put.key == "client/by location/été.bin");
    CHECK(c.run(c.async_get(where)).view() == body);
    CHECK(c.run(c.async_get(bucket(), "client/by location/été.bin")).view() == body); // the same object
    CHECK(c.run(c.async_get(where, 50'000)).view() == body);
    CHECK(c.run(c.async_get_range(where, 1000, 10)).view() == body.substr(1000, 10));
    CHECK(c.run(c.async_head(where)).etag == put.etag);
    const auto listed = c.run(c.async_list_all(cv::location("s3://" + bucket() + "/client/by location/")));
    REQUIRE(listed.size() == 1);
    CHECK(listed[0].key == "client/by location/été.bin");
}

TEST_CASE("s3 client refuses a location that is not an S3 one where the call is awaited, naming it, sending nothing")
{
    auto c = make_client();
    const auto before = c.stats().requests;
    auto refusal = [&](auto&& op) {
        try {
            c.run(std::move(op));
        } catch (const cv::error& e) {
            CHECK(e.code() == std::errc::invalid_argument);
            return std::string(e.what());
        }
        FAIL("the operation was not refused");
        return std::string();
    };
    for (const char* url : {"/data/a.jpg", "https://host/a.jpg"}) {
        CAPTURE(url);
        const cv::location where(url);
        auto get = c.async_get(where); // nothing thrown yet: the error is the operation's
        for (const std::string& w : {refusal(std::move(get)), refusal(c.async_head(where)), refusal(c.async_get_range(where, 0, 1)),
                                     refusal(c.async_list_all(where)), refusal(c.async_put(where, {}))}) {
            CHECK(w.find(url) != std::string::npos);
            CHECK(w.find("not an s3:// one") != std::string::npos);
        }
    }
    CHECK_THROWS_AS((void)s3::read_chunks(c, cv::location("/data/a.jpg")), cv::error);
    CHECK_THROWS_AS(s3::multipart_upload(c, cv::location("http://h/a.jpg")), cv::error);
    CHECK(c.stats().requests == before);
}

TEST_CASE("s3 client reads an empty object")
{
    auto c = make_client();
    c.run(c.async_put(bucket(), "client/empty", {}));
    CHECK(c.run(c.async_get(bucket(), "client/empty")).size() == 0);
    CHECK(c.run(c.async_head(bucket(), "client/empty")).size == 0);
}

TEST_CASE("a missing key is a clear 404 error, not retried")
{
    auto c = make_client();
    const auto before = requests_for(path_of("client/no such key.jpg"));
    auto e = error_of([&] { c.run(c.async_get(bucket(), "client/no such key.jpg")); });
    REQUIRE(e);
    CHECK(e->code() == s3::errc::no_such_key);
    CHECK(e->reply().status == 404);
    CHECK(e->reply().code == "NoSuchKey");
    CHECK(e->attempts() == 1);
    const std::string what = e->what();
    CHECK(what.find("s3://" + bucket() + "/client/no such key.jpg") != std::string::npos);
    CHECK(what.find("404") != std::string::npos);
    CHECK(what.find("NoSuchKey") != std::string::npos);
    CHECK(requests_for(path_of("client/no such key.jpg")) - before == 1);

    auto h = error_of([&] { c.run(c.async_head(bucket(), "client/no such key.jpg")); });
    REQUIRE(h);
    CHECK(h->code() == s3::errc::no_such_key);
}

TEST_CASE("wrong credentials are a clear 403 error that never shows the secret")
{
    auto o = good_options();
    o.creds->secret_access_key = "not-the-secret-" + secret();
    s3::client c(rt(), o, fast_retries());
    auto e = error_of([&] { c.run(c.async_get(bucket(), "client/roundtrip.bin")); });
    REQUIRE(e);
    CHECK(e->code() == s3::errc::access_denied);
    CHECK(e->reply().status == 403);
    CHECK(e->reply().code == "SignatureDoesNotMatch");
    CHECK_FALSE(e->reply().request_id.empty());
    CHECK(e->attempts() == 1);
    const std::string what = e->what();
    CHECK(what.find("403") != std::string::npos);
    CHECK(what.find(bucket()) != std::string::npos);
    CHECK(what.find(secret()) == std::string::npos);
    CHECK(what.find(o.creds->secret_access_key) == std::string::npos);

    auto o2 = good_options();
    o2.creds->access_key_id = "AKIDUNKNOWN000000000";
    s3::client c2(rt(), o2, fast_retries());
    auto e2 = error_of([&] { c2.run(c2.async_head(bucket(), "client/roundtrip.bin")); });
    REQUIRE(e2);
    CHECK(e2->code() == s3::errc::access_denied);
}

TEST_CASE("an endpoint that refuses connections fails after the configured attempts, naming it")
{
    // A port that was free a moment ago: nothing listens there.
    auto o = good_options();
    o.endpoint_url = "http://127.0.0.1:1";
    s3::client c(rt(), o, fast_retries(3));
    auto e = error_of([&] { c.run(c.async_get(bucket(), "client/roundtrip.bin")); });
    REQUIRE(e);
    CHECK(e->code() == std::errc::connection_refused);
    CHECK(e->attempts() == 3);
    CHECK(e->reply().status == 0);
    CHECK(std::string(e->what()).find("127.0.0.1:1") != std::string::npos);
    CHECK(c.stats().retries == 2);
}

TEST_CASE("transient failures are retried: 503 SlowDown, 500, connection reset, truncated body")
{
    auto c = make_client();
    const std::string body = pattern(200'000, 4);
    c.run(c.async_put(bucket(), "retry/object.bin", bytes_of(body)));
    clear_faults();

    struct fault {
        const char* kind;
        unsigned status;
        const char* code;
    };
    for (auto f : {fault{"status", 503, "SlowDown"}, fault{"status", 500, "InternalError"}, fault{"reset", 0, ""},
                   fault{"truncate", 0, ""}}) {
        const std::string kind = f.kind;
        CAPTURE(kind);
        CAPTURE(f.status);
        const auto retries_before = c.stats().retries;
        const auto requests_before = requests_for(path_of("retry/object.bin"));
        arm_fault("retry/object.bin", f.kind, 2, f.status, f.code);
        auto got = c.run(c.async_get(bucket(), "retry/object.bin"));
        CHECK(got.view() == body);
        CHECK(requests_for(path_of("retry/object.bin")) - requests_before == 3);
        // A reset before any reply byte on a kept-alive connection looks like a stale
        // connection: the HTTP client retries that once itself, uncounted here.
        if (kind == "reset") CHECK(c.stats().retries - retries_before >= 1);
        else CHECK(c.stats().retries - retries_before == 2);
    }
    clear_faults();
}

TEST_CASE("a failure that outlasts every attempt names the status, code and attempts")
{
    auto c = make_client(fast_retries(3));
    c.run(c.async_put(bucket(), "retry/always.bin", bytes_of(std::string("x"))));
    arm_fault("retry/always.bin", "status", 10, 503, "SlowDown");
    auto e = error_of([&] { c.run(c.async_get(bucket(), "retry/always.bin")); });
    clear_faults();
    REQUIRE(e);
    CHECK(e->code() == s3::errc::throttled);
    CHECK(e->attempts() == 3);
    CHECK(e->reply().code == "SlowDown");
    CHECK(std::string(e->what()).find("after 3 attempts") != std::string::npos);
}

TEST_CASE("a failed multipart upload is aborted and says so")
{
    auto o = fast_retries(2);
    o.multipart_threshold = 5u << 20;
    o.upload_part_size = 5u << 20;
    auto c = make_client(o);
    const std::string body = pattern(11u << 20, 5);
    arm_fault("multipart-fail.bin", "status", 100, 400, "InvalidPart", "PUT");
    auto e = error_of([&] { c.run(c.async_put(bucket(), "client/multipart-fail.bin", bytes_of(body))); });
    clear_faults();
    REQUIRE(e);
    CHECK(e->code() == s3::errc::upload_aborted);
    CHECK(e->reply().code == "InvalidPart"); // the cause's reply
    CHECK(std::string(e->what()).find("aborted") != std::string::npos);
    // The abort runs in the background: wait for the DELETE to reach the server.
    CHECK(conveyor_test::eventually([&] {
        auto [st, text] = admin(verb::get, "/stats");
        auto v = boost::json::parse(text);
        auto& by = v.at("requests_by_method").as_object();
        return by.contains("DELETE") && by.at("DELETE").to_number<std::int64_t>() >= 1;
    }, std::chrono::seconds(10)));
}

TEST_CASE("anonymous access reads a public bucket")
{
    auto admin_client = make_client();
    const std::string pub = env("CONVEYOR_TEST_S3_PUBLIC_BUCKET");
    const std::string body = pattern(5000, 6);
    admin_client.run(admin_client.async_put(pub, "open/data.bin", bytes_of(body)));

    auto o = good_options();
    o.creds.reset();
    o.anonymous = true;
    s3::client anon(rt(), o, fast_retries());
    CHECK(anon.cfg().creds.anonymous());
    CHECK(anon.run(anon.async_get(pub, "open/data.bin")).view() == body);
    // The private bucket refuses unsigned requests.
    auto e = error_of([&] { anon.run(anon.async_get(bucket(), "client/roundtrip.bin")); });
    REQUIRE(e);
    CHECK(e->code() == s3::errc::access_denied);
}

TEST_CASE("a presigned URL fetches the object without other credentials")
{
    auto c = make_client();
    const std::string body = pattern(3000, 7);
    c.run(c.async_put(bucket(), "client/presigned file+1.bin", bytes_of(body)));
    auto t = s3::target_for(c.cfg(), bucket(), "client/presigned file+1.bin");
    s3::signer sg(c.cfg().creds, c.cfg().region);
    const std::string target = sg.presign(verb::get, t.path, t.host, std::chrono::seconds(300));
    cv::http::client hc(rt(), t.endpoint);
    auto [ec, resp] = asio::co_spawn(rt().io_executor(1),
                                     [&]() -> asio::awaitable<std::pair<std::error_code, cv::http::response>> {
                                         cv::http::request req;
                                         req.target = target;
                                         req.headers.set(boost::beast::http::field::host, t.host);
                                         co_return co_await hc.async_send(req);
                                     },
                                     asio::use_future)
                          .get();
    REQUIRE_FALSE(ec);
    CHECK(resp.status == 200);
    CHECK(resp.body.view() == body);
}

TEST_CASE("a blocking S3 call on one of the runtime's I/O threads is refused, not a hang")
{
    auto c = make_client();
    auto code = asio::co_spawn(rt().io_executor(0),
                               [c]() -> asio::awaitable<std::error_code> {
                                   try {
                                       (void)c.run(c.async_head(bucket(), "client/roundtrip.bin"));
                                   } catch (const cv::error& e) {
                                       co_return e.code();
                                   }
                                   co_return std::error_code{};
                               },
                               asio::use_future)
                    .get();
    CHECK(code == std::errc::operation_not_permitted);
}

// =======================================================================================
// The client against scripted servers

namespace {

namespace bhttp = boost::beast::http;
namespace ch = conveyor::http;
using conveyor_test::never_answers;
using conveyor_test::peer;
using conveyor_test::reply;
using conveyor_test::test_server;
using namespace std::chrono_literals;
using http_request = bhttp::request<bhttp::string_body>;

cv::runtime_options two_lanes()
{
    cv::runtime_options o;
    o.io_threads = 2;
    o.compute_threads = 1;
    return o;
}

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

/// The value of query parameter `name` in a request target, as sent (still encoded).
std::string query_param(std::string_view target, std::string_view name)
{
    const auto q = target.find('?');
    if (q == std::string_view::npos) return {};
    std::string_view query = target.substr(q + 1);
    while (!query.empty()) {
        const auto amp = query.find('&');
        const auto pair = query.substr(0, amp);
        const auto eq = pair.find('=');
        if (pair.substr(0, eq) == name) return eq == std::string_view::npos ? std::string() : std::string(pair.substr(eq + 1));
        if (amp == std::string_view::npos) break;
        query.remove_prefix(amp + 1);
    }
    return {};
}

/// A ListObjectsV2 page of `keys` and `prefixes`; truncated, with `next_token`, unless that is empty.
std::string list_page_reply(const std::vector<std::string>& keys, const std::vector<std::string>& prefixes, std::string_view next_token)
{
    std::string s = R"(<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">)";
    s += "<Name>pictures</Name><KeyCount>" + std::to_string(keys.size() + prefixes.size()) + "</KeyCount>";
    if (next_token.empty()) s += "<IsTruncated>false</IsTruncated>";
    else s += "<IsTruncated>true</IsTruncated><NextContinuationToken>" + std::string(next_token) + "</NextContinuationToken>";
    for (const auto& k : keys) s += "<Contents><Key>" + k + "</Key><Size>1</Size></Contents>";
    for (const auto& p : prefixes) s += "<CommonPrefixes><Prefix>" + p + "</Prefix></CommonPrefixes>";
    s += "</ListBucketResult>";
    return reply(200, s, "Content-Type: application/xml\r\n");
}

} // namespace

TEST_CASE("s3 list_all stops at a continuation token the server sends again, naming bucket, prefix and token")
{
    // Every page says "truncated, go on from same-token". (After 50 pages the server
    // relents, so that a client that does not check ends too.)
    std::atomic<int> pages{0};
    test_server srv([&](peer& p, const http_request&, std::size_t) -> asio::awaitable<bool> {
        const int n = ++pages;
        const std::string page = list_page_reply({"photos/" + std::to_string(n) + ".jpg"}, {}, std::string(n < 50 ? "same-token" : ""));
        co_return co_await p.write(page);
    });
    cv::runtime rt(two_lanes());
    s3::client c(rt, path_style_config(srv.endpoint()), fast_retries());
    auto e = error_of([&] { c.run(c.async_list_all("pictures", "photos/")); });
    REQUIRE(e);
    CHECK(e->code() == s3::errc::bad_reply);
    const std::string what = e->what();
    MESSAGE("repeated token: ", what);
    CHECK(contains(what, "s3://pictures/"));
    CHECK(contains(what, "'photos/'"));
    CHECK(contains(what, "'same-token'"));
    CHECK(pages.load() == 2); // the first repeat ends it
}

TEST_CASE("a listing page of millions of keys is refused at 16 MiB, naming the request; so is an error reply without end")
{
    // A page of S3's is at most 1,000 keys: this one streams <Contents> without end.
    std::string keys;
    for (int i = 0; i < 1000; ++i) keys += "<Contents><Key>photos/" + std::to_string(i) + ".jpg</Key><Size>1</Size></Contents>";
    char size_line[32];
    std::snprintf(size_line, sizeof size_line, "%zx\r\n", keys.size());
    const std::string chunk = size_line + keys + "\r\n";
    test_server srv([&](peer& p, const http_request& req, std::size_t) -> asio::awaitable<bool> {
        const bool error_reply = query_param(req.target(), "prefix") == "error%2F";
        const std::string head = error_reply ? "HTTP/1.1 500 Internal Error\r\nTransfer-Encoding: chunked\r\n\r\n"
                                             : "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nTransfer-Encoding: chunked\r\n\r\n"
                                               "12\r\n<ListBucketResult>\r\n";
        bool open = co_await p.write(head); // (no co_await in a condition: GCC 12 miscompiles it)
        while (open) open = co_await p.write(chunk);
        co_return false;
    });
    cv::runtime rt(two_lanes());
    s3::client c(rt, path_style_config(srv.endpoint()), fast_retries());
    for (const std::string prefix : {"photos/", "error/"}) {
        CAPTURE(prefix);
        std::optional<s3::request_error> e;
        const auto grew = conveyor_test::resident_growth([&] { e = error_of([&] { c.run(c.async_list_all("pictures", prefix)); }); });
        REQUIRE(e);
        CHECK(e->code() == ch::errc::body_too_large);
        const std::string what = e->what();
        MESSAGE(what);
        CHECK(contains(what, "ListObjectsV2"));
        CHECK(contains(what, prefix == "photos/" ? "held up to 16777216 bytes" : "an error reply up to 1048576 bytes"));
        // The body's buffer doubles up to past the limit (32 MiB) and is copied once.
        conveyor_test::check_resident_growth(grew, 64u << 20, "listing reply without end, prefix " + prefix);
    }
}

TEST_CASE("s3 listings that go round in circles are errors; empty pages with new tokens are followed")
{
    std::atomic<int> cycle_pages{0};
    test_server srv([&](peer& p, const http_request& req, std::size_t) -> asio::awaitable<bool> {
        const std::string token = query_param(req.target(), "continuation-token");
        const std::string prefix = query_param(req.target(), "prefix");
        if (prefix == "cycle%2F") {
            // A, B, A, B...: no token repeats twice in a row.
            const int n = ++cycle_pages;
            const std::string page = list_page_reply({"cycle/" + std::to_string(n)}, {}, std::string(n >= 50 ? "" : token == "A" ? "B" : "A"));
            co_return co_await p.write(page);
        }
        // Pages with nothing on them are legitimate (S3 sends them), as long as they move on.
        std::string page;
        if (token.empty()) page = list_page_reply({}, {}, "t1");
        else if (token == "t1") page = list_page_reply({}, {}, "t2");
        else page = list_page_reply({"sparse/only.jpg"}, {}, "");
        co_return co_await p.write(page);
    });
    cv::runtime rt(two_lanes());
    s3::client c(rt, path_style_config(srv.endpoint()), fast_retries());

    auto sparse = c.run(c.async_list_all("pictures", "sparse/"));
    REQUIRE(sparse.size() == 1);
    CHECK(sparse[0].key == "sparse/only.jpg");

    auto e = error_of([&] { c.run(c.async_list_all("pictures", "cycle/")); });
    REQUIRE(e);
    CHECK(e->code() == s3::errc::bad_reply);
    INFO(std::string(e->what()));
    CHECK(contains(e->what(), "'A'"));
    CHECK(contains(e->what(), "'cycle/'"));
    CHECK(cycle_pages.load() == 3);
}

TEST_CASE("s3 list_objects (the parallel lister) stops at a repeated continuation token too")
{
    std::atomic<int> top_pages{0};
    test_server srv([&](peer& p, const http_request& req, std::size_t) -> asio::awaitable<bool> {
        if (!query_param(req.target(), "delimiter").empty()) {
            const int n = ++top_pages;
            const std::string page = list_page_reply({}, {"photos/d" + std::to_string(n) + "/"}, std::string(n < 50 ? "top-token" : ""));
            co_return co_await p.write(page);
        }
        const std::string page = list_page_reply({"photos/d/x.jpg"}, {}, "");
        co_return co_await p.write(page);
    });
    cv::runtime rt(two_lanes());
    s3::client c(rt, path_style_config(srv.endpoint()), fast_retries());
    auto e = error_of([&] { (void)s3::list_objects(c, "pictures", "photos/"); });
    REQUIRE(e);
    CHECK(e->code() == s3::errc::bad_reply);
    INFO(std::string(e->what()));
    CHECK(contains(e->what(), "'top-token'"));
    CHECK(contains(e->what(), "'photos/'"));
    CHECK(top_pages.load() == 2);
}

TEST_CASE("s3 timeouts.total bounds a whole request, retries and backoff included, and the error names it")
{
    // A server that accepts and never answers; the default retries (ten attempts, backoff
    // up to 20 s). Ten attempts of 3 s each and their backoff took about 45 s.
    test_server srv(never_answers);
    cv::runtime rt(two_lanes());
    s3::client_options o;
    o.http.timeouts.total = 3s;
    s3::client c(rt, path_style_config(srv.endpoint()), o);
    const auto t0 = std::chrono::steady_clock::now();
    auto e = error_of([&] { c.run(c.async_get("pictures", "silent.jpg")); });
    const auto took = std::chrono::steady_clock::now() - t0;
    REQUIRE(e);
    INFO(std::string(e->what()));
    MESSAGE("total timeout: ", std::string(e->what()));
    CHECK(e->code() == ch::errc::total_timeout);
    CHECK(took < 20s);
    CHECK(contains(e->what(), "total timeout (3 s)"));
    CHECK(contains(e->what(), "s3://pictures/silent.jpg"));
}

TEST_CASE("s3 timeouts.total also ends the backoff: no attempt starts past it")
{
    // A server that always answers 503 SlowDown, and backoff draws of up to 5 s: the second
    // or third draw reaches past the 1 s deadline, and the request ends then, not after
    // ten attempts (about 20 s).
    test_server srv([](peer& p, const http_request&, std::size_t) -> asio::awaitable<bool> {
        co_return co_await p.write(reply(503, "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"));
    });
    cv::runtime rt(two_lanes());
    s3::client_options o;
    o.http.timeouts.total = 1s;
    o.retry.base_delay = 5s;
    o.retry.max_delay = 5s;
    s3::client c(rt, path_style_config(srv.endpoint()), o);
    const auto t0 = std::chrono::steady_clock::now();
    auto e = error_of([&] { c.run(c.async_get("pictures", "busy.jpg")); });
    const auto took = std::chrono::steady_clock::now() - t0;
    REQUIRE(e);
    MESSAGE("total timeout in the backoff: ", std::string(e->what()));
    CHECK(e->code() == ch::errc::total_timeout);
    CHECK(contains(e->what(), "total timeout (1 s)"));
    CHECK(took < 10s);
}

TEST_CASE("with the default settings an endpoint that never answers, stalls or cannot be reached is reported within a minute")
{
    // Worst cases, from the defaults alone: every attempt that the retry options allow to
    // time out takes the longest limit, and every backoff before the next its longest draw.
    const s3::client_options o;
    const auto& t = o.http.timeouts;
    const auto& r = o.retry;
    REQUIRE(r.max_timeouts > 0);
    const unsigned attempts = std::min(r.max_attempts, r.max_timeouts);
    std::chrono::milliseconds backoff{0};
    for (unsigned k = 1; k < attempts; ++k) backoff += std::min(r.max_delay, r.base_delay * (1u << (k - 1)));
    for (auto limit : {t.connect, t.first_byte, t.idle}) {
        CAPTURE(limit.count());
        CHECK(limit.count() > 0);
        CHECK(limit * attempts + backoff <= 60s);
    }
}

TEST_CASE("s3 client gives up on a silent endpoint after a few timed-out attempts, naming the timeout")
{
    // With the default retries, ten attempts that each time out add up (ten first-byte
    // timeouts and up to a minute of backoff): timeouts have a smaller budget of attempts.
    test_server srv(never_answers);
    cv::runtime rt(two_lanes());
    s3::client_options o;
    o.http.timeouts.first_byte = 300ms;
    s3::client c(rt, path_style_config(srv.endpoint()), o);
    auto e = error_of([&] { c.run(c.async_head("pictures", "silent.jpg")); });
    REQUIRE(e);
    INFO(std::string(e->what()));
    MESSAGE("silent endpoint: ", std::string(e->what()));
    CHECK(e->code() == ch::errc::first_byte_timeout);
    CHECK(e->attempts() == 3);
    CHECK(contains(e->what(), "first byte timeout (300 ms) after 3 attempts"));
    CHECK(srv.accepts() == 3);
}

TEST_CASE("a multipart upload whose part fails is aborted, raised as upload_aborted with the cause kept")
{
    std::atomic<int> aborts{0};
    test_server srv([&](peer& p, const http_request& req, std::size_t) -> asio::awaitable<bool> {
        if (req.method() == bhttp::verb::post)
            co_return co_await p.write(reply(200, "<InitiateMultipartUploadResult><Bucket>pictures</Bucket><Key>big.bin</Key>"
                                                  "<UploadId>upload-1</UploadId></InitiateMultipartUploadResult>"));
        if (req.method() == bhttp::verb::delete_) {
            ++aborts;
            co_return co_await p.write(reply(204, ""));
        }
        co_return co_await p.write(reply(400, "<Error><Code>InvalidPart</Code><Message>part refused</Message></Error>"));
    });
    cv::runtime rt(two_lanes());
    auto o = fast_retries(2);
    o.multipart_threshold = 5u << 20;
    o.upload_part_size = 5u << 20;
    s3::client c(rt, path_style_config(srv.endpoint()), o);
    const std::vector<std::byte> data(11u << 20, std::byte{42});
    std::exception_ptr failed;
    try {
        c.run(c.async_put("pictures", "big.bin", data));
    } catch (...) {
        failed = std::current_exception();
    }
    REQUIRE(failed);
    std::optional<s3::request_error> cause;
    try {
        std::rethrow_exception(failed);
    } catch (const s3::request_error& e) {
        MESSAGE("upload aborted: ", std::string(e.what()));
        CHECK(e.code() == s3::errc::upload_aborted);
        CHECK(contains(e.what(), "aborted"));
        CHECK(contains(e.what(), "InvalidPart")); // the cause, in the detail
        CHECK(e.reply().code == "InvalidPart");
        // And nested, whole.
        try {
            std::rethrow_if_nested(e);
        } catch (const s3::request_error& inner) {
            cause = inner;
        }
    }
    REQUIRE(cause);
    CHECK(cause->code() == s3::errc::request_refused);
    CHECK(conveyor_test::eventually([&] { return aborts.load() == 1; }, 10s));
}
