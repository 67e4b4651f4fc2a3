// Tests of conveyor/s3/client.hpp against a real S3-compatible server (s3rver) behind a
// proxy that checks every request's SigV4 signature with botocore: objects, ranges,
// listings, multipart uploads, awkward keys, errors, retries.
#include "support.hpp"

#include <set>

using namespace s3test;
using boost::beast::http::verb;

TEST_CASE("s3 client puts an object, heads it and gets it back")
{
    auto c = make_client();
    const std::string body = pattern(110'000, 1);
    auto put = c.run(c.put(bucket(), "client/roundtrip.bin", bytes_of(body), "application/octet-stream"));
    CHECK(put.bytes == body.size());
    CHECK(put.parts == 0);
    CHECK_FALSE(put.etag.empty());

    auto info = c.run(c.head(bucket(), "client/roundtrip.bin"));
    CHECK(info.size == 110'000);
    CHECK(info.etag == put.etag);

    auto got = c.run(c.get(bucket(), "client/roundtrip.bin"));
    CHECK(got.view() == body);
    // Unknown size: a ranged first request is the whole object when it is smaller than a part.
    CHECK(c.run(c.get(bucket(), "client/roundtrip.bin", 110'000)).view() == body);
    CHECK(c.stats().retries == 0);
}

TEST_CASE("s3 client reads byte ranges")
{
    auto c = make_client();
    const std::string body = pattern(100'000, 2);
    c.run(c.put(bucket(), "client/range.bin", bytes_of(body)));
    CHECK(c.run(c.get_range(bucket(), "client/range.bin", 0, 10)).view() == body.substr(0, 10));
    CHECK(c.run(c.get_range(bucket(), "client/range.bin", 12'345, 54'321)).view() == body.substr(12'345, 54'321));
    CHECK(c.run(c.get_range(bucket(), "client/range.bin", 99'990, 100)).view() == body.substr(99'990));
}

TEST_CASE("s3 client round-trips keys with spaces, unicode, plus, equals, percent and tilde")
{
    auto c = make_client();
    const std::vector<std::string> keys = {"odd keys/with space.jpg", "odd keys/données/été.jpg", "odd keys/a+b=c.jpg",
                                           "odd keys/100% done~1.jpg", "odd keys/semi;colon,comma&amp.jpg"};
    for (std::size_t i = 0; i < keys.size(); ++i) {
        CAPTURE(keys[i]);
        const auto body = pattern(1000 + i, 10 + i);
        c.run(c.put(bucket(), keys[i], bytes_of(body)));
        CHECK(c.run(c.get(bucket(), keys[i])).view() == body);
        CHECK(c.run(c.head(bucket(), keys[i])).size == static_cast<std::int64_t>(body.size()));
    }
    auto listed = c.run(c.list_all(bucket(), "odd keys/"));
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

    auto all = c.run(c.list_all(bucket(), "many/"));
    REQUIRE(all.size() == 1100);
    CHECK(std::is_sorted(all.begin(), all.end(), [](auto& a, auto& b) { return a.key < b.key; }));
    std::set<std::string> unique;
    for (auto& o : all) unique.insert(o.key);
    CHECK(unique.size() == 1100);

    auto page = c.run(c.list(bucket(), {.prefix = "many/", .delimiter = "/"}));
    CHECK(page.objects.empty());
    CHECK(page.common_prefixes == std::vector<std::string>{"many/dir0/", "many/dir1/", "many/dir2/"});

    auto small = c.run(c.list(bucket(), {.prefix = "many/dir1/", .max_keys = 100}));
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
    auto put = c.run(c.put(bucket(), "client/multipart.bin", bytes_of(body)));
    CHECK(put.parts == 3);
    CHECK(put.bytes == body.size());
    CHECK(c.run(c.head(bucket(), "client/multipart.bin")).size == static_cast<std::int64_t>(body.size()));

    const auto before = requests_for(path_of("client/multipart.bin"));
    auto got = c.run(c.get(bucket(), "client/multipart.bin"));
    REQUIRE(got.size() == body.size());
    CHECK(got.view() == body);
    // 12 MiB + 12345 bytes in 4 MiB parts: 4 ranged GETs.
    CHECK(requests_for(path_of("client/multipart.bin")) - before == 4);

    // A known size skips nothing: still 4 parts, same bytes.
    CHECK(c.run(c.get(bucket(), "client/multipart.bin", static_cast<std::int64_t>(body.size()))).view() == body);
}

TEST_CASE("s3 client reads an empty object")
{
    auto c = make_client();
    c.run(c.put(bucket(), "client/empty", {}));
    CHECK(c.run(c.get(bucket(), "client/empty")).size() == 0);
    CHECK(c.run(c.head(bucket(), "client/empty")).size == 0);
}

TEST_CASE("a missing key is a clear 404 error, not retried")
{
    auto c = make_client();
    const auto before = requests_for(path_of("client/no such key.jpg"));
    auto e = error_of([&] { c.run(c.get(bucket(), "client/no such key.jpg")); });
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

    auto h = error_of([&] { c.run(c.head(bucket(), "client/no such key.jpg")); });
    REQUIRE(h);
    CHECK(h->code() == s3::errc::no_such_key);
}

TEST_CASE("wrong credentials are a clear 403 error that never shows the secret")
{
    auto o = good_options();
    o.creds->secret_access_key = "not-the-secret-" + secret();
    s3::client c(rt(), o, fast_retries());
    auto e = error_of([&] { c.run(c.get(bucket(), "client/roundtrip.bin")); });
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
    auto e2 = error_of([&] { c2.run(c2.head(bucket(), "client/roundtrip.bin")); });
    REQUIRE(e2);
    CHECK(e2->code() == s3::errc::access_denied);
}

TEST_CASE("an endpoint that refuses connections fails after the configured attempts, naming it")
{
    // A port that was free a moment ago: nothing listens there.
    auto o = good_options();
    o.endpoint_url = "http://127.0.0.1:1";
    s3::client c(rt(), o, fast_retries(3));
    auto e = error_of([&] { c.run(c.get(bucket(), "client/roundtrip.bin")); });
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
    c.run(c.put(bucket(), "retry/object.bin", bytes_of(body)));
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
        auto got = c.run(c.get(bucket(), "retry/object.bin"));
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
    c.run(c.put(bucket(), "retry/always.bin", bytes_of(std::string("x"))));
    arm_fault("retry/always.bin", "status", 10, 503, "SlowDown");
    auto e = error_of([&] { c.run(c.get(bucket(), "retry/always.bin")); });
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
    auto e = error_of([&] { c.run(c.put(bucket(), "client/multipart-fail.bin", bytes_of(body))); });
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
    admin_client.run(admin_client.put(pub, "open/data.bin", bytes_of(body)));

    auto o = good_options();
    o.creds.reset();
    o.anonymous = true;
    s3::client anon(rt(), o, fast_retries());
    CHECK(anon.cfg().creds.anonymous());
    CHECK(anon.run(anon.get(pub, "open/data.bin")).view() == body);
    // The private bucket refuses unsigned requests.
    auto e = error_of([&] { anon.run(anon.get(bucket(), "client/roundtrip.bin")); });
    REQUIRE(e);
    CHECK(e->code() == s3::errc::access_denied);
}

TEST_CASE("a presigned URL fetches the object without other credentials")
{
    auto c = make_client();
    const std::string body = pattern(3000, 7);
    c.run(c.put(bucket(), "client/presigned file+1.bin", bytes_of(body)));
    auto t = s3::target_for(c.cfg(), bucket(), "client/presigned file+1.bin");
    s3::signer sg(c.cfg().creds, c.cfg().region);
    const std::string target = sg.presign(verb::get, t.path, t.host, std::chrono::seconds(300));
    cv::http::client hc(rt(), t.endpoint);
    auto [ec, resp] = asio::co_spawn(rt().io_executor(1),
                                     [&]() -> asio::awaitable<std::pair<std::error_code, cv::http::response>> {
                                         cv::http::request req;
                                         req.target = target;
                                         req.headers.set(boost::beast::http::field::host, t.host);
                                         co_return co_await hc.send(req);
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
                                       (void)c.run(c.head(bucket(), "client/roundtrip.bin"));
                                   } catch (const cv::error& e) {
                                       co_return e.code();
                                   }
                                   co_return std::error_code{};
                               },
                               asio::use_future)
                    .get();
    CHECK(code == std::errc::operation_not_permitted);
}
