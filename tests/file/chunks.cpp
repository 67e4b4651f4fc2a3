// Tests of conveyor/file/chunks.hpp: ranged_file (reads at any offset, many at once, past
// the end, errors naming path and offset) and read_chunks (chunked, prefetched reads of a
// file with backpressure, offset/length, errors, cancellation), with both file backends.
#include "support.hpp"

#include <conveyor/core/chunks.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/file/chunks.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace asio = boost::asio;
namespace cv = conveyor;
namespace cf = conveyor::file;
namespace fs = std::filesystem;
using namespace ftest;

namespace {

/// What `aw` gave, or a copy of the conveyor::error it threw, made on the lane.
template <class T>
asio::awaitable<std::pair<std::optional<T>, std::optional<cv::error>>> caught(asio::awaitable<T> aw)
{
    std::pair<std::optional<T>, std::optional<cv::error>> out;
    try {
        out.first.emplace(co_await std::move(aw));
    } catch (const cv::error& e) {
        out.second.emplace(e);
    }
    co_return out;
}

/// The error `aw` ends with, as a value (none if it returns): for a future read on another
/// thread (see run_on_lane).
template <class T>
asio::awaitable<std::error_code> error_of(asio::awaitable<T> aw)
{
    std::error_code ec;
    try {
        (void)co_await std::move(aw);
    } catch (const std::system_error& e) {
        ec = e.code();
    }
    co_return ec;
}

/// Runs `aw` on lane 0 of `rt` and waits for it (bounded by the test's patience). A
/// conveyor::error is passed as a value and thrown again here: an exception_ptr handed
/// between threads through a future is reference-counted inside libstdc++, where
/// ThreadSanitizer cannot see it, and would be reported as a race.
template <class T>
T run_on_lane(cv::runtime& rt, asio::awaitable<T> aw)
{
    auto fut = asio::co_spawn(rt.io_executor(0), caught(std::move(aw)), asio::use_future);
    REQUIRE_MESSAGE(fut.wait_for(generous) == std::future_status::ready, "the coroutine did not finish (hang)");
    auto got = fut.get();
    if (got.second) throw *got.second;
    return std::move(*got.first);
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

namespace {

/// Every chunk of `r`, in order.
asio::awaitable<std::vector<cv::chunk>> drain(cv::chunk_reader& r)
{
    std::vector<cv::chunk> out;
    while (auto c = co_await r.async_next()) out.push_back(std::move(*c));
    co_return out;
}

/// Every chunk of `r` copied out and let go of at once; `count` says how many.
asio::awaitable<std::string> drain_dropping(cv::chunk_reader& r, std::uint64_t start, std::size_t& count)
{
    std::string out;
    std::uint64_t at = start;
    count = 0;
    while (auto c = co_await r.async_next()) {
        if (c->offset != at) throw std::runtime_error("chunk at " + std::to_string(c->offset) + ", expected " + std::to_string(at));
        at += c->bytes.size();
        out += c->bytes.view();
        ++count;
    }
    co_return out;
}

asio::awaitable<std::optional<cv::chunk>> next_of(cv::chunk_reader& r)
{
    co_return co_await r.async_next();
}

/// The chunks' bytes end to end, checking they are contiguous from `start`.
std::string joined(const std::vector<cv::chunk>& cs, std::uint64_t start, std::size_t chunk_size)
{
    std::string s;
    std::uint64_t at = start;
    for (const auto& c : cs) {
        CHECK(c.offset == at);
        CHECK(c.bytes.size() <= chunk_size);
        CHECK_FALSE(c.bytes.empty());
        at += c.bytes.size();
        s += c.bytes.view();
    }
    return s;
}

/// Polls `pred` (on the test thread) until it holds or `limit` passes.
template <class Pred>
bool soon(Pred pred, std::chrono::milliseconds limit = std::chrono::milliseconds(5000))
{
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!pred()) {
        if (std::chrono::steady_clock::now() > until) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return true;
}

} // namespace

TEST_CASE("read_chunks reads a file in chunks of chunk_size, the last one shorter, every byte in place")
{
    temp_dir dir;
    for (const auto& b : backends()) {
        CAPTURE(b.name);
        cv::runtime rt({.io_threads = 1, .backend = b.backend});
        for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, std::size_t{4096}, std::size_t{3 * 4096 + 17},
                                 std::size_t{300'001}}) {
            CAPTURE(size);
            const std::string data = content(size, size);
            const auto p = dir / ("f" + std::to_string(size));
            write_file(p, data);
            auto r = cf::read_chunks(rt, p.string(), {.chunk_size = 4096, .chunks_in_flight = 3});
            CHECK(r->url() == p.string());
            CHECK(r->size() == -1); // not open yet
            auto cs = run_on_lane(rt, drain(*r));
            CHECK(r->size() == static_cast<std::int64_t>(size));
            CHECK(cs.size() == (size + 4095) / 4096);
            CHECK(joined(cs, 0, 4096) == data);
            // After the end: nothing more, again.
            CHECK_FALSE(run_on_lane(rt, next_of(*r)).has_value());
        }
    }
}

TEST_CASE("read_chunks honours offset and length, clamped to the end of the file")
{
    temp_dir dir;
    const std::string data = content(21, 100'000);
    write_file(dir / "f.bin", data);
    cv::runtime rt({.io_threads = 1});
    const auto p = (dir / "f.bin").string();
    {
        auto r = cf::read_chunks(rt, p, {.chunk_size = 8192, .chunks_in_flight = 2, .offset = 5000, .length = 30'000});
        CHECK(joined(run_on_lane(rt, drain(*r)), 5000, 8192) == data.substr(5000, 30'000));
        CHECK(r->size() == 100'000);
    }
    {
        auto r = cf::read_chunks(rt, p, {.chunk_size = 8192, .offset = 90'000, .length = 1'000'000});
        CHECK(joined(run_on_lane(rt, drain(*r)), 90'000, 8192) == data.substr(90'000));
    }
    {
        auto r = cf::read_chunks(rt, p, {.offset = 100'000});
        CHECK(run_on_lane(rt, drain(*r)).empty());
        auto r2 = cf::read_chunks(rt, p, {.offset = 5'000'000});
        CHECK(run_on_lane(rt, drain(*r2)).empty());
    }
}

TEST_CASE("read_chunks reads chunks_in_flight chunks ahead of a consumer that stops, never more")
{
    temp_dir dir;
    const std::size_t chunk = 64 * 1024;
    const std::string data = content(22, 40 * chunk + 5);
    write_file(dir / "f.bin", data);
    for (const auto& b : backends()) {
        CAPTURE(b.name);
        cv::runtime rt({.io_threads = 1, .backend = b.backend, .memory_limit = cv::memory_budget::unlimited});
        auto r = cf::read_chunks(rt, (dir / "f.bin").string(), {.chunk_size = chunk, .chunks_in_flight = 3});
        auto first = run_on_lane(rt, next_of(*r));
        REQUIRE(first);
        // The consumer holds chunk 0 and stops: chunks 1-3 are read ahead, and nothing else.
        CHECK(soon([&] { return rt.memory().in_use() == 4 * chunk; }));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        CHECK(rt.memory().in_use() == 4 * chunk);
        CHECK(rt.memory().peak() == 4 * chunk);
        first.reset();
        CHECK(rt.memory().in_use() == 3 * chunk); // the chunk's storage died: its bytes are back
        // A consumer that drops each chunk at once: the reads ahead stay at three.
        std::size_t count = 0;
        auto rest = run_on_lane(rt, drain_dropping(*r, chunk, count));
        CHECK(count == 40);
        CHECK(rt.memory().peak() == 4 * chunk);
        CHECK(rest == data.substr(chunk));
        CHECK(rt.memory().in_use() == 0);
    }
}

TEST_CASE("read_chunks waits for the memory budget and still reads every byte when it holds fewer chunks than chunks_in_flight")
{
    temp_dir dir;
    const std::size_t chunk = 16 * 1024;
    const std::string data = content(23, 50 * chunk + 100);
    write_file(dir / "f.bin", data);
    cv::runtime rt({.io_threads = 1, .memory_limit = 2 * chunk});
    auto r = cf::read_chunks(rt, (dir / "f.bin").string(), {.chunk_size = chunk, .chunks_in_flight = 8});
    std::string got;
    std::uint64_t at = 0;
    while (auto c = run_on_lane(rt, next_of(*r))) {
        CHECK(c->offset == at);
        at += c->bytes.size();
        got += c->bytes.view();
    }
    CHECK(got == data);
    CHECK(rt.memory().peak() <= 2 * chunk);
    CHECK(rt.memory().waits() > 0);
    CHECK(soon([&] { return rt.memory().in_use() == 0; }));
}

TEST_CASE("read_chunks errors name the path and the offset: a missing file, a file that shrank")
{
    temp_dir dir;
    cv::runtime rt({.io_threads = 1});
    const auto missing = (dir / "missing.bin").string();
    auto r = cf::read_chunks(rt, missing);
    try {
        (void)run_on_lane(rt, next_of(*r));
        FAIL("read a missing file");
    } catch (const cv::error& e) {
        CHECK(e.code() == std::errc::no_such_file_or_directory);
        CHECK(e.where() == missing);
    }
    // Failed for good: the same error again.
    CHECK_THROWS_AS((void)run_on_lane(rt, next_of(*r)), cv::error);

    const std::size_t chunk = 4096;
    const auto p = dir / "shrinks.bin";
    write_file(p, content(24, 10 * chunk));
    auto s = cf::read_chunks(rt, p.string(), {.chunk_size = chunk, .chunks_in_flight = 1});
    REQUIRE(run_on_lane(rt, next_of(*s))); // open, chunk 0 (chunk 1 is read ahead)
    fs::resize_file(p, 3 * chunk + 10);
    std::optional<cv::error> err;
    try {
        while (run_on_lane(rt, next_of(*s))) {
        }
    } catch (const cv::error& e) {
        err = e;
    }
    REQUIRE(err);
    CHECK(err->code() == cf::errc::file_shrank);
    CHECK(err->where() == p.string());
    CHECK(err->offset() == static_cast<std::int64_t>(3 * chunk + 10));
}

TEST_CASE("read_chunks: destroying the reader mid-file cancels its reads, and a waiting async_next can be cancelled")
{
    temp_dir dir;
    const std::size_t chunk = 256 * 1024;
    write_file(dir / "f.bin", content(25, 64 * chunk));
    for (const auto& b : backends()) {
        CAPTURE(b.name);
        cv::runtime rt({.io_threads = 1, .backend = b.backend, .memory_limit = 4 * chunk});
        {
            auto r = cf::read_chunks(rt, (dir / "f.bin").string(), {.chunk_size = chunk, .chunks_in_flight = 4});
            REQUIRE(run_on_lane(rt, next_of(*r)));
            // destroyed here, on the test thread, with reads (or budget waits) in flight
        }
        CHECK(soon([&] { return rt.memory().in_use() == 0; }));

        // A read waiting for budget room that never comes, until its awaiter is cancelled.
        auto hog = rt.memory().try_acquire(4 * chunk);
        REQUIRE(hog);
        auto r = cf::read_chunks(rt, (dir / "f.bin").string(), {.chunk_size = chunk, .chunks_in_flight = 2});
        asio::cancellation_signal sig;
        auto fut = asio::co_spawn(rt.io_executor(0), error_of(next_of(*r)), asio::bind_cancellation_slot(sig.slot(), asio::use_future));
        CHECK(fut.wait_for(std::chrono::milliseconds(100)) == std::future_status::timeout);
        asio::post(rt.io_executor(0), [&] { sig.emit(asio::cancellation_type::terminal); });
        REQUIRE(fut.wait_for(generous) == std::future_status::ready);
        const std::error_code ec = fut.get();
        CHECK_MESSAGE(ec, "a cancelled async_next returned");
        CHECK(ec == std::errc::operation_canceled);
        r.reset();
        hog.reset();
        CHECK(soon([&] { return rt.memory().in_use() == 0; }));
    }
}
