// Tests of conveyor/core/source.hpp: the source core every source is built on (keys read
// N at once, ordered or not, bad items failed or skipped, cancelled as a group).
#include "support.hpp"

#include <conveyor/core/source.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_future.hpp>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

namespace asio = boost::asio;
namespace cv = conveyor;
using namespace std::chrono_literals;
using test::what_of;

namespace {

/// What the readers of these tests share: how many reads are in flight, and the most seen.
struct gauge {
    std::atomic<int> now{0};
    std::atomic<int> most{0};
    std::atomic<int> started{0};
    void enter()
    {
        ++started;
        const int n = ++now;
        int m = most.load();
        while (n > m && !most.compare_exchange_weak(m, n)) {
        }
    }
    void leave() { --now; }
};

/// Waits `d` on the calling coroutine's executor.
asio::awaitable<void> pause(std::chrono::microseconds d)
{
    asio::steady_timer t(co_await asio::this_coro::executor, d);
    co_await t.async_wait(asio::use_awaitable);
}

/// Item `i` after a delay that varies with `i` (so reads finish out of order), counted.
asio::awaitable<std::uint64_t> slow_square(std::shared_ptr<gauge> g, std::uint64_t i)
{
    g->enter();
    co_await pause(std::chrono::microseconds((i * 7919) % 2000));
    g->leave();
    co_return i * i;
}

std::vector<std::uint64_t> collect(cv::pipeline<std::uint64_t>& p)
{
    std::vector<std::uint64_t> out;
    for (auto x : p) out.push_back(x);
    return out;
}

} // namespace

TEST_CASE("keyed_source reads every key, at most `concurrency` at once, delivered in key order")
{
    cv::runtime rt({.io_threads = 2, .compute_threads = 1});
    auto g = std::make_shared<gauge>();
    auto p = cv::keyed_source<std::uint64_t>("squares", 500, {.concurrency = 8}, [g](cv::run_context&) {
                 return [g](std::uint64_t i) { return slow_square(g, i); };
             }).on(rt);
    const auto got = collect(p);
    REQUIRE(got.size() == 500);
    for (std::uint64_t i = 0; i < got.size(); ++i) CHECK(got[i] == i * i);
    CHECK(g->most.load() <= 8);
    CHECK(g->most.load() > 1); // reads overlapped
}

TEST_CASE("keyed_source delivers as reads complete when not ordered, each key once")
{
    cv::runtime rt({.io_threads = 2, .compute_threads = 1});
    auto g = std::make_shared<gauge>();
    auto p = cv::keyed_source<std::uint64_t>("squares", 300, {.concurrency = 16, .ordered = false}, [g](cv::run_context&) {
                 return [g](std::uint64_t i) { return slow_square(g, i); };
             }).on(rt);
    auto got = collect(p);
    REQUIRE(got.size() == 300);
    std::set<std::uint64_t> unique(got.begin(), got.end());
    CHECK(unique.size() == 300);
    CHECK(!std::is_sorted(got.begin(), got.end())); // the delays put them out of order
}

namespace {

/// A reader that fails on keys divisible by 7, by returning an error or by throwing.
struct picky {
    bool throws;
    asio::awaitable<cv::read_outcome<std::uint64_t>> operator()(std::uint64_t i) const
    {
        if (i % 7 == 3) {
            cv::error e(std::make_error_code(std::errc::no_such_file_or_directory),
                        {.stage = "picky", .key = "item-" + std::to_string(i)});
            if (throws) throw e;
            co_return e;
        }
        co_return i;
    }
};

} // namespace

TEST_CASE("a failed item fails the run with its error, whether the reader returns it or throws it")
{
    for (const bool throws : {false, true}) {
        CAPTURE(throws);
        cv::runtime rt({.io_threads = 2, .compute_threads = 1});
        auto p = cv::keyed_source<std::uint64_t>("picky", 100, {.concurrency = 4}, [throws](cv::run_context&) {
                     return picky{throws};
                 }).on(rt);
        std::vector<std::uint64_t> before;
        try {
            for (auto x : p) before.push_back(x);
            FAIL("the run ended without an error");
        } catch (const cv::error& e) {
            CHECK(e.code() == std::errc::no_such_file_or_directory);
            CHECK(e.stage() == "picky");
            // The first failure to happen wins: key 3, or a later failing key (10, 17...)
            // read on another lane before key 3's read ended.
            REQUIRE(e.key().starts_with("item-"));
            CHECK(std::stoul(e.key().substr(5)) % 7 == 3);
        }
        CHECK(before.size() <= 3); // ordered: nothing past key 3, which fails either way
    }
}

TEST_CASE("under on_error::skip failed items are counted and left out, the rest delivered in order")
{
    conveyor_test::log_capture log;
    cv::runtime rt({.io_threads = 2, .compute_threads = 1, .log = log.sink()});
    auto p = cv::keyed_source<std::uint64_t>("picky", 100, {.concurrency = 4, .errors = cv::on_error::skip},
                                             [](cv::run_context&) { return picky{false}; })
                 .on(rt);
    auto r = p.run();
    std::vector<std::uint64_t> got;
    while (auto x = r.next()) got.push_back(*x);
    std::vector<std::uint64_t> want;
    for (std::uint64_t i = 0; i < 100; ++i)
        if (i % 7 != 3) want.push_back(i);
    CHECK(got == want);
    CHECK(r.stats().skipped.load() == 100 - want.size());
    CHECK(!log.matching({"skipped", "item-3"}).empty());
}

TEST_CASE("an exception from open fails the run, whatever the error policy")
{
    cv::runtime rt({.io_threads = 1, .compute_threads = 1});
    auto p = cv::keyed_source<std::uint64_t>("broken", 10, {.errors = cv::on_error::skip}, [](cv::run_context&) {
                 throw std::runtime_error("no connection to the store");
                 return [](std::uint64_t i) -> asio::awaitable<std::uint64_t> { co_return i; };
             }).on(rt);
    try {
        for (auto x : p) (void)x;
        FAIL("the run ended without an error");
    } catch (const cv::error& e) {
        CHECK(e.stage() == "broken");
        CHECK(std::string(e.what()).find("no connection to the store") != std::string::npos);
    }
}

TEST_CASE("breaking out of the loop cancels the reads in flight at once")
{
    cv::runtime rt({.io_threads = 2, .compute_threads = 1});
    auto g = std::make_shared<gauge>();
    // Key 0 is quick; every other read would take an hour.
    auto p = cv::keyed_source<std::uint64_t>("slow", 1000, {.concurrency = 16}, [g](cv::run_context&) {
                 return [g](std::uint64_t i) -> asio::awaitable<std::uint64_t> {
                     g->enter();
                     if (i != 0) co_await pause(std::chrono::hours(1));
                     g->leave();
                     co_return i;
                 };
             }).on(rt);
    const bool done = conveyor_test::finishes_within(test::generous, "breaking out of a keyed_source", [&] {
        for (auto x : p) {
            CHECK(x == 0);
            break;
        }
    });
    CHECK(done);
    CHECK(g->started.load() <= 16 + 1);
}

TEST_CASE("keyed_source with no keys ends at once")
{
    cv::runtime rt({.io_threads = 1, .compute_threads = 1});
    auto p = cv::keyed_source<std::uint64_t>("empty", 0, {}, [](cv::run_context&) {
                 return [](std::uint64_t i) -> asio::awaitable<std::uint64_t> { co_return i; };
             }).on(rt);
    CHECK(collect(p).empty());
}

// ---- sequence_source: keys read as sequences of items, merged in a fixed order ------------

namespace {

/// Key `k` as a sequence: `length(k)` items `k * 1000 + i`, each after a delay that varies
/// (so lanes run at different speeds); `fail_at(k)` items in, the key throws instead.
struct counted_cursor {
    std::uint64_t key;
    std::uint64_t length;
    std::uint64_t fail_at; // >= length: never
    std::shared_ptr<gauge> g;
    std::uint64_t i = 0;

    asio::awaitable<std::optional<std::uint64_t>> async_next()
    {
        if (i == fail_at)
            throw cv::error(std::make_error_code(std::errc::io_error), {.stage = "seq", .key = "key-" + std::to_string(key)});
        if (i == length) co_return std::nullopt;
        g->enter();
        struct leave {
            gauge& g;
            ~leave() { g.leave(); } // also when the read is cancelled in its pause
        } left{*g};
        co_await pause(std::chrono::microseconds(((key + 1) * 7919 + i * 104729) % 900));
        co_return key * 1000 + i++;
    }
};

std::uint64_t length_of(std::uint64_t k) { return (k * 37) % 11; } // 0 … 10 items: some keys are empty

struct counted_reader {
    std::shared_ptr<gauge> g;
    std::uint64_t failing_key = cv::endless;
    std::uint64_t failing_at = 0;
    counted_cursor operator()(std::uint64_t k, const cv::sequence_lane&) const
    {
        return {k, length_of(k), k == failing_key ? failing_at : cv::endless, g};
    }
    std::string skip_note(std::uint64_t k, std::string_view why) const
    {
        return "key-" + std::to_string(k) + " cut short (" + std::string(why) + ")";
    }
};

/// The order the merge promises: lane j reads keys j, j + lanes, …; one item from each
/// lane in turn, lanes that ended passed over. `cut(k)`: how many items of key k count.
template <class Cut>
std::vector<std::uint64_t> merged_order(std::uint64_t keys, std::size_t lanes, Cut cut)
{
    std::vector<std::vector<std::uint64_t>> per_lane(lanes);
    for (std::uint64_t k = 0; k < keys; ++k)
        for (std::uint64_t i = 0; i < cut(k); ++i) per_lane[k % lanes].push_back(k * 1000 + i);
    std::vector<std::uint64_t> out;
    std::vector<std::size_t> at(lanes, 0);
    for (bool any = true; any;) {
        any = false;
        for (std::size_t j = 0; j < lanes; ++j)
            if (at[j] < per_lane[j].size()) {
                out.push_back(per_lane[j][at[j]++]);
                any = true;
            }
    }
    return out;
}

} // namespace

TEST_CASE("sequence_source merges the keys' items one from each lane in turn, whatever the timing")
{
    for (const std::size_t lanes : {1u, 3u, 4u}) {
        CAPTURE(lanes);
        cv::runtime rt({.io_threads = 2, .compute_threads = 1});
        auto g = std::make_shared<gauge>();
        auto p = cv::sequence_source<std::uint64_t>("seq", 23, {.sequences_in_flight = lanes, .lane_capacity = 2},
                                                    [g](cv::run_context&) { return counted_reader{g}; })
                     .on(rt);
        const auto want = merged_order(23, lanes, length_of);
        CHECK(collect(p) == want);
        CHECK(collect(p) == want); // a second run: the same order
        if (lanes > 1) CHECK(g->most.load() > 1); // lanes overlapped
        CHECK(g->most.load() <= static_cast<int>(lanes));
    }
}

TEST_CASE("sequence_source under on_error::skip leaves out the rest of a failing key only, counted and logged")
{
    conveyor_test::log_capture log;
    cv::runtime rt({.io_threads = 2, .compute_threads = 1, .log = log.sink()});
    auto g = std::make_shared<gauge>();
    // Key 5 (10 items) fails after 4; key 9 (8 items) fails at once.
    auto p = cv::sequence_source<std::uint64_t>("seq", 12, {.sequences_in_flight = 3, .errors = cv::on_error::skip},
                                                [g](cv::run_context&) {
                                                    return counted_reader{g, 5, 4};
                                                })
                 .on(rt);
    auto r = p.run();
    std::vector<std::uint64_t> got;
    while (auto x = r.next()) got.push_back(*x);
    CHECK(got == merged_order(12, 3, [](std::uint64_t k) { return k == 5 ? 4 : length_of(k); }));
    CHECK(r.stats().skipped.load() == 1);
    CHECK(!log.matching({"key-5 cut short"}).empty());
}

TEST_CASE("sequence_source fails the run with a failing key's error by default")
{
    cv::runtime rt({.io_threads = 2, .compute_threads = 1});
    auto g = std::make_shared<gauge>();
    auto p = cv::sequence_source<std::uint64_t>("seq", 12, {.sequences_in_flight = 3},
                                                [g](cv::run_context&) { return counted_reader{g, 5, 4}; })
                 .on(rt);
    std::vector<std::uint64_t> before;
    try {
        for (auto x : p) before.push_back(x);
        FAIL("the run ended without an error");
    } catch (const cv::error& e) {
        CHECK(e.code() == std::errc::io_error);
        CHECK(e.key() == "key-5");
    }
    // Nothing of key 5 past its failure was delivered.
    CHECK(std::count_if(before.begin(), before.end(), [](std::uint64_t x) { return x / 1000 == 5 && x % 1000 >= 4; }) == 0);
}

TEST_CASE("an endless sequence_source stops reading when the consumer stops")
{
    cv::runtime rt({.io_threads = 2, .compute_threads = 1});
    auto g = std::make_shared<gauge>();
    auto p = cv::sequence_source<std::uint64_t>("seq", cv::endless, {.sequences_in_flight = 4},
                                                [g](cv::run_context&) { return counted_reader{g}; })
                 .on(rt);
    std::size_t n = 0;
    const bool done = conveyor_test::finishes_within(test::generous, "breaking out of an endless sequence_source", [&] {
        for (auto x : p) {
            (void)x;
            if (++n == 50) break;
        }
    });
    CHECK(done);
    CHECK(n == 50);
    // The lanes end: no read is left running once the run is gone.
    CHECK(conveyor_test::eventually([&] { return g->now.load() == 0; }, test::generous));
    const int started = g->started.load();
    std::this_thread::sleep_for(20ms);
    CHECK(g->started.load() == started);
}

namespace {

/// An item that holds memory of a budget until it is dropped.
struct held {
    std::uint64_t value = 0;
    cv::memory_lease lease;
};

/// Key `k`: `per_key` items, each taking `unit` bytes as a chunk reader takes a chunk's
/// (`chunk_memory_now`, else waiting), from the lane's share with the lane's priority. Key 0
/// starts late, so that the other lanes fill the share with items the merge cannot take yet.
struct leasing_cursor {
    cv::runtime* rt;
    std::uint64_t key;
    cv::chunk_options o;
    std::uint64_t i = 0;
    static constexpr std::size_t unit = 1000;
    static constexpr std::uint64_t per_key = 10;

    asio::awaitable<std::optional<held>> async_next()
    {
        if (i == per_key) co_return std::nullopt;
        if (key == 0 && i == 0) co_await pause(100ms);
        auto l = cv::detail::chunk_memory_now(rt->memory(), unit, o);
        if (!l) {
            auto [ec, got] = co_await cv::detail::async_wait_chunk_memory(rt->memory(), unit, o, asio::as_tuple(asio::use_awaitable));
            if (ec) throw std::system_error(ec);
            l = std::move(got);
        }
        co_return held{key * 1000 + i++, std::move(*l)};
    }
};

/// The run's share of the budget, as the lanes were given it.
struct seen_share {
    std::mutex mu;
    std::shared_ptr<cv::memory_budget> share;
};

struct leasing_reader {
    cv::runtime* rt;
    std::shared_ptr<seen_share> seen;
    leasing_cursor operator()(std::uint64_t k, const cv::sequence_lane& lane) const
    {
        {
            std::lock_guard lk(seen->mu);
            seen->share = lane.budget;
        }
        // With a chunk_options of its own instead (no priority), this test hangs.
        return {rt, k, lane.chunks({})};
    }
};

} // namespace

TEST_CASE("sequence_source does not deadlock on memory held by items waiting for their turn")
{
    // Three lanes, a share of three items. Lanes 1 and 2 fill it with items the merge
    // cannot take before lane 0's first; lane 0 then needs memory that only the merge's
    // progress can free. The merge marks the lane it waits on urgent, so lane 0 gets its
    // memory past the share's limit and the run goes on; the runtime's budget sees only
    // the share, taken once.
    cv::runtime rt({.io_threads = 2, .compute_threads = 1, .memory_limit = 10 * leasing_cursor::unit});
    auto seen = std::make_shared<seen_share>();
    auto p = cv::sequence_source<held>("leasing", 3,
                                       {.sequences_in_flight = 3, .capacity = 2, .memory_per_sequence = leasing_cursor::unit},
                                       [&rt, seen](cv::run_context&) { return leasing_reader{&rt, seen}; })
                 .on(rt);
    std::vector<std::uint64_t> got;
    std::size_t runtime_in_use = 0;
    const bool done = conveyor_test::finishes_within(test::generous, "a sequence_source on a full share of the budget", [&] {
        for (auto& x : p) {
            got.push_back(x.value);
            runtime_in_use = std::max(runtime_in_use, rt.memory().in_use());
        }
    });
    CHECK(done);
    CHECK(got == merged_order(3, 3, [](std::uint64_t) { return leasing_cursor::per_key; }));
    CHECK(runtime_in_use == 3 * leasing_cursor::unit); // the share, in one piece
    CHECK(rt.memory().stats().peak == 3 * leasing_cursor::unit);
    std::shared_ptr<cv::memory_budget> share;
    {
        std::lock_guard lk(seen->mu);
        share = seen->share;
    }
    REQUIRE(share);
    const auto s = share->stats();
    CHECK(s.limit == 3 * leasing_cursor::unit);
    CHECK(s.peak > s.limit); // lane 0 went past the share: it was not made to wait
    CHECK(conveyor_test::eventually([&] { return share->in_use() == 0 && rt.memory().in_use() == 0; }, test::generous));
}

TEST_CASE("read_priority wakes a chunk's wait for memory when its reader becomes urgent")
{
    cv::runtime rt({.io_threads = 1, .compute_threads = 1, .memory_limit = 100});
    auto blocker = rt.memory().try_acquire(100);
    REQUIRE(blocker);
    cv::chunk_options o;
    o.priority = std::make_shared<cv::read_priority>();
    CHECK(!cv::detail::chunk_memory_now(rt.memory(), 50, o)); // full: it would have to wait
    auto wait = [](cv::runtime* rt, cv::chunk_options o) -> asio::awaitable<std::size_t> {
        auto [ec, l] = co_await cv::detail::async_wait_chunk_memory(rt->memory(), 50, o, asio::as_tuple(asio::use_awaitable));
        co_return ec ? 0 : l.bytes();
    };
    auto f = asio::co_spawn(rt.io_executor(0), wait(&rt, o), asio::use_future);
    CHECK(f.wait_for(50ms) == std::future_status::timeout); // waiting for room
    o.priority->set_urgent(true);
    REQUIRE(f.wait_for(test::generous) == std::future_status::ready);
    CHECK(f.get() == 50);
    CHECK(rt.memory().in_use() == 100); // the urgent lease came and went, counted
    o.priority->set_urgent(false);
    // Not urgent and full: a wait is cancelled by its caller as before.
    auto g = asio::co_spawn(rt.io_executor(0), wait(&rt, o), asio::use_future);
    CHECK(g.wait_for(50ms) == std::future_status::timeout);
    blocker->release();
    REQUIRE(g.wait_for(test::generous) == std::future_status::ready);
    CHECK(g.get() == 50);
}
