// Tests of conveyor/core/memory_budget.hpp: leases, waiting for room (FIFO), requests
// larger than the budget, leases that live as long as a chunk's last slice, cancellation,
// counters, many threads at once, and the runtime's budget.
#include "support.hpp"

#include <conveyor/core/memory_budget.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/slice.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <atomic>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace asio = boost::asio;
namespace cv = conveyor;

namespace {

// Handlers are posted, never called inside acquire or release: settle runs them.
using test::settle;

/// The outcome of one async_acquire, filled in by its handler.
struct result {
    bool done = false;
    std::error_code ec;
    cv::memory_lease lease;
};

/// Starts an acquire of `n` bytes whose handler runs on `ctx` and records into `r`.
void acquire(cv::memory_budget& b, asio::io_context& ctx, std::size_t n, result& r, std::vector<std::size_t>* order = nullptr)
{
    b.async_acquire(n, asio::bind_executor(ctx, [&r, order, n](std::error_code ec, cv::memory_lease l) {
                        r.done = true;
                        r.ec = ec;
                        r.lease = std::move(l);
                        if (order) order->push_back(n);
                    }));
}

} // namespace

TEST_CASE("memory_budget grants what fits at once, counts it, and takes it back when the lease goes")
{
    asio::io_context ctx;
    cv::memory_budget b(100);
    CHECK(b.limit() == 100);
    result r1, r2;
    acquire(b, ctx, 40, r1);
    CHECK_FALSE(r1.done); // posted, not inline
    settle(ctx);
    REQUIRE(r1.done);
    CHECK_FALSE(r1.ec);
    CHECK(r1.lease.bytes() == 40);
    acquire(b, ctx, 60, r2);
    settle(ctx);
    REQUIRE(r2.done);
    CHECK(b.in_use() == 100);
    CHECK(b.peak() == 100);
    CHECK(b.waits() == 0);
    r1.lease = {};
    CHECK(b.in_use() == 60);
    r2.lease.release();
    CHECK(r2.lease.bytes() == 0);
    CHECK(b.in_use() == 0);
    CHECK(b.peak() == 100);
    const auto st = b.stats();
    CHECK(st.acquires == 2);
    CHECK(st.waiting == 0);
}

TEST_CASE("memory_budget makes an acquire wait until the bytes fit, without failing")
{
    asio::io_context ctx;
    cv::memory_budget b(100);
    auto held = b.try_acquire(60);
    REQUIRE(held);
    result r;
    acquire(b, ctx, 60, r);
    settle(ctx);
    CHECK_FALSE(r.done);
    CHECK(b.waits() == 1);
    CHECK(b.stats().waiting == 1);
    CHECK_FALSE(b.try_acquire(1)); // someone waits: no jumping the queue
    held->release();
    CHECK(b.in_use() == 60); // granted to the waiter at the release
    settle(ctx);
    REQUIRE(r.done);
    CHECK_FALSE(r.ec);
    CHECK(r.lease.bytes() == 60);
    CHECK(b.stats().waiting == 0);
}

TEST_CASE("memory_budget serves waiters first come, first served: a small request does not overtake a large one")
{
    asio::io_context ctx;
    cv::memory_budget b(100);
    auto held = b.try_acquire(90);
    REQUIRE(held);
    std::vector<std::size_t> order;
    result big, small;
    acquire(b, ctx, 80, big, &order);
    acquire(b, ctx, 5, small, &order); // would fit (95 <= 100), but waits behind the 80
    settle(ctx);
    CHECK_FALSE(big.done);
    CHECK_FALSE(small.done);
    held.reset();
    settle(ctx);
    REQUIRE(big.done);
    REQUIRE(small.done);
    CHECK(order == std::vector<std::size_t>{80, 5});
    CHECK(b.in_use() == 85);
}

TEST_CASE("memory_budget lets a request larger than the whole budget through alone, never deadlocking")
{
    asio::io_context ctx;
    cv::memory_budget b(100);
    result huge, after;
    acquire(b, ctx, 500, huge);
    settle(ctx);
    REQUIRE(huge.done); // nothing else leased: let through
    CHECK(b.in_use() == 500);
    CHECK(b.stats().oversize == 1);
    acquire(b, ctx, 10, after);
    settle(ctx);
    CHECK_FALSE(after.done); // nothing fits beside it
    huge.lease = {};
    settle(ctx);
    CHECK(after.done);

    // An oversize request waits for the others to finish, then goes alone.
    result huge2, tail;
    acquire(b, ctx, 1000, huge2);
    settle(ctx);
    CHECK_FALSE(huge2.done);
    acquire(b, ctx, 1, tail);
    after.lease = {};
    settle(ctx);
    CHECK(huge2.done);
    CHECK_FALSE(tail.done);
    huge2.lease = {};
    settle(ctx);
    CHECK(tail.done);
}

TEST_CASE("memory_budget: a leased slice gives its bytes back when the last slice of its storage dies")
{
    asio::io_context ctx;
    cv::memory_budget b(4096);
    cv::buffer_pool pool;
    auto lease = b.try_acquire(4096);
    REQUIRE(lease);
    cv::buffer buf = pool.acquire(4096);
    std::memset(buf.data(), 'x', buf.size());
    cv::slice whole = cv::leased_slice(std::move(buf), std::move(*lease));
    CHECK(whole.size() == 4096);
    CHECK(whole.view().substr(0, 3) == "xxx");
    cv::slice part = whole.sub(100, 10);
    result waiting;
    acquire(b, ctx, 1, waiting);
    whole = {};
    settle(ctx);
    CHECK(b.in_use() == 4096); // `part` still holds the storage
    CHECK_FALSE(waiting.done);
    CHECK(part.view() == "xxxxxxxxxx");
    part = {};
    CHECK(b.in_use() == 1); // released, and the waiter granted at once
    settle(ctx);
    CHECK(waiting.done);
}

TEST_CASE("memory_budget: a cancelled waiter leaves the queue with operation_canceled, and those behind it move up")
{
    asio::io_context ctx;
    cv::memory_budget b(100);
    auto held = b.try_acquire(50);
    REQUIRE(held);
    asio::cancellation_signal sig;
    result big, small;
    b.async_acquire(80, asio::bind_cancellation_slot(sig.slot(), asio::bind_executor(ctx, [&](std::error_code ec, cv::memory_lease l) {
                                                         big.done = true;
                                                         big.ec = ec;
                                                         big.lease = std::move(l);
                                                     })));
    acquire(b, ctx, 30, small);
    settle(ctx);
    CHECK_FALSE(big.done);
    CHECK_FALSE(small.done);
    sig.emit(asio::cancellation_type::terminal);
    settle(ctx);
    REQUIRE(big.done);
    CHECK(big.ec == std::errc::operation_canceled);
    CHECK(big.lease.bytes() == 0);
    CHECK(small.done); // 50 + 30 fit once the 80 is gone
    CHECK(b.in_use() == 80);
    CHECK(b.stats().waiting == 0);
}

TEST_CASE("memory_budget holds its limit with four threads acquiring and releasing at once")
{
    cv::memory_budget b(1000);
    std::atomic<std::size_t> over{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            asio::io_context ctx;
            auto work = asio::make_work_guard(ctx); // run_one blocks until a grant is posted
            int granted = 0;
            for (int i = 0; i < 500; ++i) {
                const std::size_t n = 50 + static_cast<std::size_t>((i * 37 + t * 11) % 300);
                cv::memory_lease held;
                b.async_acquire(n, asio::bind_executor(ctx, [&](std::error_code ec, cv::memory_lease l) {
                                    if (!ec) ++granted;
                                    if (b.in_use() > 1000) over.fetch_add(1);
                                    held = std::move(l);
                                }));
                while (granted <= i) ctx.run_one();
                std::this_thread::yield(); // hold it a moment, then let go (the lease's destructor)
            }
        });
    }
    for (auto& th : threads) th.join();
    CHECK(over.load() == 0);
    CHECK(b.in_use() == 0);
    CHECK(b.peak() <= 1000);
    CHECK(b.stats().acquires == 2000);
}

TEST_CASE("a runtime's memory budget is a quarter of memory by default, configurable, or unlimited")
{
    const std::size_t def = cv::memory_budget::default_limit();
    CHECK(def >= (std::size_t{256} << 20));
    {
        cv::runtime rt({.io_threads = 1, .compute_threads = 1});
        CHECK(rt.memory().limit() == def);
        CHECK(rt.options().memory_limit == def);
    }
    {
        cv::runtime rt({.io_threads = 1, .compute_threads = 1, .memory_limit = 12345});
        CHECK(rt.memory().limit() == 12345);
    }
    {
        cv::runtime rt({.io_threads = 1, .compute_threads = 1, .memory_limit = cv::memory_budget::unlimited});
        auto l = rt.memory().try_acquire(std::size_t{1} << 50);
        CHECK(l);
        CHECK(rt.memory().stats().oversize == 0);
    }
}
