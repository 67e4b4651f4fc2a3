// conveyor/s3/detail/impl/throttle.ipp — definitions for conveyor/s3/detail/throttle.hpp.
#ifndef CONVEYOR_S3_DETAIL_IMPL_THROTTLE_IPP
#define CONVEYOR_S3_DETAIL_IMPL_THROTTLE_IPP

#include <conveyor/s3/detail/throttle.hpp>

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>

namespace conveyor::s3::detail {

// A request waiting for room: its timer, on its own executor, is cancelled (there) when it
// is granted a place.
struct concurrency_limit::waiter {
    explicit waiter(const asio::any_io_executor& ex) : timer(ex, asio::steady_timer::time_point::max()) {}
    asio::steady_timer timer;
    bool granted = false;  // under the limit's lock
    bool gone = false;     // the request stopped waiting (cancelled)
};

CONVEYOR_DECL concurrency_limit::concurrency_limit(unsigned floor, unsigned ceiling, std::chrono::milliseconds cool_down)
    : floor_(std::max(1u, floor)), ceiling_(std::max(std::max(1u, floor), ceiling)), cool_down_(cool_down), limit_(ceiling_),
      lowest_(ceiling_)
{
}

CONVEYOR_DECL asio::awaitable<void> concurrency_limit::acquire()
{
    std::shared_ptr<waiter> w;
    {
        std::lock_guard lk(mu_);
        if (waiters_.empty() && in_flight_ < static_cast<unsigned>(limit_)) {
            ++in_flight_;
            co_return;
        }
        w = std::make_shared<waiter>(co_await asio::this_coro::executor);
        waiters_.push_back(w);
        ++waited_;
    }
    boost::system::error_code ec;
    co_await w->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    {
        std::lock_guard lk(mu_);
        if (w->granted) co_return;
        // Cancelled before a place came: out of the queue.
        w->gone = true;
        std::erase(waiters_, w);
    }
    throw boost::system::system_error(asio::error::operation_aborted);
}

CONVEYOR_DECL void concurrency_limit::grant_locked()
{
    while (!waiters_.empty() && in_flight_ < static_cast<unsigned>(limit_)) {
        std::shared_ptr<waiter> w = std::move(waiters_.front());
        waiters_.pop_front();
        if (w->gone) continue;
        w->granted = true;
        ++in_flight_;
        auto ex = w->timer.get_executor();
        asio::post(ex, [w = std::move(w)] { w->timer.cancel(); });
    }
}

CONVEYOR_DECL void concurrency_limit::release(outcome o, std::chrono::steady_clock::duration took)
{
    std::lock_guard lk(mu_);
    if (in_flight_ > 0) --in_flight_;
    if (const double s = std::chrono::duration<double>(took).count(); s > 0)
        round_trip_s_ = round_trip_s_ > 0 ? round_trip_s_ + 0.125 * (s - round_trip_s_) : s;
    if (o == outcome::throttled) {
        ++throttled_;
        const auto now = std::chrono::steady_clock::now();
        const auto window = std::max<std::chrono::steady_clock::duration>(
            cool_down_, std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(round_trip_s_)));
        if (now - last_decrease_ >= window) {
            limit_ = std::max(floor_, limit_ * 0.7);
            lowest_ = std::min(lowest_, limit_);
            last_decrease_ = now;
        }
    } else if (o == outcome::healthy) {
        limit_ = std::min(ceiling_, limit_ + 0.5 / limit_);
    }
    grant_locked();
}

CONVEYOR_DECL concurrency_limit::counters concurrency_limit::stats() const
{
    std::lock_guard lk(mu_);
    return {limit_, lowest_, throttled_, waited_};
}

} // namespace conveyor::s3::detail

#endif
