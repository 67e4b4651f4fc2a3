// Tests of conveyor/file/detail/uring.hpp: the io_uring ring on an Asio io_context (stat, linked
// small reads into direct slots, chunked large reads, the slot backlog, group cancellation,
// shutdown) and the per-context ring service.
#include "../support.hpp"

#include <conveyor/core/buffer.hpp>
#include <conveyor/file/error.hpp>
#include <conveyor/file/detail/uring.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/bind_executor.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <system_error>

namespace asio = boost::asio;
namespace cv = conveyor;
namespace cf = conveyor::file;
namespace cfd = conveyor::file::detail;
namespace fs = std::filesystem;
using ftest::temp_dir;
using ftest::write_file;
using namespace std::chrono_literals;

namespace {

/// What one asynchronous ring operation completed with.
struct result {
    int calls = 0;
    std::error_code ec;
    std::uint64_t n = 0; ///< a size, or the bytes read
    std::string data;    ///< the bytes read
};

/// A handler that records a size (async_file_size) or the buffer a read hands back.
auto into(result& r)
{
    return [&r](std::error_code ec, auto x) {
        ++r.calls;
        r.ec = ec;
        if constexpr (std::is_same_v<decltype(x), cv::buffer>) {
            r.n = x.size();
            r.data = std::string(x.view());
        } else {
            r.n = x;
        }
    };
}

/// A pooled buffer of `n` bytes to read into.
cv::buffer bytes(std::size_t n)
{
    static cv::buffer_pool pool;
    return pool.acquire(n);
}

/// A file named by path, as given.
cfd::file_ref at(std::string path) { return {nullptr, std::move(path), false}; }

/// Runs `io` on this thread until `pred()` holds (bounded: false if it never does).
template <class Pred>
bool drive(asio::io_context& io, Pred pred, std::chrono::seconds limit = ftest::generous)
{
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!pred()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        if (io.stopped()) io.restart();
        io.run_one_for(50ms);
    }
    return true;
}

} // namespace

// ==== the ring =================================================================================

TEST_CASE("uring async_file_size gives a regular file's size and refuses what is not one")
{
    REQUIRE_KERNEL_URING();
    temp_dir d;
    write_file(d / "empty", "");
    write_file(d / "five", "12345");
    write_file(d / "mib", ftest::content(1, 1 << 20));
    fs::create_directory(d / "dir");
    REQUIRE(::mkfifo((d / "fifo").c_str(), 0600) == 0);
    fs::create_symlink(d / "five", d / "link-to-five");

    asio::io_context io;
    cfd::uring ring(io, {});
    REQUIRE_MESSAGE(ring.available(), ring.unavailable_reason());
    const std::pair<const char*, std::uint64_t> regular[] = {{"empty", 0}, {"five", 5}, {"mib", 1 << 20}, {"link-to-five", 5}};
    result res[std::size(regular)];
    for (std::size_t i = 0; i < std::size(regular); ++i) ring.async_file_size(at((d / regular[i].first).string()), 1, into(res[i]));
    result dir, fifo, missing;
    ring.async_file_size(at((d / "dir").string()), 1, into(dir));
    ring.async_file_size(at((d / "fifo").string()), 1, into(fifo));
    ring.async_file_size(at((d / "missing").string()), 1, into(missing));
    REQUIRE(drive(io, [&] { return missing.calls && fifo.calls && dir.calls && res[3].calls; }));
    for (std::size_t i = 0; i < std::size(regular); ++i) {
        INFO("file: " << std::string(regular[i].first));
        CHECK(res[i].calls == 1);
        CHECK_FALSE(res[i].ec);
        CHECK(res[i].n == regular[i].second);
    }
    CHECK(dir.ec == cf::errc::not_a_regular_file);
    CHECK(fifo.ec == cf::errc::not_a_regular_file);
    CHECK(missing.ec == std::errc::no_such_file_or_directory);
    CHECK(ring.in_flight() == 0);
}

TEST_CASE("uring async_read_small reads a file whole with one statx/open/read/close chain")
{
    REQUIRE_KERNEL_URING();
    temp_dir d;
    const auto text = ftest::content(7, 3000);
    write_file(d / "f", text);
    write_file(d / "empty", "");
    fs::create_directory(d / "dir");

    asio::io_context io;
    cfd::uring ring(io, {.entries = 8, .max_files = 4});
    REQUIRE_MESSAGE(ring.available(), ring.unavailable_reason());
    result r_whole, r_part, r_empty, r_dir, r_missing;
    ring.async_read_small(at((d / "f").string()), bytes(3001), 1, into(r_whole)); // one more: at EOF, fewer
    ring.async_read_small(at((d / "f").string()), bytes(100), 1, into(r_part));
    ring.async_read_small(at((d / "empty").string()), bytes(1), 1, into(r_empty));
    ring.async_read_small(at((d / "dir").string()), bytes(16), 1, into(r_dir));
    ring.async_read_small(at((d / "missing").string()), bytes(16), 1, into(r_missing));
    CHECK(ring.in_flight() == 5); // four in slots, one waiting for a slot
    REQUIRE(drive(io, [&] { return r_whole.calls && r_part.calls && r_empty.calls && r_dir.calls && r_missing.calls; }));
    CHECK_FALSE(r_whole.ec);
    CHECK(r_whole.n == 3000);
    CHECK(r_whole.data == text);
    CHECK_FALSE(r_part.ec);
    CHECK(r_part.n == 100);
    CHECK(r_part.data == text.substr(0, 100));
    CHECK_FALSE(r_empty.ec);
    CHECK(r_empty.n == 0);
    CHECK(r_dir.ec == cf::errc::not_a_regular_file); // the statx at the head of the chain says so
    CHECK(r_missing.ec == std::errc::no_such_file_or_directory);
    for (const auto* r : {&r_whole, &r_part, &r_empty, &r_dir, &r_missing}) CHECK(r->calls == 1);
    CHECK(ring.in_flight() == 0);
}

TEST_CASE("uring completes each read through its handler's executor: the ring's context inline, a strand in the strand, another context there")
{
    // A handler that completes on the ring's own context is called directly from the reap
    // (uring::completes_here); anything else must still go through its executor.
    REQUIRE_KERNEL_URING();
    temp_dir d;
    write_file(d / "f", ftest::content(3, 500));
    const auto f = (d / "f").string();

    asio::io_context io, other;
    cfd::uring ring(io, {.entries = 8, .max_files = 4});
    REQUIRE_MESSAGE(ring.available(), ring.unavailable_reason());
    auto strand = asio::make_strand(io);
    struct seen {
        int calls = 0;
        std::size_t n = 0;
        bool on_io = false, in_strand = false, on_other = false;
    } plain, with_io, stranded, elsewhere, sized;
    auto record = [&](seen& s) {
        return [&](std::error_code ec, auto x) {
            CHECK_FALSE(ec);
            ++s.calls;
            if constexpr (std::is_same_v<decltype(x), cv::buffer>) s.n = x.size();
            else s.n = static_cast<std::size_t>(x);
            s.on_io = io.get_executor().running_in_this_thread();
            s.in_strand = strand.running_in_this_thread();
            s.on_other = other.get_executor().running_in_this_thread();
        };
    };
    ring.async_read_small(at(f), bytes(501), 1, record(plain));
    ring.async_read_small(at(f), bytes(501), 1, asio::bind_executor(io.get_executor(), record(with_io)));
    ring.async_read_small(at(f), bytes(501), 1, asio::bind_executor(strand, record(stranded)));
    ring.async_read_small(at(f), bytes(501), 1, asio::bind_executor(other.get_executor(), record(elsewhere)));
    ring.async_file_size(at(f), 1, record(sized));
    REQUIRE(drive(io, [&] { return plain.calls && with_io.calls && stranded.calls && sized.calls && ring.in_flight() == 0; }));
    for (const seen* s : {&plain, &with_io, &stranded, &sized}) {
        CHECK(s->calls == 1);
        CHECK(s->n == 500);
        CHECK(s->on_io);
        CHECK_FALSE(s->on_other);
    }
    CHECK(stranded.in_strand);
    CHECK_FALSE(plain.in_strand);
    // The read bound to the other context is done, but its handler waits for that context.
    CHECK(elsewhere.calls == 0);
    other.run();
    CHECK(elsewhere.calls == 1);
    CHECK(elsewhere.n == 500);
    CHECK(elsewhere.on_other);
    CHECK_FALSE(elsewhere.on_io);
}

TEST_CASE("uring: a cancellation through a handler's slot abandons that read alone, in flight or waiting for a file slot; once it has completed, nothing")
{
    REQUIRE_KERNEL_URING();
    temp_dir d;
    const auto text = ftest::content(5, 1000);
    write_file(d / "f", text);
    const auto f = (d / "f").string();

    asio::io_context io;
    cfd::uring ring(io, {.entries = 8, .max_files = 1});
    REQUIRE_MESSAGE(ring.available(), ring.unavailable_reason());
    asio::cancellation_signal sig_flight, sig_waiting, sig_late;
    result flight, waiting, late, plain;
    ring.async_read_small(at(f), bytes(1001), 1, asio::bind_cancellation_slot(sig_flight.slot(), into(flight))); // the one slot
    ring.async_read_small(at(f), bytes(1001), 1, asio::bind_cancellation_slot(sig_waiting.slot(), into(waiting)));
    ring.async_read_small(at(f), bytes(1001), 1, asio::bind_cancellation_slot(sig_late.slot(), into(late)));
    ring.async_read_small(at(f), bytes(1001), 1, into(plain));
    CHECK(ring.in_flight() == 4); // one in the slot, three waiting for it
    sig_flight.emit(asio::cancellation_type::terminal);
    sig_waiting.emit(asio::cancellation_type::terminal);
    REQUIRE(drive(io, [&] { return flight.calls && waiting.calls && late.calls && plain.calls && ring.in_flight() == 0; }));
    CHECK(flight.ec == std::errc::operation_canceled);
    CHECK(waiting.ec == std::errc::operation_canceled);
    for (const result* r : {&late, &plain}) {
        CHECK_FALSE(r->ec);
        CHECK(r->data == text);
    }
    // Completed: a cancellation now reaches nobody (and nothing that is gone).
    sig_late.emit(asio::cancellation_type::terminal);
    sig_flight.emit(asio::cancellation_type::terminal);
    io.restart();
    io.poll();
    for (const result* r : {&flight, &waiting, &late, &plain}) CHECK(r->calls == 1);
    CHECK(ring.in_flight() == 0);
}

TEST_CASE("uring gives back the file slot of a failed open")
{
    REQUIRE_KERNEL_URING();
    temp_dir d;
    write_file(d / "good", "good bytes");
    asio::io_context io;
    cfd::uring ring(io, {.entries = 16, .max_files = 2});
    REQUIRE(ring.available());
    std::vector<result> bad(40), good(10);
    for (std::size_t i = 0; i < bad.size(); ++i)
        ring.async_read_small(at((d / ("missing" + std::to_string(i))).string()), bytes(64), 1, into(bad[i]));
    REQUIRE(drive(io, [&] { return std::all_of(bad.begin(), bad.end(), [](auto& r) { return r.calls > 0; }); }));
    for (auto& r : bad) CHECK(r.ec == std::errc::no_such_file_or_directory);
    for (std::size_t i = 0; i < good.size(); ++i)
        ring.async_read_small(at((d / "good").string()), bytes(64), 1, into(good[i]));
    REQUIRE_MESSAGE(drive(io, [&] { return std::all_of(good.begin(), good.end(), [](auto& r) { return r.calls > 0; }); }),
                    "reads after 40 failed opens never completed: file slots leaked");
    for (std::size_t i = 0; i < good.size(); ++i) {
        CHECK_FALSE(good[i].ec);
        CHECK(good[i].data == "good bytes");
    }
    CHECK(ring.in_flight() == 0);
}

TEST_CASE("uring reads beyond its file table wait for a slot, then all complete")
{
    REQUIRE_KERNEL_URING();
    temp_dir d;
    const auto t = ftest::make_tree(d.path(), 300, 3, [](std::size_t i) { return 1 + i * 13; });
    asio::io_context io;
    cfd::uring ring(io, {.entries = 32, .max_files = 4});
    REQUIRE(ring.available());
    std::vector<result> res(t.rel.size());
    for (std::size_t i = 0; i < t.rel.size(); ++i)
        ring.async_read_small(at((d / t.rel[i]).string()), bytes(4096), 1, into(res[i]));
    CHECK(ring.in_flight() == 300);
    REQUIRE(drive(io, [&] { return std::all_of(res.begin(), res.end(), [](auto& r) { return r.calls > 0; }); }));
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < t.rel.size(); ++i)
        if (res[i].ec || res[i].calls != 1 || res[i].data != t.contents[i]) ++wrong;
    CHECK(wrong == 0);
    CHECK(ring.in_flight() == 0);
}

TEST_CASE("uring async_read_large reads in chunks, several at once, and stops at the end of the file")
{
    REQUIRE_KERNEL_URING();
    temp_dir d;
    const std::size_t size = (1 << 20) + 3;
    const auto text = ftest::content(11, size);
    write_file(d / "big", text);
    fs::create_directory(d / "dir");
    asio::io_context io;
    cfd::uring ring(io, {});
    REQUIRE(ring.available());

    struct read_case {
        std::uint64_t len;
        std::uint32_t chunk;
        unsigned parallel;
        std::uint64_t want;
    };
    const read_case cases[] = {
        {size, 64 * 1024, 1, size},         {size, 64 * 1024, 4, size},  {size, 64 * 1024, 16, size},
        {size, 100, 8, size},                // chunk clamped to 4096
        {size + 200000, 64 * 1024, 4, size}, // asks past the end: fewer bytes
        {1000, 64 * 1024, 4, 1000},          // less than one chunk
        {0, 4096, 4, 0},
    };
    for (const auto& c : cases) {
        CAPTURE(c.len);
        CAPTURE(c.chunk);
        CAPTURE(c.parallel);
        result r;
        ring.async_read_large(at((d / "big").string()), bytes(c.len), c.chunk, c.parallel, 1, into(r));
        REQUIRE(drive(io, [&] { return r.calls > 0; }));
        CHECK(r.calls == 1);
        CHECK_FALSE(r.ec);
        CHECK(r.n == c.want);
        CHECK(r.data == text.substr(0, static_cast<std::size_t>(c.want)));
        CHECK(ring.in_flight() == 0);
    }
    // A FIFO that a writer holds open but never writes to: no read of it may be started.
    REQUIRE(::mkfifo((d / "fifo").c_str(), 0600) == 0);
    const int writer = ::open((d / "fifo").c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    REQUIRE(writer >= 0);
    result missing, dir, fifo;
    ring.async_read_large(at((d / "missing").string()), bytes(1 << 16), 4096, 4, 1, into(missing));
    ring.async_read_large(at((d / "dir").string()), bytes(1 << 16), 4096, 4, 1, into(dir));
    ring.async_read_large(at((d / "fifo").string()), bytes(1 << 16), 4096, 4, 1, into(fifo));
    const bool done = drive(io, [&] { return missing.calls && dir.calls && fifo.calls; }, ftest::known_hang);
    ::close(writer);
    REQUIRE(done);
    CHECK(missing.ec == std::errc::no_such_file_or_directory);
    CHECK(dir.ec == cf::errc::not_a_regular_file);
    CHECK(fifo.ec == cf::errc::not_a_regular_file);
    CHECK(ring.in_flight() == 0);
}

TEST_CASE("uring cancel_group cancels that group's queued reads and leaves other groups alone")
{
    REQUIRE_KERNEL_URING();
    temp_dir d;
    const auto t = ftest::make_tree(d.path(), 60, 1, [](std::size_t i) { return 10 + i; });
    asio::io_context io;
    cfd::uring ring(io, {.entries = 16, .max_files = 1});
    REQUIRE(ring.available());
    std::vector<result> res(60);
    // Group 8 first: its first read takes the only slot; everything else waits for it.
    for (std::size_t i = 0; i < 10; ++i) ring.async_read_small(at((d / t.rel[i]).string()), bytes(128), 8, into(res[i]));
    for (std::size_t i = 10; i < 60; ++i) ring.async_read_small(at((d / t.rel[i]).string()), bytes(128), 7, into(res[i]));
    ring.cancel_group(7);
    REQUIRE(drive(io, [&] { return std::all_of(res.begin(), res.end(), [](auto& r) { return r.calls > 0; }); }));
    for (std::size_t i = 0; i < 10; ++i) {
        CAPTURE(i);
        CHECK(res[i].calls == 1);
        CHECK_FALSE(res[i].ec);
        CHECK(res[i].data == t.contents[i]);
    }
    for (std::size_t i = 10; i < 60; ++i) {
        CAPTURE(i);
        CHECK(res[i].calls == 1);
        CHECK(res[i].ec == std::errc::operation_canceled);
    }
    CHECK(ring.in_flight() == 0);
    // Cancelling a group with nothing in flight is harmless, and the ring still reads.
    ring.cancel_group(7);
    result after;
    ring.async_read_small(at((d / t.rel[0]).string()), bytes(128), 7, into(after));
    REQUIRE(drive(io, [&] { return after.calls > 0; }));
    CHECK_FALSE(after.ec);
    CHECK(after.data == t.contents[0]);
}

TEST_CASE("destroying a ring with reads in flight destroys their handlers without calling them")
{
    REQUIRE_KERNEL_URING();
    temp_dir d;
    const auto t = ftest::make_tree(d.path(), 40, 1, [](std::size_t i) { return 100000 + i; });
    auto token = std::make_shared<int>(0);
    int calls = 0;
    {
        asio::io_context io;
        auto ring = std::make_unique<cfd::uring>(io, cfd::uring_options{.entries = 16, .max_files = 8});
        REQUIRE(ring->available());
        for (std::size_t i = 0; i < 40; ++i) {
            auto h = [token, &calls](std::error_code, cv::buffer) { ++calls; };
            if (i % 2) ring->async_read_small(at((d / t.rel[i]).string()), bytes(200000), 1, h);
            else ring->async_read_large(at((d / t.rel[i]).string()), bytes(100000 + i), 16384, 4, 1, h);
        }
        CHECK(token.use_count() == 41);
        // Let some of them get going (submitted, some completed), then pull the ring away.
        io.poll_one();
        const int before = calls;
        ftest::must_finish("destroying a busy ring", [&] { ring.reset(); });
        CHECK(calls == before); // at shutdown handlers are destroyed, not resumed
        // The io_context is destroyed without running again: what the ring posted is dropped.
    }
    CHECK(token.use_count() == 1); // every handler was destroyed: nothing leaked
}

TEST_CASE("uring_service gives one ring per io_context, created on first use with the options given then")
{
    REQUIRE_KERNEL_URING();
    asio::io_context a, b;
    auto& ra = asio::use_service<cfd::uring_service>(a).get(a, {.entries = 8, .max_files = 3});
    auto& ra2 = asio::use_service<cfd::uring_service>(a).get(a, {.entries = 64, .max_files = 64});
    auto& rb = asio::use_service<cfd::uring_service>(b).get(b, {});
    CHECK(&ra == &ra2);
    CHECK(&ra != &rb);
    CHECK(&ra.context() == &a);
    CHECK(&rb.context() == &b);
    CHECK(ra.available());
    CHECK(rb.available());
}
