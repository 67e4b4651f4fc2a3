// Tests of conveyor/file/chunks.hpp: ranged_file (reads at any offset, many at once, past
// the end, errors naming path and offset) and read_chunks (chunked, prefetched reads of a
// file with backpressure, offset/length, errors, cancellation), with both file backends.
#include "support.hpp"

#include <conveyor/core/chunks.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/file/chunks.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <algorithm>
#include <vector>

namespace asio = boost::asio;
namespace cv = conveyor;
namespace cf = conveyor::file;
namespace fs = std::filesystem;
using namespace ftest;

namespace {

/// Runs `aw` on lane 0 of `rt` and waits for it (bounded by the test's patience).
template <class T>
T run_on_lane(cv::runtime& rt, asio::awaitable<T> aw)
{
    auto fut = asio::co_spawn(rt.io_executor(0), std::move(aw), asio::use_future);
    REQUIRE_MESSAGE(fut.wait_for(generous) == std::future_status::ready, "the coroutine did not finish (hang)");
    return fut.get();
}

/// Reads ranges of `f` at once on lane 0 (all started before any is awaited); returns
/// them in order.
std::vector<std::string> read_many(cv::runtime& rt, const cf::ranged_file& f, const std::vector<std::uint64_t>& offsets,
                                   std::size_t len)
{
    std::vector<std::future<cv::buffer>> futs;
    for (auto off : offsets) futs.push_back(asio::co_spawn(rt.io_executor(0), f.async_read(off, len), asio::use_future));
    std::vector<std::string> out;
    for (auto& fu : futs) {
        REQUIRE_MESSAGE(fu.wait_for(generous) == std::future_status::ready, "a read did not finish (hang)");
        out.emplace_back(fu.get().view());
    }
    return out;
}

asio::awaitable<cv::buffer> read_one(cf::ranged_file f, std::uint64_t off, std::size_t len)
{
    co_return co_await f.async_read(off, len);
}

} // namespace

TEST_CASE("ranged_file reads many ranges at once, each with exactly its bytes, on both backends")
{
    temp_dir dir;
    const std::string data = content(11, 3 * 1024 * 1024 + 123);
    write_file(dir / "f.bin", data);
    for (const auto& b : backends()) {
        CAPTURE(b.name);
        cv::runtime rt({.io_threads = 2, .backend = b.backend});
        cf::ranged_file f(rt, (dir / "f.bin").string());
        CHECK(f.size() == data.size());
        CHECK(f.path() == (dir / "f.bin").string());
        std::vector<std::uint64_t> offsets;
        for (std::uint64_t i = 0; i < 64; ++i) offsets.push_back((i * 48'611) % (data.size() - 70'000));
        auto got = read_many(rt, f, offsets, 70'000);
        REQUIRE(got.size() == offsets.size());
        for (std::size_t i = 0; i < offsets.size(); ++i) {
            CAPTURE(offsets[i]);
            CHECK(got[i] == data.substr(offsets[i], 70'000));
        }
        // Also awaited off the I/O threads: it hops to one.
        auto fut = asio::co_spawn(rt.compute_executor(), read_one(f, 5, 10), asio::use_future);
        CHECK(std::string(fut.get().view()) == data.substr(5, 10));
    }
}

TEST_CASE("ranged_file reads past the end give the bytes up to the end, and none from the end on")
{
    temp_dir dir;
    const std::string data = content(12, 10'000);
    write_file(dir / "f.bin", data);
    for (const auto& b : backends()) {
        CAPTURE(b.name);
        cv::runtime rt({.io_threads = 1, .backend = b.backend});
        cf::ranged_file f(rt, (dir / "f.bin").string());
        auto tail = run_on_lane(rt, read_one(f, 9'000, 5'000));
        CHECK(tail.size() == 1'000);
        CHECK(std::string(tail.view()) == data.substr(9'000));
        CHECK(run_on_lane(rt, read_one(f, 10'000, 100)).size() == 0);
        CHECK(run_on_lane(rt, read_one(f, 1'000'000, 100)).size() == 0);
        CHECK(run_on_lane(rt, read_one(f, 0, 0)).size() == 0);
    }
}

TEST_CASE("ranged_file refuses a missing file and a directory, naming the path")
{
    temp_dir dir;
    cv::runtime rt({.io_threads = 1});
    const std::string missing = (dir / "nope.bin").string();
    try {
        cf::ranged_file f(rt, missing);
        FAIL("opened a missing file");
    } catch (const cv::error& e) {
        CHECK(e.code() == std::errc::no_such_file_or_directory);
        CHECK(e.where() == missing);
        CHECK(std::string(e.what()).find(missing) != std::string::npos);
    }
    try {
        auto f = run_on_lane(rt, cf::ranged_file::async_open(rt, dir.path().string()));
        FAIL("opened a directory");
    } catch (const cv::error& e) {
        CHECK(e.code() == cf::errc::not_a_regular_file);
        CHECK(e.where() == dir.path().string());
    }
}

TEST_CASE("ranged_file read errors name the path and the offset")
{
    // A directory opened O_RDONLY reads with EISDIR: the simplest read that fails.
    temp_dir dir;
    write_file(dir / "f.bin", "x");
    for (const auto& b : backends()) {
        CAPTURE(b.name);
        cv::runtime rt({.io_threads = 1, .backend = b.backend});
        // /proc/self/mem at offset 0 is unmapped: the read fails with EIO, and it is a
        // regular file by its mode.
        cf::ranged_file f(rt, "/proc/self/mem");
        try {
            (void)run_on_lane(rt, read_one(f, 0, 4096));
            FAIL("read unmapped memory");
        } catch (const cv::error& e) {
            CHECK(e.where() == "/proc/self/mem");
            CHECK(e.offset() == 0);
            CHECK(std::string(e.what()).find("/proc/self/mem") != std::string::npos);
        }
    }
}
