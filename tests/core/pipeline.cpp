// Tests of conveyor/core/{pipeline,runtime,run_context}.hpp: the lazy pipeline and its
// range sink, runs and epochs, coroutine consumers, the runtime's threads, and
// cancellation and shutdown.
#include "support.hpp"

#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/run_context.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/stages.hpp>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <condition_variable>
#include <numeric>
#include <ranges>
#include <set>
#include <stdexcept>

namespace asio = boost::asio;
namespace cv = conveyor;
using namespace std::chrono_literals;
using test::count_calls;
using test::iota;
using test::code_of;
using test::what_of;

namespace {


void settle(asio::io_context& io)
{
    // poll() also stops early when the io_context runs out of counted work (a coroutine
    // parked in a channel's waiter list is not counted), so go on until nothing is ready.
    do {
        io.restart();
    } while (io.poll() > 0);
}

} // namespace

// ==== the range sink ===========================================================================

static_assert(std::ranges::input_range<cv::range<int>>);
static_assert(std::ranges::input_range<cv::pipeline<int>>);
static_assert(!std::ranges::forward_range<cv::range<int>>); // one pass: each item is read once
static_assert(std::input_iterator<cv::range<int>::iterator>);
static_assert(std::sentinel_for<std::default_sentinel_t, cv::range<int>::iterator>);
static_assert(std::ranges::viewable_range<cv::pipeline<int>&>);
static_assert(std::ranges::viewable_range<cv::range<int>>); // a temporary run can be piped into views
static_assert(std::same_as<std::ranges::range_value_t<cv::pipeline<std::string>>, std::string>);
static_assert(std::same_as<std::ranges::range_reference_t<cv::range<int>>, int&>);

TEST_CASE("a pipeline reads as a range-for loop and with std::ranges algorithms and views")
{
    cv::runtime rt;
    auto p = cv::from_range(iota(10, 1)).on(rt);
    test::finishes_within(test::generous, "ranges over a pipeline", [&] {
        int sum = 0;
        for (int x : p) sum += x;
        CHECK(sum == 55);

        CHECK(std::ranges::count_if(p, [](int x) { return x % 2 == 0; }) == 5);

        std::vector<int> first3;
        for (int x : p | std::views::take(3)) first3.push_back(x);
        CHECK(first3 == std::vector<int>{1, 2, 3});

        std::vector<int> odd_squares;
        for (int x : p | std::views::filter([](int x) { return x % 2; }) | std::views::transform([](int x) { return x * x; }))
            odd_squares.push_back(x);
        CHECK(odd_squares == std::vector<int>{1, 9, 25, 49, 81});

        std::vector<int> copied;
        auto r = p.run();
        std::ranges::copy(r, std::back_inserter(copied));
        CHECK(copied == iota(10, 1));

        std::vector<int> doubled;
        for (int x : p.run() | std::views::transform([](int x) { return 2 * x; })) doubled.push_back(x);
        CHECK(doubled == std::vector<int>{2, 4, 6, 8, 10, 12, 14, 16, 18, 20});
    });
}

TEST_CASE("items can be taken from the loop by reference and moved from")
{
    cv::runtime rt;
    auto p = cv::from_range(test::samples(3)).on(rt);
    std::vector<test::sample> out;
    test::finishes_within(test::generous, "reading samples", [&] {
        for (auto& s : p) out.push_back(std::move(s));
    });
    CHECK(out == test::samples(3));
}

TEST_CASE("a pipeline does nothing until it is iterated")
{
    cv::runtime rt;
    auto calls = std::make_shared<std::atomic<std::uint64_t>>(0);
    auto p = cv::generate(100, count_calls(calls)).on(rt) | cv::map([](int x) { return x + 1; }, {.concurrency = 4}) |
             cv::shuffle({.buffer = 10}) | cv::batch(10);
    auto copy = p;
    std::this_thread::sleep_for(20ms); // a wrongly eager pipeline would have started by now
    CHECK(*calls == 0);
    auto got = test::collect(p);
    CHECK(got.size() == 10);
    CHECK(*calls == 100);
    CHECK(test::collect(copy).size() == 10); // a copy is an independent description
    CHECK(*calls == 200);
}

TEST_CASE("generate calls its function once per item, in order")
{
    cv::runtime rt;
    auto seen = std::make_shared<std::vector<std::uint64_t>>();
    auto p = cv::generate(1000, [seen](std::uint64_t i) {
                 seen->push_back(i); // only ever called on the run's I/O thread
                 return i * i;
             }).on(rt);
    auto got = test::collect(p);
    REQUIRE(got.size() == 1000);
    for (std::uint64_t i = 0; i < 1000; ++i) CHECK(got[i] == i * i);
    std::vector<std::uint64_t> expected(1000);
    std::iota(expected.begin(), expected.end(), 0);
    CHECK(*seen == expected);
    auto none = cv::generate(0, [](std::uint64_t) { return 1; }).on(rt);
    CHECK(test::collect(none).empty());
}

TEST_CASE("each iteration of a pipeline is a new run in the next epoch")
{
    cv::runtime rt;
    auto p = cv::from_range(iota(300)).on(rt) | cv::shuffle({.buffer = 50, .seed = 9});
    const auto e0 = test::collect(p);
    const auto e1 = test::collect(p);
    CHECK(e0 != e1);
    for (auto v : {e0, e1}) {
        std::sort(v.begin(), v.end());
        CHECK(v == iota(300));
    }
    p.set_epoch(0);
    CHECK(test::collect(p) == e0);
    CHECK(test::collect(p) == e1); // counting on from the epoch that was set
    auto r1 = p.run(1);
    CHECK(test::collect(r1) == e1);
    p.set_epoch(1);
    auto r = p.run(); // run() takes the next epoch too
    CHECK(test::collect(r) == e1);
    const auto e2 = test::collect(p);
    CHECK(e2 != e0);
    CHECK(e2 != e1);
}

TEST_CASE("run() starts a run that next() reads to its end")
{
    cv::runtime rt;
    auto p = cv::from_range(iota(40)).on(rt) | cv::map([](int x) { return x * 2; });
    test::finishes_within(test::generous, "next() to the end", [&] {
        auto r = p.run();
        for (int i = 0; i < 40; ++i) {
            auto x = r.next();
            REQUIRE(x.has_value());
            CHECK(*x == 2 * i);
        }
        CHECK_FALSE(r.next().has_value());
        CHECK_FALSE(r.next().has_value()); // and stays ended
        CHECK(r.stats().skipped == 0);
    });
}

TEST_CASE("a range can be moved while it is read")
{
    cv::runtime rt;
    auto p = cv::from_range(iota(100)).on(rt);
    test::finishes_within(test::generous, "reading a moved range", [&] {
        auto r = p.run();
        CHECK(r.next() == 0);
        auto moved = std::move(r);
        std::vector<int> rest;
        while (auto x = moved.next()) rest.push_back(*x);
        CHECK(rest == iota(99, 1));
        cv::range<int> assigned = p.run();
        CHECK(assigned.next() == 0);
        assigned = p.run(); // the first run is stopped, the second read
        CHECK(assigned.next() == 0);
    });
}

// Regression test, fixed bug (doubtful): errc::stream_ended is documented as "A stream was iterated after it had
// ended or after its range was moved from", but nothing in the core ever raises it: a
// moved-from range reads as an empty one (next() returns nullopt).
TEST_CASE("reading a moved-from range says so with errc::stream_ended")
{
    cv::runtime rt;
    auto p = cv::from_range(iota(10)).on(rt);
    auto r = p.run();
    auto moved = std::move(r);
    std::exception_ptr caught;
    test::finishes_within(test::generous, "reading a moved-from range", [&] {
        try {
            (void)r.next(); // NOLINT(bugprone-use-after-move): that is the point
        } catch (...) {
            caught = std::current_exception();
        }
    });
    REQUIRE(caught);
    CHECK(code_of(caught) == cv::errc::stream_ended);
}

TEST_CASE("a coroutine on another io_context reads a run with async_next")
{
    cv::runtime rt;
    asio::io_context io;
    auto p = cv::from_range(iota(500)).on(rt) | cv::map([](int x) { return x + 1; }, {.concurrency = 3});
    auto r = p.run();
    std::vector<int> got;
    std::set<std::thread::id> resumed_on;
    std::thread::id consumer_thread;
    std::exception_ptr error;
    bool done = false;
    asio::co_spawn(
        io,
        [](cv::range<int>& r, std::vector<int>* got, std::set<std::thread::id>* on) -> asio::awaitable<void> {
            while (auto x = co_await r.async_next()) {
                got->push_back(*x);
                on->insert(std::this_thread::get_id());
            }
        }(r, &got, &resumed_on),
        [&](std::exception_ptr e) {
            done = true;
            error = e;
        });
    test::finishes_within(test::generous, "a coroutine consumer", [&] {
        consumer_thread = std::this_thread::get_id();
        io.run();
    });
    REQUIRE(done);
    CHECK_FALSE(error);
    CHECK(got == iota(500, 1));
    CHECK(resumed_on == std::set<std::thread::id>{consumer_thread}); // resumed on its own context
}

TEST_CASE("async_next throws the pipeline's error to a coroutine consumer")
{
    cv::runtime rt;
    asio::io_context io;
    auto p = cv::from_range(test::samples(5)).on(rt) | cv::map(
                                                           [](test::sample s) {
                                                               if (s.value == 2) throw std::invalid_argument("no twos");
                                                               return s.value;
                                                           },
                                                           {.concurrency = 2});
    auto r = p.run();
    std::exception_ptr error;
    bool done = false;
    asio::co_spawn(
        io,
        [](cv::range<int>& r) -> asio::awaitable<void> {
            while (co_await r.async_next()) {
            }
        }(r),
        [&](std::exception_ptr e) {
            done = true;
            error = e;
        });
    test::finishes_within(test::generous, "a failing coroutine consumer", [&] { io.run(); });
    REQUIRE(done);
    REQUIRE(error);
    CHECK(what_of(error) == "conveyor: stage 'map': item 'k2': no twos");
}

TEST_CASE("an error thrown by a stage leaves the range-for loop at the consumer")
{
    cv::runtime rt;
    auto p = cv::from_range(iota(10)).on(rt) | cv::filter([](const int& x) {
                 if (x == 4) throw std::runtime_error("filter broke");
                 return true;
             });
    std::exception_ptr caught;
    std::vector<int> seen;
    test::finishes_within(test::generous, "a failing loop", [&] {
        try {
            for (int x : p) seen.push_back(x);
        } catch (...) {
            caught = std::current_exception();
        }
    });
    REQUIRE(caught);
    CHECK(what_of(caught) == "conveyor: stage 'filter': filter broke");
    CHECK(seen.size() <= 4);
    // The pipeline can run again after a failed run; it fails the same way.
    caught = nullptr;
    test::finishes_within(test::generous, "a second failing loop", [&] {
        try {
            for (int x : p) (void)x;
        } catch (...) {
            caught = std::current_exception();
        }
    });
    CHECK(caught);
}

TEST_CASE("a pipeline not given a runtime uses the shared one")
{
    auto p = cv::from_range(iota(3));
    CHECK(&p.rt() == &cv::runtime::shared());
    cv::runtime rt;
    CHECK(&p.on(rt).rt() == &rt);
    auto q = p | cv::map([](int x) { return x; });
    CHECK(&q.rt() == &rt); // stages keep the runtime chosen before them
}

// ==== runtime ==================================================================================

TEST_CASE("a runtime has the I/O lanes it was asked for, each knowing its index")
{
    cv::runtime rt(cv::runtime_options{.io_threads = 3, .compute_threads = 2});
    CHECK(rt.io_lanes() == 3);
    CHECK(rt.options().io_threads == 3);
    CHECK(rt.options().compute_threads == 2);
    CHECK(cv::detail::current_lane == -1); // not an I/O thread
    std::set<std::thread::id> threads;
    for (std::size_t i = 0; i < 3; ++i) {
        std::promise<std::pair<int, std::thread::id>> where;
        auto f = where.get_future();
        asio::post(rt.io_executor(i), [&where] { where.set_value({cv::detail::current_lane, std::this_thread::get_id()}); });
        REQUIRE(f.wait_for(test::generous) == std::future_status::ready);
        const auto [lane, id] = f.get();
        CHECK(lane == static_cast<int>(i));
        CHECK(id != std::this_thread::get_id());
        threads.insert(id);
        CHECK(&rt.io_context(i) == &rt.io_executor(i).context());
    }
    CHECK(threads.size() == 3);
    CHECK_THROWS_AS(rt.io_executor(3), std::out_of_range);
    // next_io_executor() goes round the lanes.
    std::vector<std::size_t> order;
    for (int k = 0; k < 6; ++k) {
        auto ex = rt.next_io_executor();
        for (std::size_t i = 0; i < 3; ++i)
            if (ex == rt.io_executor(i)) order.push_back(i);
    }
    REQUIRE(order.size() == 6);
    for (std::size_t k = 1; k < 6; ++k) CHECK(order[k] == (order[k - 1] + 1) % 3);
}

TEST_CASE("a runtime's zero options are chosen for the machine")
{
    cv::runtime rt;
    const std::size_t cores = std::max(1u, std::thread::hardware_concurrency());
    CHECK(rt.io_lanes() == std::min<std::size_t>(cores, 4));
    CHECK(rt.options().compute_threads == cores);
    CHECK(rt.options().blocking_threads == 16);
    CHECK(rt.options().ring_entries == 256);
    cv::runtime r2(cv::runtime_options{.io_threads = 1, .ring_entries = 0, .ring_max_in_flight = 0});
    CHECK(r2.options().ring_entries == 256);
    CHECK(r2.options().ring_max_in_flight == 256);
}

TEST_CASE("CONVEYOR_IO_BACKEND chooses the file backend only when the options leave it automatic")
{
    const char* old = std::getenv("CONVEYOR_IO_BACKEND");
    const std::string saved = old ? old : "";
    ::setenv("CONVEYOR_IO_BACKEND", "pread", 1);
    {
        cv::runtime rt(cv::runtime_options{.io_threads = 1, .compute_threads = 1});
        CHECK(rt.options().backend == cv::io_backend::pread);
        cv::runtime explicit_uring(cv::runtime_options{.io_threads = 1, .compute_threads = 1, .backend = cv::io_backend::uring});
        CHECK(explicit_uring.options().backend == cv::io_backend::uring);
    }
    ::setenv("CONVEYOR_IO_BACKEND", "uring", 1);
    {
        cv::runtime rt(cv::runtime_options{.io_threads = 1, .compute_threads = 1});
        CHECK(rt.options().backend == cv::io_backend::uring);
    }
    ::setenv("CONVEYOR_IO_BACKEND", "nonsense", 1);
    {
        cv::runtime rt(cv::runtime_options{.io_threads = 1, .compute_threads = 1});
        CHECK(rt.options().backend == cv::io_backend::automatic);
    }
    if (old) ::setenv("CONVEYOR_IO_BACKEND", saved.c_str(), 1);
    else ::unsetenv("CONVEYOR_IO_BACKEND");
}

TEST_CASE("the compute and blocking pools run work off the I/O threads")
{
    cv::runtime rt(cv::runtime_options{.io_threads = 2, .compute_threads = 2, .blocking_threads = 2});
    const auto lanes = test::lane_threads(rt);
    for (bool blocking : {false, true}) {
        CAPTURE(blocking);
        std::promise<std::pair<int, std::thread::id>> where;
        auto f = where.get_future();
        auto work = [&where] { where.set_value({cv::detail::current_lane, std::this_thread::get_id()}); };
        if (blocking) asio::post(rt.blocking_executor(), work);
        else asio::post(rt.compute_executor(), work);
        REQUIRE(f.wait_for(test::generous) == std::future_status::ready);
        const auto [lane, id] = f.get();
        CHECK(lane == -1);
        CHECK(std::find(lanes.begin(), lanes.end(), id) == lanes.end());
    }
    CHECK(rt.blocking_executor() == rt.blocking_executor()); // created once
}

TEST_CASE("a runtime logs through its log option, and log_once once per topic")
{
    test::log_capture log;
    cv::runtime rt(cv::runtime_options{.io_threads = 1, .compute_threads = 1, .log = log.sink()});
    rt.log("hello");
    rt.log_once("uring", "io_uring unavailable, using pread");
    rt.log_once("uring", "io_uring unavailable, using pread (again)");
    rt.log_once("other", "another topic");
    rt.log_once("uring", "still not");
    CHECK(log.lines() == std::vector<std::string>{"hello", "io_uring unavailable, using pread", "another topic"});
    cv::runtime fresh(cv::runtime_options{.io_threads = 1, .compute_threads = 1, .log = log.sink()});
    fresh.log_once("uring", "per runtime");
    CHECK(log.lines().back() == "per runtime");
}

TEST_CASE("a runtime's buffer pool follows its options")
{
    cv::runtime rt(cv::runtime_options{.io_threads = 1, .compute_threads = 1, .buffer_pool_bytes = 0});
    { auto b = rt.buffers().acquire(10'000); CHECK(b.size() == 10'000); }
    CHECK(rt.buffers().cached_bytes() == 0);
    cv::runtime caching(cv::runtime_options{.io_threads = 1, .compute_threads = 1});
    { auto b = caching.buffers().acquire(10'000); }
    CHECK(caching.buffers().cached_bytes() > 0);
}

// ==== run_context ==============================================================================

TEST_CASE("a run records its first failure with context, hands it to the sink and cancels the rest")
{
    cv::runtime rt(cv::runtime_options{.io_threads = 1, .compute_threads = 1});
    auto ctx = std::make_shared<cv::run_context>(rt, 3);
    rt.attach(ctx);
    CHECK(ctx->epoch() == 3);
    CHECK(&ctx->rt() == &rt);
    auto sink = ctx->make_channel<int>(4);
    auto inner = ctx->make_channel<int>(4);
    ctx->set_sink(sink);
    CHECK_FALSE(ctx->stopping());
    CHECK_FALSE(ctx->failure());
    ctx->fail(std::make_exception_ptr(std::runtime_error("first")), "stage-a", "key-a");
    ctx->fail(std::make_exception_ptr(std::runtime_error("second")), "stage-b", "key-b"); // ignored
    CHECK(ctx->stopping());
    REQUIRE(ctx->failure());
    CHECK(what_of(ctx->failure()) == "conveyor: stage 'stage-a': item 'key-a': first");
    CHECK(inner->receiver_gone()); // cancelled
    CHECK(sink->receiver_gone());  // failed: senders stop; its receiver still gets the error
    std::vector<int> v;
    CHECK_THROWS_WITH(sink->receive_some_blocking(v, 1), "conveyor: stage 'stage-a': item 'key-a': first");
    CHECK(ctx->make_channel<int>(2)->receiver_gone()); // channels made after the stop start cancelled
}

TEST_CASE("a task's exception fails the run, naming its stage")
{
    cv::runtime rt(cv::runtime_options{.io_threads = 1, .compute_threads = 1});
    auto ctx = std::make_shared<cv::run_context>(rt, 0);
    rt.attach(ctx);
    ctx->spawn([]() -> asio::awaitable<void> {
        throw std::logic_error("oops");
        co_return;
    }(),
               "decoder");
    test::finishes_within(test::generous, "wait_idle after a failing task", [&] { ctx->wait_idle(); });
    CHECK(ctx->stopping());
    CHECK(what_of(ctx->failure()) == "conveyor: stage 'decoder': oops");
}

TEST_CASE("wait_idle waits until every task of the run has finished")
{
    cv::runtime rt(cv::runtime_options{.io_threads = 1, .compute_threads = 1});
    auto ctx = std::make_shared<cv::run_context>(rt, 0);
    rt.attach(ctx);
    auto ch = ctx->make_channel<int>(1);
    ctx->spawn([](std::shared_ptr<cv::detail::channel<int>> ch) -> asio::awaitable<void> { (void)co_await ch->receive(); }(ch),
               "waiter");
    std::atomic<bool> idle{false};
    std::thread waiter([&] {
        ctx->wait_idle();
        idle = true;
    });
    std::this_thread::sleep_for(50ms);
    CHECK_FALSE(idle); // the task still waits for an item
    ctx->cancel();     // its channel is cancelled: it ends
    test::finishes_within(test::generous, "wait_idle after cancel", [&] { waiter.join(); });
    CHECK(idle);
    CHECK_FALSE(ctx->failure()); // what cancelling causes is not a failure
}

TEST_CASE("on_cancel hooks run on their executor when the run stops, unless removed")
{
    cv::runtime rt(cv::runtime_options{.io_threads = 1, .compute_threads = 1});
    asio::io_context io;
    auto ctx = std::make_shared<cv::run_context>(rt, 0);
    int a = 0, b = 0, c = 0;
    const auto id_a = ctx->on_cancel(io.get_executor(), [&] { ++a; });
    const auto id_b = ctx->on_cancel(io.get_executor(), [&] { ++b; });
    CHECK(id_a != 0);
    CHECK(id_b != id_a);
    ctx->remove_on_cancel(id_b);
    ctx->remove_on_cancel(0); // harmless
    settle(io);
    CHECK(a == 0);
    ctx->cancel();
    CHECK(a == 0); // posted to its executor, not run inline
    settle(io);
    CHECK(a == 1);
    CHECK(b == 0);
    ctx->cancel(); // idempotent: hooks run once
    settle(io);
    CHECK(a == 1);
    CHECK(ctx->on_cancel(io.get_executor(), [&] { ++c; }) == 0); // already stopping: runs at once
    settle(io);
    CHECK(c == 1);
}

namespace {
/// A sink that holds the first fail() call until told to go on, to stop a run at the point
/// where a second failure can overtake the first.
class gated_sink final : public cv::detail::channel_base {
public:
    void cancel() noexcept override {}
    void fail(std::exception_ptr e) noexcept override
    {
        std::unique_lock lk(mu_);
        received_.push_back(std::move(e));
        if (received_.size() == 1) {
            first_inside_ = true;
            cv_.notify_all();
            cv_.wait_for(lk, test::generous, [&] { return released_; }); // bounded: never deadlock a fixed version
        }
    }
    void wait_first_inside()
    {
        std::unique_lock lk(mu_);
        REQUIRE(cv_.wait_for(lk, test::generous, [&] { return first_inside_; }));
    }
    void release()
    {
        std::lock_guard lk(mu_);
        released_ = true;
        cv_.notify_all();
    }
    std::vector<std::exception_ptr> received()
    {
        std::lock_guard lk(mu_);
        return received_;
    }

private:
    std::mutex mu_;
    std::condition_variable cv_;
    bool first_inside_ = false, released_ = false;
    std::vector<std::exception_ptr> received_;
};
} // namespace

// A second fail() arriving while the first is still being handed to the sink (two stages
// failing at once on different threads) must not replace the first error, nor fail the sink
// twice. (Regression test: fail() used to set stopping_ only later, in cancel().)
TEST_CASE("the first failure of a run wins, even when a second comes while the first is reported")
{
    cv::runtime rt(cv::runtime_options{.io_threads = 1, .compute_threads = 1});
    auto ctx = std::make_shared<cv::run_context>(rt, 0);
    auto sink = std::make_shared<gated_sink>();
    ctx->set_sink(sink);
    std::thread first([&] { ctx->fail(std::make_exception_ptr(std::runtime_error("first")), "one"); });
    sink->wait_first_inside(); // the first failure is recorded and being handed to the sink
    ctx->fail(std::make_exception_ptr(std::runtime_error("second")), "two");
    sink->release();
    first.join();
    CHECK(what_of(ctx->failure()) == "conveyor: stage 'one': first");
    const auto got = sink->received();
    CHECK_MESSAGE(got.size() == 1, "the sink was failed " << got.size() << " times");
    CHECK(ctx->stopping());
}

// ==== cancellation and shutdown ===============================================================

TEST_CASE("breaking out of a loop over a run stops the whole pipeline")
{
    cv::runtime rt(cv::runtime_options{.io_threads = 2, .compute_threads = 2});
    auto calls = std::make_shared<std::atomic<std::uint64_t>>(0);
    auto p = cv::generate(1'000'000'000, count_calls(calls)).on(rt) |
             cv::map([](int x) { return x * 2; }, {.concurrency = 8, .where = cv::run_on::compute});
    int seen = 0;
    test::finishes_within(test::generous, "breaking out of a loop over a run", [&] {
        for (int x : p.run()) {
            CHECK(x == 2 * seen);
            if (++seen == 100) break;
        }
    });
    CHECK(seen == 100);
    const auto after = calls->load();
    CHECK(after >= 100);
    CHECK(after < 100'000); // bounded by the channels, not by the billion items
    std::this_thread::sleep_for(50ms); // a task left running would call the generator again
    CHECK(*calls == after);
}

TEST_CASE("breaking out of a loop over a pipeline and letting it go frees everything the run held")
{
    cv::runtime rt(cv::runtime_options{.io_threads = 2, .compute_threads = 2});
    auto live = std::make_shared<std::atomic<int>>(0);
    auto calls = std::make_shared<std::atomic<std::uint64_t>>(0);
    test::finishes_within(test::generous, "breaking out of a loop over a pipeline", [&] {
        auto p = cv::generate(1'000'000'000, [live, calls](std::uint64_t i) {
                     ++*calls;
                     return test::tracked(live, static_cast<int>(i));
                 }).on(rt) |
                 cv::map([](test::tracked t) { return t; }, {.concurrency = 8, .where = cv::run_on::compute});
        int n = 0;
        for (auto& t : p) {
            CHECK(t.value == n);
            if (++n == 50) break;
        }
    });
    CHECK(test::eventually([&] { return *live == 0; }));
    const auto after = calls->load();
    std::this_thread::sleep_for(50ms);
    CHECK(*calls == after);
}

// Regression test, fixed bug (design gap): the design promises "Breaking out of the loop ... cancels all in-flight
// work promptly", but a loop directly over a pipeline (`for (auto& x : p)`) runs a range
// owned by the pipeline (pipeline::current_), and the iterator does not own it: after
// `break` the run goes on in the background (filling every channel) and holds its items
// until the pipeline is destroyed or iterated again. A fix: make the iterator that
// pipeline::begin() returns own the run (C++20 input iterators may be move-only).
TEST_CASE("breaking out of a loop over a pipeline stops its run at once")
{
    cv::runtime rt(cv::runtime_options{.io_threads = 1, .compute_threads = 1});
    auto live = std::make_shared<std::atomic<int>>(0);
    auto p = cv::generate(1'000'000'000, [live](std::uint64_t i) { return test::tracked(live, static_cast<int>(i)); }).on(rt);
    test::finishes_within(test::generous, "breaking out of a loop over a pipeline", [&] {
        int n = 0;
        for (auto& t : p) {
            (void)t;
            if (++n == 10) break;
        }
    });
    CHECK_MESSAGE(test::eventually([&] { return *live == 0; }, 2s),
                  live->load() << " items are still held by a run that nobody reads any more");
}

// run_context::cancel() delivers a terminal Asio cancellation to whatever each task awaits,
// so a user's own timer (or socket) does not hold up the range's destructor.
// (Regression test: cancel() used to stop only channels and on_cancel hooks.)
TEST_CASE("destroying a range while a coroutine map waits on a long timer returns promptly")
{
    cv::runtime rt(cv::runtime_options{.io_threads = 1, .compute_threads = 1});
    struct timers {
        std::mutex mu;
        std::vector<std::shared_ptr<asio::steady_timer>> all;
    };
    auto reg = std::make_shared<timers>();
    auto p = cv::from_range(iota(100)).on(rt) | cv::map(
                                                    [reg](int x) -> asio::awaitable<int> {
                                                        auto t = std::make_shared<asio::steady_timer>(co_await asio::this_coro::executor, 1h);
                                                        {
                                                            std::lock_guard lk(reg->mu);
                                                            reg->all.push_back(t);
                                                        }
                                                        co_await t->async_wait(asio::use_awaitable);
                                                        co_return x;
                                                    },
                                                    {.concurrency = 4});
    std::optional<cv::range<int>> r(p.run());
    REQUIRE(test::eventually([&] {
        std::lock_guard lk(reg->mu);
        return reg->all.size() == 4;
    }));
    const bool ended = test::finishes_within(
        test::known_hang, "destroying a range whose map waits on a 1-hour timer", [&] { r.reset(); },
        [&] {
            std::lock_guard lk(reg->mu);
            for (auto& t : reg->all) asio::post(t->get_executor(), [t] { t->cancel(); });
        });
    CHECK_MESSAGE(ended, "the range's destructor waited for the user's timer instead of cancelling it");
}

TEST_CASE("destroying the runtime while a coroutine map waits on a long timer returns promptly")
{
    std::optional<cv::runtime> rt(std::in_place, cv::runtime_options{.io_threads = 1, .compute_threads = 1});
    auto waiting = std::make_shared<std::atomic<int>>(0);
    auto p = cv::from_range(iota(100)).on(*rt) | cv::map(
                                                     [waiting](int x) -> asio::awaitable<int> {
                                                         asio::steady_timer t(co_await asio::this_coro::executor, 1h);
                                                         ++*waiting;
                                                         co_await t.async_wait(asio::use_awaitable);
                                                         co_return x;
                                                     },
                                                     {.concurrency = 4});
    auto r = p.run();
    REQUIRE(test::eventually([&] { return *waiting == 4; }));
    test::finishes_within(test::generous, "destroying a runtime whose run waits on 1-hour timers", [&] { rt.reset(); });
    std::exception_ptr caught;
    test::finishes_within(test::generous, "reading a run whose runtime is gone", [&] {
        try {
            (void)r.next();
        } catch (...) {
            caught = std::current_exception();
        }
    });
    CHECK(code_of(caught) == cv::errc::cancelled);
}

TEST_CASE("a stage's on_cancel hook interrupts its pending operation when the range is destroyed")
{
    cv::runtime rt(cv::runtime_options{.io_threads = 1, .compute_threads = 1});
    auto waiting = std::make_shared<std::atomic<bool>>(false);
    auto interrupted = std::make_shared<std::atomic<bool>>(false);
    auto p = cv::pipeline<int>([waiting, interrupted](const std::shared_ptr<cv::run_context>& ctx) {
                 return cv::make_stream<int>(
                     ctx, "waiter", 4,
                     [ctx = ctx.get(), waiting, interrupted](cv::detail::channel<int>& out) -> asio::awaitable<void> {
                         auto ex = co_await asio::this_coro::executor;
                         auto t = std::make_shared<asio::steady_timer>(ex, 1h);
                         const auto id = ctx->on_cancel(ex, [t] { t->cancel(); });
                         *waiting = true;
                         boost::system::error_code ec;
                         co_await t->async_wait(asio::redirect_error(asio::use_awaitable, ec));
                         ctx->remove_on_cancel(id);
                         *interrupted = ec == asio::error::operation_aborted;
                         (void)co_await out.send(1);
                     });
             }).on(rt);
    std::optional<cv::range<int>> r(p.run());
    REQUIRE(test::eventually([&] { return waiting->load(); }));
    test::finishes_within(test::generous, "destroying a range whose stage registered on_cancel", [&] { r.reset(); });
    CHECK(*interrupted);
}

TEST_CASE("destroying the runtime while a run is in flight neither hangs nor crashes")
{
    std::optional<cv::range<int>> r;
    std::vector<int> before;
    test::finishes_within(test::generous, "destroying a runtime with a run in flight", [&] {
        cv::runtime rt(cv::runtime_options{.io_threads = 2, .compute_threads = 2});
        auto p = cv::generate(1'000'000'000, [](std::uint64_t i) { return static_cast<int>(i); }).on(rt) |
                 cv::map([](int x) { return x * 2; }, {.concurrency = 8, .where = cv::run_on::compute});
        r.emplace(p.run());
        for (int i = 0; i < 10; ++i) before.push_back(r->next().value());
    }); // the runtime goes first; the range lives on
    std::vector<int> expected;
    for (int i = 0; i < 10; ++i) expected.push_back(2 * i);
    CHECK(before == expected);

    // What the range had already taken can still be read; then it says it was cancelled.
    int more = 0;
    std::exception_ptr caught;
    test::finishes_within(test::generous, "reading a run whose runtime is gone", [&] {
        try {
            while (r->next()) ++more;
        } catch (...) {
            caught = std::current_exception();
        }
    });
    CHECK(more < 1000); // only what the range had already taken from the sink
    REQUIRE(caught);
    CHECK(code_of(caught) == cv::errc::cancelled);
    test::finishes_within(test::generous, "destroying a range after its runtime", [&] { r.reset(); });
}

TEST_CASE("a consumer blocked in next() wakes with errc::cancelled when the runtime is destroyed")
{
    std::optional<cv::runtime> rt(std::in_place, cv::runtime_options{.io_threads = 1, .compute_threads = 1});
    // A run that never produces anything: the consumer waits.
    auto p = cv::generate(1'000'000'000, [](std::uint64_t i) { return static_cast<int>(i); }).on(*rt) |
             cv::filter([](const int&) { return false; });
    auto r = p.run();
    std::exception_ptr caught;
    std::atomic<bool> returned{false};
    std::thread consumer([&] {
        try {
            (void)r.next();
            returned = true;
        } catch (...) {
            caught = std::current_exception();
        }
    });
    std::this_thread::sleep_for(20ms); // most likely blocked by now; either way it must wake
    test::finishes_within(test::generous, "destroying a runtime with a blocked consumer", [&] { rt.reset(); });
    test::finishes_within(test::generous, "the consumer to wake", [&] { consumer.join(); });
    CHECK_FALSE(returned);
    REQUIRE(caught);
    CHECK(code_of(caught) == cv::errc::cancelled);
}
