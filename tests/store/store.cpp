// Tests of conveyor/store/*.hpp without a server: the map from locations to stores, the
// file store (read whole, ranges, chunks, listing, writing beside the name and renaming),
// the web store's refusals, and one shard list given as file:// URLs and as plain paths.
#include <conveyor/core/error.hpp>
#include <conveyor/core/location.hpp>
#include <conveyor/shard/source.hpp>
#include <conveyor/shard/writer.hpp>
#include <conveyor/store/file.hpp>
#include <conveyor/store/open.hpp>

#include "support.hpp"

#include "../support/common.hpp"

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>

#include <unistd.h>

#include <filesystem>
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
        (void)cv::store::open_store(cv::location("s3://b/a.tar"), {.s3_setting = "source_options::s3"});
        FAIL("an s3:// store was opened without a client");
    } catch (const cv::error& e) {
        CHECK(std::string(e.what()).find("needs an S3 client (source_options::s3)") != std::string::npos);
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
    o.share = cv::shard::split{};
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
