// Tests of conveyor/core/metrics.hpp: per-stage counts, bytes, busy / starved / blocked
// time, queue occupancy, source requests and latency, snapshots while a run goes, the
// periodic callback, and the bottleneck helper.
#include "support.hpp"

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/metrics.hpp>
#include <conveyor/core/source.hpp>
#include <conveyor/core/stages.hpp>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace asio = boost::asio;
namespace cv = conveyor;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> names_of(const cv::stats_snapshot& s)
{
    std::vector<std::string> v;
    for (const auto& st : s.stages) v.push_back(st.name);
    return v;
}

// An item that says its own size, found by argument-dependent lookup.
struct tile {
    int side = 0;
};
std::size_t byte_size(const tile& t) { return static_cast<std::size_t>(t.side * t.side); }

// An item shaped like a shard sample: its bytes are those of its fields.
struct fake_field {
    std::string name;
    std::string data;
};
struct fake_sample {
    std::string key;
    std::vector<fake_field> fields;
};

int sleep_then_pass(int x)
{
    std::this_thread::sleep_for(2ms);
    return x;
}

// A keyed reader that waits 1 ms per item on a timer and says how many retries it made.
struct slow_reader {
    std::uint64_t retries() const { return 7; }
    asio::awaitable<int> operator()(std::uint64_t i) const
    {
        const auto ex = co_await asio::this_coro::executor;
        asio::steady_timer t(ex, 1ms);
        boost::system::error_code ec;
        co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        co_return static_cast<int>(i);
    }
};
struct open_slow_reader {
    slow_reader operator()(cv::run_context&) const { return {}; }
};

// A keyed reader whose first five keys come at once and the rest wait a minute on a timer
// (ended early only by the run's cancellation, which makes the wait throw).
struct stalling_reader {
    asio::awaitable<int> operator()(std::uint64_t i) const
    {
        if (i >= 5) {
            asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::minutes(1));
            co_await t.async_wait(asio::use_awaitable);
        }
        co_return static_cast<int>(i);
    }
};
struct open_stalling_reader {
    stalling_reader operator()(cv::run_context&) const { return {}; }
};

} // namespace

TEST_CASE("a snapshot counts each stage's items in pipeline order, and what the consumer took")
{
    auto p = cv::from_range(test::iota(1000)) | cv::map([](int x) { return x + 1; }) |
             cv::filter([](int x) { return x % 2 == 0; }) | cv::batch(10);
    auto r = p.run();
    const auto got = test::collect(r);
    REQUIRE(got.size() == 50);
    const auto s = r.snapshot();
    CHECK(names_of(s) == std::vector<std::string>{"from_range", "map", "filter", "batch"});
    REQUIRE(s.stages.size() == 4);
    CHECK(s.stages[0].items == 1000);
    CHECK(s.stages[1].items == 1000);
    CHECK(s.stages[2].items == 500);
    CHECK(s.stages[3].items == 50);
    CHECK(s.delivered == 50);
    for (const auto& st : s.stages) {
        CHECK(st.finished);
        CHECK_FALSE(st.bytes_known); // ints (and batches of them) have no known size
        CHECK(st.queue_size == 0);
        CHECK(st.busy + st.starved + st.blocked == st.active);
    }
    CHECK(s.stages[0].starved.count() == 0); // a source has no input to wait for
    // The same after the run is gone: the final snapshot is kept.
    r.stop();
    const auto after = r.snapshot();
    REQUIRE(after.stages.size() == 4);
    CHECK(after.stages[3].items == 50);
    CHECK(after.delivered == 50);
}

TEST_CASE("bytes are counted for blobs, sample-like items, batches and types with a byte_size")
{
    static_assert(cv::detail::has_byte_size<cv::blob>());
    static_assert(cv::detail::has_byte_size<fake_sample>());
    static_assert(cv::detail::has_byte_size<tile>());
    static_assert(cv::detail::has_byte_size<std::vector<cv::blob>>());
    static_assert(!cv::detail::has_byte_size<int>());
    static_assert(!cv::detail::has_byte_size<std::vector<int>>());
    static_assert(!cv::detail::has_byte_size<std::string>());

    auto blobs = cv::generate(10, [](std::uint64_t i) {
        cv::blob b;
        b.key = "k" + std::to_string(i);
        b.data = cv::buffer::copy_of(std::string(100 + i, 'x'));
        return b;
    });
    auto r = (std::move(blobs) | cv::batch(4)).run();
    const auto got = test::collect(r);
    REQUIRE(got.size() == 3);
    const auto s = r.snapshot();
    REQUIRE(s.stages.size() == 2);
    CHECK(s.stages[0].bytes_known);
    CHECK(s.stages[0].bytes == 1000 + 45);
    CHECK(s.stages[1].bytes_known);
    CHECK(s.stages[1].bytes == 1000 + 45);

    auto samples = cv::generate(3, [](std::uint64_t i) {
        return fake_sample{"k", {{"jpg", std::string(10 * (i + 1), 'j')}, {"cls", "7"}}};
    });
    auto rs = samples.run();
    test::collect(rs);
    CHECK(rs.snapshot().stages.at(0).bytes == 10 + 20 + 30 + 3);

    auto tiles = cv::generate(4, [](std::uint64_t i) { return tile{static_cast<int>(i)}; });
    auto rt = tiles.run();
    test::collect(rt);
    CHECK(rt.snapshot().stages.at(0).bytes == 0 + 1 + 4 + 9);
}

TEST_CASE("a slow stage is busy while upstream is blocked and downstream starves, and is named the bottleneck")
{
    // The slow stage runs on the compute pool, as CPU work does: on the I/O thread it would
    // hold up the other stages' tasks, which then wait for the thread (counted as busy).
    auto p = cv::generate(100, [](std::uint64_t i) { return static_cast<int>(i); }) |
             cv::map(sleep_then_pass, {.where = cv::run_on::compute, .capacity = 8, .name = "slow"}) |
             cv::map([](int x) { return x; }, {.name = "fast"});
    auto r = p.run();
    const auto got = test::collect(r);
    REQUIRE(got.size() == 100);
    const auto s = r.snapshot();
    REQUIRE(names_of(s) == std::vector<std::string>{"generate", "slow", "fast"});
    const auto& src = s.stages[0];
    const auto& slow = s.stages[1];
    const auto& fast = s.stages[2];
    INFO(cv::format_shares(s));
    CHECK(slow.busy_share() > 0.8);
    CHECK(src.blocked_share() > 0.5);
    CHECK(fast.starved_share() > 0.5);
    CHECK(fast.busy_share() < 0.3);
    CHECK(slow.busy >= 100 * 2ms);
    const auto b = cv::bottleneck(s);
    REQUIRE(b);
    CHECK(*b == 1);
    const auto line = cv::format_shares(s);
    CHECK(line.find("slow") != std::string::npos);
    CHECK(line.find("(bottleneck)") > line.find("slow"));
    CHECK(line.find("(bottleneck)") < line.find("fast"));
}

TEST_CASE("wait_clock's ticks, converted, agree with the steady clock")
{
    cv::detail::wait_clock::start();
    // A tick count and the steady clock's time at the same moment: the tick read between two
    // clock reads no more than 20 us apart (a preemption between two unbracketed reads, on a
    // loaded machine, would alone be a few percent of the 30 ms).
    struct pair {
        std::int64_t ticks;
        double ns;
    };
    auto read_both = [] {
        pair p{};
        for (int attempt = 0; attempt < 1000; ++attempt) {
            const auto a = cv::detail::now_ns();
            p.ticks = cv::detail::wait_clock::now();
            const auto b = cv::detail::now_ns();
            p.ns = (static_cast<double>(a) + static_cast<double>(b)) / 2;
            if (b - a < 20'000) break;
        }
        return p;
    };
    const pair p0 = read_both();
    std::this_thread::sleep_for(30ms);
    const pair p1 = read_both();
    const auto ticks = p1.ticks - p0.ticks;
    const double ns = p1.ns - p0.ns;
    const double converted = static_cast<double>(ticks) * cv::detail::wait_clock::ns_per_tick();
    CAPTURE(cv::detail::wait_clock::uses_tsc());
    CHECK(ticks > 0);
    CHECK(converted == doctest::Approx(ns).epsilon(0.02));
}

TEST_CASE("blocked time grows and the queue stays full while the consumer does not read")
{
    auto p = cv::generate(1'000'000, [](std::uint64_t i) { return static_cast<int>(i); });
    auto r = p.run();
    std::this_thread::sleep_for(50ms);
    const auto s1 = r.snapshot();
    std::this_thread::sleep_for(100ms);
    const auto s2 = r.snapshot();
    REQUIRE(s2.stages.size() == 1);
    const auto& a = s1.stages[0];
    const auto& b = s2.stages[0];
    CHECK(b.blocked - a.blocked >= 80ms);
    // ... and no faster than the clock: one sender waits, so the wait grows as time does
    CHECK(b.blocked - a.blocked <= s2.elapsed - s1.elapsed + 5ms);
    CHECK(b.blocked_share() > 0.5);
    CHECK(b.queue_size == b.queue_capacity);
    CHECK(b.items == a.items);
    CHECK_FALSE(b.finished);
    const auto d = s2.since(s1);
    CHECK(d.stages[0].items == 0);
    CHECK(d.stages[0].blocked_share() > 0.9);
    CHECK(d.elapsed >= 90ms);
    CHECK(*r.next() == 0); // and it still delivers
}

TEST_CASE("the periodic callback delivers snapshots while the run goes, then the final one")
{
    struct seen {
        std::mutex mu;
        std::vector<cv::stats_snapshot> snaps;
    };
    auto log = std::make_shared<seen>();
    auto p = (cv::generate(100, [](std::uint64_t i) { return static_cast<int>(i); }) |
              cv::map(
                  [](int x) {
                      std::this_thread::sleep_for(1ms);
                      return x;
                  },
                  {.where = cv::run_on::compute}))
                 .on_stats(10ms, [log](const cv::stats_snapshot& s) {
                     std::lock_guard lk(log->mu);
                     log->snaps.push_back(s);
                 });
    const auto got = test::collect(p);
    REQUIRE(got.size() == 100);
    std::lock_guard lk(log->mu);
    REQUIRE(log->snaps.size() >= 3);
    const auto& last = log->snaps.back();
    CHECK(last.delivered == 100);
    CHECK(last.stages.at(1).items == 100);
    CHECK(log->snaps.front().stages.at(1).items < 100); // an early one, while it went
    for (std::size_t i = 1; i < log->snaps.size(); ++i)
        CHECK(log->snaps[i].stages.at(1).items >= log->snaps[i - 1].stages.at(1).items);
    const auto n = log->snaps.size();
    std::this_thread::sleep_for(30ms);
    CHECK(log->snaps.size() == n); // nothing after the end
}

TEST_CASE("snapshots are read from another thread while the run goes")
{
    auto p = cv::generate(200'000, [](std::uint64_t i) { return static_cast<int>(i); }) | cv::map([](int x) { return x + 1; }) |
             cv::map([](int x) { return x; }, {.concurrency = 2});
    auto r = p.run();
    std::atomic<bool> done{false};
    std::atomic<int> reads{0};
    bool monotone = true;
    std::thread watcher([&] {
        std::uint64_t last = 0;
        while (!done.load()) {
            const auto s = r.snapshot();
            if (s.stages.size() == 3) {
                if (s.stages[2].items < last) monotone = false;
                last = s.stages[2].items;
            }
            (void)cv::format_shares(s);
            ++reads;
            std::this_thread::sleep_for(1ms);
        }
    });
    std::size_t n = 0;
    test::finishes_within(test::generous, "reading while watched", [&] {
        for (int x : r) n += x >= 0;
    });
    done = true;
    watcher.join();
    CHECK(n == 200'000);
    CHECK(monotone);
    CHECK(reads.load() > 0);
    const auto s = r.snapshot();
    CHECK(s.stages.at(2).workers == 2);
    CHECK(s.stages.at(2).items == 200'000);
}

TEST_CASE("a keyed source reports its workers, requests in flight, retries and latency")
{
    auto p = cv::keyed_source<int>("kv", 40, {.concurrency = 4}, open_slow_reader{});
    auto r = p.run();
    const auto got = test::collect(r);
    REQUIRE(got.size() == 40);
    const auto s = r.snapshot();
    REQUIRE(s.stages.size() == 1);
    const auto& src = s.stages[0];
    CHECK(src.name == "kv");
    CHECK(src.is_source);
    CHECK(src.workers == 4);
    CHECK(src.items == 40);
    CHECK(src.in_flight == 0);
    CHECK(src.retries == 7);
    CHECK(src.latency.count == 40);
    CHECK(src.latency.quantile_ns(0.5) >= 0.9e6);
    CHECK(src.latency.mean_ns() >= 1e6);
}

TEST_CASE("requests that the end of a run cancels count in no latency, and leave nothing in flight")
{
    auto p = cv::keyed_source<int>("kv", 100, {.concurrency = 4}, open_stalling_reader{});
    auto r = p.run();
    int n = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& x : r) {
        (void)x;
        if (++n == 5) break;
    }
    r.stop(); // cancels the reads still waiting
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));
    const auto s = r.snapshot();
    REQUIRE(s.stages.size() == 1);
    CHECK(s.stages[0].latency.count == 5); // the reads that completed, not the cancelled ones
    CHECK(s.stages[0].in_flight == 0);
}

TEST_CASE("the latency histogram's quantiles are within a bucket of the truth")
{
    cv::latency_histogram h;
    for (int us = 1; us <= 1000; ++us) h.record(std::chrono::microseconds(us));
    const auto c = h.read();
    CHECK(c.count == 1000);
    CHECK(c.quantile_ns(0.5) == doctest::Approx(500e3).epsilon(0.2));
    CHECK(c.quantile_ns(0.99) == doctest::Approx(990e3).epsilon(0.2));
    CHECK(c.mean_ns() == doctest::Approx(500.5e3).epsilon(0.001));
    CHECK(cv::latency_histogram::bucket_of(0) == 0);
    CHECK(cv::latency_histogram::bucket_of(4) == 4);
    CHECK(cv::latency_histogram::bucket_of(5) == 5);
    CHECK(cv::latency_histogram::bucket_of(8) == 8);
    for (std::uint64_t v : {1ull, 7ull, 1000ull, 123456789ull})
        CHECK(cv::latency_histogram::bucket_low(cv::latency_histogram::bucket_of(v)) <= static_cast<double>(v));
}

TEST_CASE("the bottleneck helper names no stage when none is busy most of the time")
{
    cv::stats_snapshot s;
    s.elapsed = 1s;
    s.stages.resize(2);
    s.stages[0].name = "read";
    s.stages[0].active = 1s;
    s.stages[0].busy = 300ms;
    s.stages[0].blocked = 700ms;
    s.stages[1].name = "decode";
    s.stages[1].active = 1s;
    s.stages[1].busy = 400ms;
    s.stages[1].blocked = 600ms;
    CHECK_FALSE(cv::bottleneck(s));
    CHECK(cv::format_shares(s) == "read 30% | decode 40%");
    s.stages[1].busy = 950ms;
    s.stages[1].blocked = 50ms;
    CHECK(cv::format_shares(s) == "read 30% | decode 95% (bottleneck)");
}
