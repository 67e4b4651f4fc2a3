// Tests of conveyor/core/source.hpp: the source core every source is built on (keys read
// N at once, ordered or not, bad items failed or skipped, cancelled as a group).
#include "support.hpp"

#include <conveyor/core/source.hpp>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <set>

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
