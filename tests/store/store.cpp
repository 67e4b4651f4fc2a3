// Tests of conveyor/store/*.hpp without a storage server: the map from locations to stores,
// the store context (one store per kind; the web store's client per server, its
// connections kept from read to read, against a loopback test server), the file store
// (read whole, ranges, chunks, listing, writing beside the name and renaming), the web
// store's refusals, and one shard list given as file:// URLs and as plain paths.
#include <conveyor/core/error.hpp>
#include <conveyor/core/location.hpp>
#include <conveyor/file/index.hpp>
#include <conveyor/image/labels.hpp>
#include <conveyor/s3/source.hpp>
#include <conveyor/shard/index.hpp>
#include <conveyor/shard/list.hpp>
#include <conveyor/shard/source.hpp>
#include <conveyor/shard/writer.hpp>
#include <conveyor/store/context.hpp>
#include <conveyor/store/file.hpp>
#include <conveyor/store/http.hpp>
#include <conveyor/store/objects.hpp>
#include <conveyor/store/open.hpp>

#include "support.hpp"

#include "../support/common.hpp"
#include "../support/http_server.hpp"

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>

#include <unistd.h>

#include <filesystem>
#include <set>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace cv = conveyor;
namespace fs = std::filesystem;
namespace asio = boost::asio;

using namespace store_test;

namespace {

struct temp_dir {
    fs::path path = fs::temp_directory_path() / ("conveyor-store-" + std::to_string(::getpid()));
    temp_dir() { fs::create_directories(path); }
    ~temp_dir() { fs::remove_all(path); }
};

std::string slurp(const fs::path& p)
{
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::span<const std::byte> bytes_of(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

} // namespace

TEST_CASE("each kind of location has its store, local ones near and the others remote")
{
    CHECK(!cv::store::is_remote(cv::location("/data/a.tar")));
    CHECK(!cv::store::is_remote(cv::location("file:///data/a.tar")));
    CHECK(cv::store::is_remote(cv::location("S3://b/a.tar")));
    CHECK(cv::store::is_remote(cv::location("https://host/a.tar")));
    CHECK(!cv::store::open_store(cv::location("/data/a.tar"))->remote());
    CHECK(cv::store::open_store(cv::location("http://host/a.tar"))->remote());
    CHECK(dynamic_cast<const cv::store::file_store*>(cv::store::open_store(cv::location("file:///d/a")).get()) != nullptr);
    // S3 needs a client, and the message says where to give one.
    try {
        (void)cv::store::open_store(cv::location("s3://b/a.tar"));
        FAIL("an s3:// store was opened without a client");
    } catch (const cv::error& e) {
        CHECK(std::string(e.what()).find("needs an S3 client: give one in the options of what reads it (their `s3`) or in its store context (`store_options::s3`)") != std::string::npos);
        CHECK(e.where() == "s3://b/a.tar");
    }
}

TEST_CASE("the file store reads whole, by range and in chunks, lists a folder and writes by renaming")
{
    temp_dir t;
    cv::runtime rt({.io_threads = 1});
    const auto st = cv::store::open_store(cv::location(t.path.string()), {.rt = &rt});
    const cv::location a((t.path / "sub" / "a.bin").string());

    // Written beside its name, visible only once committed.
    auto w = st->open_writer(a, {});
    w->write(bytes_of("hello, "));
    w->write(bytes_of("store"));
    CHECK(!fs::exists(a.path()));
    w->commit();
    CHECK(slurp(a.path()) == "hello, store");
    // Abandoned: nothing left, not even the temporary file.
    {
        auto gone = st->open_writer(cv::location((t.path / "gone.bin").string()), {});
        gone->write(bytes_of("x"));
    }
    CHECK(!fs::exists(t.path / "gone.bin"));

    CHECK(text_of(st->read(a)) == "hello, store");
    CHECK(text_of(st->read(cv::location("file://" + a.path()))) == "hello, store");
    CHECK(text_of(run_on(rt, st->async_read(a))) == "hello, store");
    CHECK(text_of(run_on(rt, st->async_read_range(a, 7, 5))) == "store");
    CHECK(text_of(run_on(rt, st->async_read_range(a, 7, 100))) == "store"); // short at the end
    auto chunks = [&]() -> asio::awaitable<std::vector<std::string>> {
        auto r = st->read_chunks(a, {.chunk_size = 5, .chunks_in_flight = 2, .offset = 2});
        std::vector<std::string> got;
        while (auto c = co_await r->async_next()) got.push_back(text_of(c->bytes));
        co_return got;
    };
    CHECK(run_on(rt, chunks()) == std::vector<std::string>{"llo, ", "store"});

    std::ofstream(t.path / "b.bin") << "b";
    const auto listed = st->list(cv::location(t.path.string() + "/"));
    REQUIRE(listed.size() == 2);
    CHECK(listed[0].url == (t.path / "b.bin").string());
    CHECK(listed[0].size == 1);
    CHECK(listed[1].url == a.path()); // ".../b.bin" < ".../sub/a.bin"
    CHECK(listed[1].size == 12);

    std::error_code ec;
    try {
        (void)st->read(cv::location((t.path / "missing.bin").string()));
        FAIL("a missing file was read");
    } catch (const cv::error& e) {
        CHECK(e.where() == (t.path / "missing.bin").string());
        ec = e.code();
    }
    CHECK(ec == std::errc::no_such_file_or_directory);
}

TEST_CASE("index, listing and label map readers refuse a file of gigabytes before reading it")
{
    temp_dir d;
    const fs::path big = d.path / "huge.json";
    std::ofstream(big) << "[";
    fs::resize_file(big, std::uint64_t{4} << 30); // sparse: 4 GiB that take no disk
    auto refused = [&](const std::string& what, auto&& read, const std::string& setting, const fs::path& file,
                       std::uint64_t bound = 4u << 20) {
        std::error_code ec;
        std::string message;
        const auto grew = conveyor_test::resident_growth([&] {
            try {
                read();
            } catch (const cv::error& e) {
                ec = e.code();
                message = e.what();
            }
        });
        CAPTURE(what);
        CAPTURE(message);
        CHECK(ec == std::errc::file_too_large);
        CHECK(message.find(file.string()) != std::string::npos);
        CHECK(message.find(setting) != std::string::npos);
        conveyor_test::check_resident_growth(grew, bound, what);
    };
    refused("file index", [&] { (void)cv::file::read_index(big, d.path); }, "walk_options::max_index_bytes", big);
    refused("classes file", [&] { (void)cv::file::read_classes(big); }, "default_max_index_bytes", big);
    refused("dataset index", [&] { (void)cv::shard::read_index(big); }, "max_bytes", big);
    refused("dataset index through its store", [&] { (void)cv::shard::load_index(big.string()); }, "list_options::max_index_bytes", big);
    refused("shard list naming an index", [&] { (void)cv::shard::resolve(big.string()); }, "list_options::max_index_bytes", big);
    refused("S3 index in a local file", [&] { (void)cv::s3::read_index("bucket", big.string()); }, "max_bytes", big);
    refused("label map", [&] { (void)cv::image::load_label_map(big); }, "default_max_index_bytes", big);
    // A device that never ends is read up to the limit, then refused.
    refused("an index that never ends (/dev/zero)",
            [&] { (void)cv::file::read_index("/dev/zero", d.path, {.max_index_bytes = 1u << 20}); }, "walk_options::max_index_bytes",
            "/dev/zero", 8u << 20); // what came, in a buffer that doubles
    // The limit as set: a file of exactly the limit is read, one byte more is not.
    const fs::path small = d.path / "small.json";
    std::ofstream(small) << R"(["a.jpg", "b.jpg"])";
    const auto size = fs::file_size(small);
    CHECK(cv::file::read_index(small, d.path, {.max_index_bytes = size}).entries.size() == 2);
    refused("file index one byte over its limit", [&] { (void)cv::file::read_index(small, d.path, {.max_index_bytes = size - 1}); },
            "walk_options::max_index_bytes", small);
    refused("the store's read_small", [&] { (void)cv::store::file_store().read_small(cv::location(small.string()), size - 1, "a test's limit"); },
            "a test's limit", small);
    CHECK(cv::store::file_store().read_small(cv::location(small.string()), size, "a test's limit").size() == size);
}

TEST_CASE("the web store lists nothing and writes nothing, and says so naming the URL")
{
    const cv::location web("https://user:SECRET@host/x/");
    const auto st = cv::store::open_store(web);
    for (int op = 0; op < 2; ++op) {
        try {
            if (op == 0) (void)st->list(web);
            else (void)st->open_writer(web, {});
            FAIL("the web store did what it cannot");
        } catch (const cv::error& e) {
            CHECK(e.code() == std::errc::operation_not_supported);
            CHECK(std::string(e.what()).find("host/x/") != std::string::npos);
            CHECK(std::string(e.what()).find("SECRET") == std::string::npos);
        }
    }
}

TEST_CASE("a shard list gives the same samples as file:// URLs and as plain paths")
{
    temp_dir t;
    cv::shard::writer w({.pattern = (t.path / "shard-%03d.tar").string(), .max_count = 5});
    for (int i = 0; i < 12; ++i) {
        const std::string jpg(100 + 997 * i, static_cast<char>('a' + i)), cls = std::to_string(i % 3);
        const cv::shard::field_view f[] = {{"jpg", bytes_of(jpg)}, {"cls", bytes_of(cls)}};
        w.write("k" + std::to_string(i), f);
    }
    w.close();
    REQUIRE(w.index().shards.size() == 3);

    cv::shard::source_options o;
    o.share = cv::split{};
    o.order.shuffle = false;
    o.chunks.chunk_size = 4096;
    const auto plain = samples_of(cv::shard::resolve((t.path / "shard-{000..002}.tar").string()), o);
    const auto file_url = samples_of(cv::shard::resolve("file://" + (t.path / "shard-{000..002}.tar").string()), o);
    const auto file_upper = samples_of(cv::shard::resolve("FILE://" + (t.path / "shard-{000..002}.tar").string()), o);
    const auto listed = samples_of(cv::shard::resolve(t.path.string() + "/"), o);
    CHECK(plain.size() == 12);
    CHECK(file_url == plain);
    CHECK(file_upper == plain);
    CHECK(listed == plain);
}

TEST_CASE("a store context makes one store per kind, and its web store one client per server whose connection serves every read")
{
    namespace bhttp = boost::beast::http;
    const std::string data = "0123456789abcdefghij";
    // Whole reads of /r<i> and ranged reads ("bytes=a-b") of /shard, on keep-alive connections.
    conveyor_test::test_server server([&](conveyor_test::peer& p, const bhttp::request<bhttp::string_body>& req,
                                          std::size_t) -> asio::awaitable<bool> {
        std::string body = std::string(req.target()), status = "200 OK", extra;
        if (req.target() == "/shard") {
            const std::string range(req[bhttp::field::range]);
            body = data;
            if (range.starts_with("bytes=")) {
                const auto dash = range.find('-');
                const std::size_t a = std::stoull(range.substr(6, dash - 6));
                const std::size_t b = dash + 1 < range.size() ? std::stoull(range.substr(dash + 1)) : data.size() - 1;
                body = data.substr(a, b - a + 1);
                status = "206 Partial Content";
                extra = "Content-Range: bytes " + std::to_string(a) + "-" + std::to_string(b) + "/" + std::to_string(data.size()) + "\r\n";
            }
        }
        co_return co_await p.write("HTTP/1.1 " + status + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra + "\r\n" + body);
    });
    cv::runtime rt({.io_threads = 1, .compute_threads = 1});
    const auto ctx = cv::store::make_context({.rt = &rt});
    const std::string base = "http://127.0.0.1:" + std::to_string(server.port());
    const auto st = ctx->store_for(cv::location(base + "/r0"));
    CHECK(st == ctx->store_for(cv::location(base + "/r1"))); // one store per kind
    CHECK(st != ctx->store_for(cv::location("/local/file")));
    const auto* web = dynamic_cast<const cv::store::http_store*>(st.get());
    REQUIRE(web != nullptr);
    CHECK(web->client_for(cv::location(base + "/a")) == web->client_for(cv::location(base + "/b?x=1")));
    CHECK(web->client_for(cv::location(base + "/a")) != web->client_for(cv::location("http://localhost:" + std::to_string(server.port()) + "/a")));
    for (int i = 0; i < 5; ++i) {
        const cv::slice got = st->read(cv::location(base + "/r" + std::to_string(i)));
        CHECK(std::string(reinterpret_cast<const char*>(got.data()), got.size()) == "/r" + std::to_string(i));
    }
    // A dataset's many small reads of one shard: ranged reads on the same connection.
    const auto object = asio::co_spawn(rt.io_executor(0), st->async_open(cv::location(base + "/shard")), asio::use_future).get();
    for (std::uint64_t at : {0u, 7u, 15u}) {
        const cv::slice got = asio::co_spawn(rt.io_executor(0), object->async_read(at, 3), asio::use_future).get();
        CHECK(std::string(reinterpret_cast<const char*>(got.data()), got.size()) == data.substr(at, 3));
    }
    CHECK(server.requests() == 8);
    CHECK(server.accepts() == 1);
}

TEST_CASE("https shards are read with the source's web client settings: a CA file that cannot be used fails the run, naming it")
{
    cv::runtime rt({.io_threads = 1, .compute_threads = 1});
    auto p = cv::shard::shards(std::vector<cv::shard::shard_ref>{{"https://127.0.0.1:9/a.tar", -1, -1}},
                               {.share = cv::split{}, .http = {.ca_file = "/nonexistent/ca.pem"}});
    try {
        for (const auto& s : p.on(rt)) (void)s;
        FAIL("the run read a shard with TLS settings it cannot use");
    } catch (const cv::error& e) {
        CHECK(std::string(e.what()).find("/nonexistent/ca.pem") != std::string::npos);
    }
}

TEST_CASE("the object source reads local and web objects of one list through one context; a cache serves the second epoch's web objects without a request")
{
    namespace bhttp = boost::beast::http;
    // /o<i>: the body "web object <i>"; /missing: a 404.
    conveyor_test::test_server server([&](conveyor_test::peer& p, const bhttp::request<bhttp::string_body>& req,
                                          std::size_t) -> asio::awaitable<bool> {
        const std::string t(req.target());
        if (t == "/missing") co_return co_await p.write("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
        const std::string body = "web object " + t.substr(2);
        co_return co_await p.write("HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
    });
    temp_dir t;
    {
        std::ofstream(t.path / "local.bin") << "local object";
    }
    const std::string base = "http://127.0.0.1:" + std::to_string(server.port());
    cv::store::object_list list = cv::store::object_list::from_urls(
        {base + "/o0", (t.path / "local.bin").string(), base + "/o1?v=2", base + "/missing", base + "/o2"});
    list.labels = {3, 1, 4, 1, 5};
    const auto shared = std::make_shared<const cv::store::object_list>(list);
    conveyor_test::log_capture cap;
    cv::runtime rt({.io_threads = 2, .compute_threads = 1, .log = cap.sink()});
    const auto ctx = cv::store::make_context({.rt = &rt, .cache = cv::store::cache_options{.dir = (t.path / "cache").string()}});

    std::vector<std::string> seen;
    auto epoch = [&](std::uint64_t e) {
        std::vector<std::string> got;
        auto r = cv::store::objects(shared, {.concurrency = 3, .errors = cv::on_error::skip, .store = ctx}).on(rt).run(e);
        for (auto& b : r) {
            CHECK(b.label == list.labels[b.index]);
            CHECK(b.origin == cv::location(list.objects[b.index].url).printable());
            got.push_back(b.key + "=" + std::string(b.data.view()));
        }
        CHECK(r.stats().skipped.load() == 1);
        return got;
    };
    const std::vector<std::string> want{"o0=web object 0", (t.path / "local.bin").string() + "=local object", "o1=web object 1?v=2",
                                        "o2=web object 2"};
    CHECK(epoch(0) == want);
    CHECK(cap.matching({"conveyor: skipped:", base + "/missing"}).size() == 1); // the skip names the URL
    const std::size_t first = server.requests();
    CHECK(first == 4); // every web object once, the missing one included
    CHECK(epoch(1) == want);
    CHECK(server.requests() == first + 1); // only the missing one asked again: the rest from the cache

    // Without a context, `cache` gives the source's own context that cache: the folder
    // filled above serves the web objects again.
    std::size_t good = 0;
    for (auto& b : cv::store::objects(shared, {.errors = cv::on_error::skip, .cache = cv::store::cache_options{.dir = (t.path / "cache").string()}})
                       .on(rt)) {
        CHECK(b.data.size() > 0);
        ++good;
    }
    CHECK(good == 4);
    CHECK(server.requests() == first + 2); // the missing one only
}

TEST_CASE("the object source refuses a list with labels for some objects only, and a bad URL fails the run naming it")
{
    cv::store::object_list list = cv::store::object_list::from_urls({"/a", "/b"});
    list.labels = {1};
    CHECK_THROWS_WITH_AS(cv::store::objects(list), doctest::Contains("1 labels for 2 objects"), cv::error);
    cv::runtime rt({.io_threads = 1, .compute_threads = 1});
    try {
        for (const auto& b : cv::store::objects(std::vector<std::string>{"ftp://host/x"}).on(rt)) (void)b;
        FAIL("a run read an ftp:// object");
    } catch (const cv::error& e) {
        CHECK(std::string(e.what()).find("ftp://host/x") != std::string::npos);
    }
}

TEST_CASE("the object source takes each epoch's order and share, and merged states resume on another world size, each object once")
{
    temp_dir t;
    std::vector<std::string> urls;
    for (int i = 0; i < 40; ++i) {
        const auto p = t.path / ("f" + std::to_string(i));
        std::ofstream(p) << "object " << i;
        urls.push_back("file://" + p.string());
    }
    cv::runtime rt({.io_threads = 2, .compute_threads = 1});
    const cv::order_options order{.seed = 9, .shuffle = true};
    const std::uint64_t epoch = 3;
    std::vector<cv::progress> states;
    std::set<std::string> used;
    for (std::uint64_t r = 0; r < 2; ++r) {
        auto state = std::make_shared<cv::progress>();
        const cv::split share{.rank = r, .world_size = 2};
        std::vector<std::uint64_t> got;
        for (auto& b : cv::store::objects(urls, {.concurrency = 4, .epochs = {.order = order, .share = share, .resume = state}}).on(rt).run(epoch)) {
            CHECK(b.data.view() == "object " + std::to_string(b.index));
            state->consumed(b);
            CHECK(used.insert(b.key).second);
            got.push_back(b.index);
            if (got.size() == 5 + 6 * r) break;
        }
        const auto share_of = cv::epoch_share(urls.size(), share, epoch, order);
        for (std::size_t k = 0; k < got.size(); ++k) CHECK(got[k] == share_of[k].item);
        states.push_back(cv::progress::from_json(state->to_json()));
    }
    const auto merged = cv::progress::merge(states);
    std::set<std::string> after;
    for (std::uint64_t r = 0; r < 3; ++r) {
        auto state = std::make_shared<cv::progress>(merged);
        for (auto& b : cv::store::objects(urls, {.concurrency = 4, .epochs = {.order = order, .share = cv::split{.rank = r, .world_size = 3}, .resume = state}})
                           .on(rt)
                           .run(epoch)) {
            CHECK_FALSE(used.contains(b.key));
            CHECK(after.insert(b.key).second);
        }
    }
    CHECK(used.size() + after.size() == urls.size());
}
