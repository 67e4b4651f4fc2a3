// Tests of conveyor/core/run_context.hpp: a run's failure, tasks, wait_idle, on_cancel
// hooks, and cancelling what a run's tasks await.
#include "support.hpp"

#include <conveyor/core/detail/channel.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/run_context.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/stages.hpp>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <condition_variable>
#include <stdexcept>

namespace asio = boost::asio;
namespace cv = conveyor;
using namespace std::chrono_literals;
using test::iota;
using test::settle;
using test::what_of;

TEST_CASE("a run records its first failure with context, hands it to the sink and cancels the rest")
{
    cv::runtime rt(cv::runtime_options{.io_threads = 1, .compute_threads = 1});
    auto ctx = std::make_shared<cv::run_context>(rt, 3);
    rt.attach(ctx);
    CHECK(ctx->epoch() == 3);
    CHECK(&ctx->rt() == &rt);
    auto sink = cv::detail::make_channel<int>(*ctx, 4);
    auto inner = cv::detail::make_channel<int>(*ctx, 4);
    cv::detail::set_sink(*ctx, sink);
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
    CHECK(cv::detail::make_channel<int>(*ctx, 2)->receiver_gone()); // channels made after the stop start cancelled
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
    auto ch = cv::detail::make_channel<int>(*ctx, 1);
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

// Regression test, fixed bug: a task's completion handler counted the task out (waking
// wait_idle) while it still held the run, and let go of it only afterwards, on the I/O
// thread. So when a range's destructor returned, the run (its channels and the items in
// them, its hooks, what its stages hold: sockets, a client, slabs) could still be alive
// for a moment, destroyed on an I/O thread after the consumer had gone on. Seen in about
// half the runs of the cancellation storm (tests/s3/cancel.cpp); here the tasks end on
// cancellation just as the consumer waits for them, as there, many times over.
TEST_CASE("once wait_idle returns, no finished task holds the run any more")
{
    cv::runtime rt(cv::runtime_options{.io_threads = 2, .compute_threads = 1});
    int outlived = 0;
    for (int round = 0; round < 300; ++round) {
        auto ctx = std::make_shared<cv::run_context>(rt, 0);
        rt.attach(ctx);
        auto ch = cv::detail::make_channel<int>(*ctx, 1);
        for (std::size_t lane = 0; lane < 2; ++lane)
            ctx->spawn(rt.io_executor(lane),
                       [](std::shared_ptr<cv::detail::channel<int>> ch) -> asio::awaitable<void> { (void)co_await ch->receive(); }(ch),
                       "waiter");
        ch.reset();
        ctx->cancel(); // the tasks end now, while the consumer waits for them (a range's destructor)
        ctx->wait_idle();
        std::weak_ptr<cv::run_context> w = ctx;
        ctx.reset();
        if (!w.expired()) {
            ++outlived;
            CHECK(test::eventually([&] { return w.expired(); }, 10s)); // not leaked: only late
        }
    }
    CHECK_MESSAGE(outlived == 0, "in " << outlived << " of 300 rounds a finished task still held the run after wait_idle returned");
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
    cv::detail::set_sink(*ctx, sink);
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

TEST_CASE("a stage's on_cancel hook interrupts its pending operation when the range is destroyed")
{
    cv::runtime rt(cv::runtime_options{.io_threads = 1, .compute_threads = 1});
    auto waiting = std::make_shared<std::atomic<bool>>(false);
    auto interrupted = std::make_shared<std::atomic<bool>>(false);
    auto p = cv::pipeline<int>([waiting, interrupted](const std::shared_ptr<cv::run_context>& ctx) {
                 return cv::make_stream<int>(
                     ctx, "waiter", 4,
                     [ctx = ctx.get(), waiting, interrupted](cv::sink<int>& out) -> asio::awaitable<void> {
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
