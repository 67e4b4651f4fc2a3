// Tests of conveyor/s3/error.hpp and conveyor/s3/xml.hpp: the error codes, S3's XML error
// replies, ListObjectsV2 pages, multipart documents, and Content-Range parsing. Then the
// S3 client against servers scripted here (tests/support/http_server.hpp), for what needs
// a server that misbehaves on purpose and no real S3: listings that go round in circles,
// deadlines and timeouts, aborted uploads.
#include "../support/common.hpp"
#include "../support/http_server.hpp"

#include <conveyor/s3/client.hpp>
#include <conveyor/s3/error.hpp>
#include <conveyor/s3/source.hpp>
#include <conveyor/s3/xml.hpp>

#include <atomic>
#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace s3 = conveyor::s3;

TEST_CASE("every s3 error code has its own message")
{
    using s3::errc;
    const std::pair<errc, const char*> all[] = {
        {errc::access_denied, "access denied"},
        {errc::no_such_key, "no such key"},
        {errc::no_such_bucket, "no such bucket"},
        {errc::request_refused, "request refused by the server"},
        {errc::server_error, "server error"},
        {errc::throttled, "throttled by the server (slow down)"},
        {errc::bad_reply, "malformed reply from the server"},
        {errc::object_changed, "object changed while being read"},
        {errc::upload_aborted, "multipart upload aborted"},
    };
    std::set<std::string> seen;
    for (const auto& [e, text] : all) {
        std::error_code ec = e;
        CAPTURE(text);
        CHECK(ec.category().name() == std::string("conveyor.s3"));
        CHECK(ec.message() == text);
        CHECK(seen.insert(ec.message()).second);
    }
    CHECK(std::error_code(s3::make_error_code(errc::no_such_key)).message() == "no such key");
    CHECK(std::error_code(static_cast<errc>(999)).message() == "unknown conveyor.s3 error");
}

TEST_CASE("an S3 XML error reply gives status, code, message and request id")
{
    const std::string body = R"(<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message>
<Resource>/bucket/a &amp; b.jpg</Resource><RequestId>4442587FB7D0A2F9</RequestId></Error>)";
    auto r = s3::parse_error_reply(404, body, "header-id");
    CHECK(r.status == 404);
    CHECK(r.code == "NoSuchKey");
    CHECK(r.message == "The specified key does not exist.");
    CHECK(r.resource == "/bucket/a & b.jpg");
    CHECK(r.request_id == "4442587FB7D0A2F9");  // the body's id wins over the header's
    CHECK(r.describe() == "HTTP 404 NoSuchKey: The specified key does not exist. (request id 4442587FB7D0A2F9)");
    CHECK(r.to_error_code() == s3::errc::no_such_key);
    CHECK_FALSE(r.retryable());
}

TEST_CASE("an error reply without an XML body still gives the status and the header's request id")
{
    auto r = s3::parse_error_reply(503, "<html>Service Unavailable</html>", "abc");
    CHECK(r.code.empty());
    CHECK(r.request_id == "abc");
    CHECK(r.describe() == "HTTP 503 (request id abc)");
    CHECK(r.retryable());
    CHECK(r.to_error_code() == s3::errc::throttled);

    auto broken = s3::parse_error_reply(500, "<Error><Code>Internal", "");
    CHECK(broken.status == 500);
    CHECK(broken.code.empty());
    CHECK(broken.retryable());
}

TEST_CASE("s3 replies map to error codes and retry advice")
{
    auto reply = [](unsigned status, std::string code) {
        s3::reply_error r;
        r.status = status;
        r.code = std::move(code);
        return r;
    };
    CHECK(reply(403, "SignatureDoesNotMatch").to_error_code() == s3::errc::access_denied);
    CHECK(reply(403, "InvalidAccessKeyId").to_error_code() == s3::errc::access_denied);
    CHECK(reply(404, "NoSuchBucket").to_error_code() == s3::errc::no_such_bucket);
    CHECK(reply(404, "").to_error_code() == s3::errc::no_such_key);
    CHECK(reply(412, "PreconditionFailed").to_error_code() == s3::errc::object_changed);
    CHECK(reply(400, "InvalidArgument").to_error_code() == s3::errc::request_refused);
    CHECK(reply(502, "").to_error_code() == s3::errc::server_error);
    for (unsigned st : {500u, 502u, 503u, 504u, 429u}) CHECK(reply(st, "").retryable());
    CHECK(reply(400, "RequestTimeout").retryable());
    for (unsigned st : {400u, 401u, 403u, 404u, 405u, 409u, 412u, 416u}) CHECK_FALSE(reply(st, "Whatever").retryable());
}

TEST_CASE("a ListObjectsV2 page gives objects, prefixes and the continuation token")
{
    const std::string body = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>bucket</Name><Prefix>train/</Prefix><KeyCount>3</KeyCount><MaxKeys>2</MaxKeys>
  <IsTruncated>true</IsTruncated><NextContinuationToken>tok/en+=</NextContinuationToken>
  <Contents><Key>train/a.jpg</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>
    <ETag>&quot;0123&quot;</ETag><Size>110000</Size><StorageClass>STANDARD</StorageClass></Contents>
  <Contents><Key>train/b &amp; c.jpg</Key><ETag>"4567"</ETag><Size>0</Size></Contents>
  <CommonPrefixes><Prefix>train/n01/</Prefix></CommonPrefixes>
</ListBucketResult>)";
    auto p = s3::parse_list_page(body);
    REQUIRE(p.objects.size() == 2);
    CHECK(p.objects[0].key == "train/a.jpg");
    CHECK(p.objects[0].size == 110000);
    CHECK(p.objects[0].etag == "\"0123\"");
    CHECK(p.objects[0].last_modified == "2026-01-01T00:00:00.000Z");
    CHECK(p.objects[1].key == "train/b & c.jpg");
    CHECK(p.objects[1].size == 0);
    REQUIRE(p.common_prefixes.size() == 1);
    CHECK(p.common_prefixes[0] == "train/n01/");
    CHECK(p.truncated);
    CHECK(p.next_continuation_token == "tok/en+=");
}

TEST_CASE("a url-encoded ListObjectsV2 page is decoded, with '+' for a space")
{
    const std::string body = R"(<ListBucketResult><EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>
  <Contents><Key>donn%C3%A9es/%C3%A9t%C3%A9+1.jpg</Key><Size>5</Size></Contents>
  <Contents><Key>a%2Bb%3Dc%25d</Key><Size>1</Size></Contents>
  <CommonPrefixes><Prefix>x+y/</Prefix></CommonPrefixes></ListBucketResult>)";
    auto p = s3::parse_list_page(body);
    REQUIRE(p.objects.size() == 2);
    CHECK(p.objects[0].key == "données/été 1.jpg");
    CHECK(p.objects[1].key == "a+b=c%d");
    CHECK(p.common_prefixes.at(0) == "x y/");
    CHECK_FALSE(p.truncated);
}

TEST_CASE("malformed ListObjectsV2 replies are bad_reply errors")
{
    auto code_of = [](std::string body) -> std::error_code {
        try {
            (void)s3::parse_list_page(body);
        } catch (const conveyor::error& e) {
            return e.code();
        }
        return {};
    };
    CHECK(code_of("<ListBucketResult><Contents>") == s3::errc::bad_reply);
    CHECK(code_of("<SomethingElse/>") == s3::errc::bad_reply);
    CHECK(code_of("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>") == s3::errc::bad_reply);
    CHECK(code_of("<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>") == s3::errc::bad_reply);
    CHECK(code_of("<ListBucketResult><EncodingType>url</EncodingType><Contents><Key>%zz</Key></Contents></ListBucketResult>") ==
          s3::errc::bad_reply);
}

TEST_CASE("multipart documents: upload id, completion body, and an error hidden in a 200")
{
    CHECK(s3::parse_upload_id("<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>abc-123</UploadId>"
                              "</InitiateMultipartUploadResult>") == "abc-123");
    CHECK_THROWS_AS(s3::parse_upload_id("<InitiateMultipartUploadResult/>"), conveyor::error);

    const auto body = s3::complete_multipart_body({"\"e1\"", "\"e2\""});
    CHECK(body.find("<Part><PartNumber>1</PartNumber><ETag>&quot;e1&quot;</ETag></Part>") != std::string::npos);
    CHECK(body.find("<Part><PartNumber>2</PartNumber><ETag>&quot;e2&quot;</ETag></Part>") != std::string::npos);

    CHECK_FALSE(s3::complete_reply_error("<CompleteMultipartUploadResult><ETag>x</ETag></CompleteMultipartUploadResult>"));
    auto err = s3::complete_reply_error("<Error><Code>InternalError</Code><Message>retry</Message></Error>");
    REQUIRE(err);
    CHECK(err->code == "InternalError");
    CHECK(err->retryable());
}

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

// =======================================================================================
// The client against scripted servers

namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
namespace cv = conveyor;
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

/// Anonymous, path-style requests to `srv`.
s3::config config_for(const test_server& srv)
{
    s3::config c;
    c.creds.source = "test";
    c.region = "us-east-1";
    c.endpoint = srv.endpoint();
    c.aws_endpoint = false;
    c.style = s3::addressing::path;
    return c;
}

s3::client_options fast_retries(unsigned attempts = 10)
{
    s3::client_options o;
    o.retry.max_attempts = attempts;
    o.retry.base_delay = 2ms;
    o.retry.max_delay = 20ms;
    return o;
}

template <class F>
std::optional<s3::request_error> request_error_of(F f)
{
    try {
        f();
    } catch (const s3::request_error& e) {
        return e;
    }
    return std::nullopt;
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
    s3::client c(rt, config_for(srv), fast_retries());
    auto e = request_error_of([&] { c.run(c.list_all("pictures", "photos/")); });
    REQUIRE(e);
    CHECK(e->code() == s3::errc::bad_reply);
    const std::string what = e->what();
    MESSAGE("repeated token: ", what);
    CHECK(contains(what, "s3://pictures/"));
    CHECK(contains(what, "'photos/'"));
    CHECK(contains(what, "'same-token'"));
    CHECK(pages.load() == 2); // the first repeat ends it
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
    s3::client c(rt, config_for(srv), fast_retries());

    auto sparse = c.run(c.list_all("pictures", "sparse/"));
    REQUIRE(sparse.size() == 1);
    CHECK(sparse[0].key == "sparse/only.jpg");

    auto e = request_error_of([&] { c.run(c.list_all("pictures", "cycle/")); });
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
    s3::client c(rt, config_for(srv), fast_retries());
    auto e = request_error_of([&] { (void)s3::list_objects(c, "pictures", "photos/"); });
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
    s3::client c(rt, config_for(srv), o);
    const auto t0 = std::chrono::steady_clock::now();
    auto e = request_error_of([&] { c.run(c.get("pictures", "silent.jpg")); });
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
    s3::client c(rt, config_for(srv), o);
    const auto t0 = std::chrono::steady_clock::now();
    auto e = request_error_of([&] { c.run(c.get("pictures", "busy.jpg")); });
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
    s3::client c(rt, config_for(srv), o);
    auto e = request_error_of([&] { c.run(c.head("pictures", "silent.jpg")); });
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
    s3::client c(rt, config_for(srv), o);
    const std::vector<std::byte> data(11u << 20, std::byte{42});
    std::exception_ptr failed;
    try {
        c.run(c.put("pictures", "big.bin", data));
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
