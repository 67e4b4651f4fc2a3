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
struct send_limit::waiter {
    explicit waiter(const asio::any_io_executor& ex) : timer(ex, asio::steady_timer::time_point::max()) {}
    asio::steady_timer timer;
    bool granted = false;  // under the limit's lock
    bool gone = false;     // the request stopped waiting (cancelled)
};

CONVEYOR_DECL send_limit::send_limit(unsigned floor, unsigned ceiling, std::chrono::milliseconds cool_down, std::chrono::milliseconds probe)
    : floor_(std::max(1u, floor)), ceiling_(std::max(std::max(1u, floor), ceiling)), cool_down_(cool_down),
      probe_s_(std::max(0.001, std::chrono::duration<double>(probe).count())), limit_(ceiling_), lowest_(ceiling_)
{
}

// CUBIC's window after a loss, as a rate: W(t) = W_max (1 + (1 - beta) ((t - K) / K)^3), with
// beta the cut and K the probe: beta W_max just after the cut, W_max at K, then faster; 0
// (no limit) once it is `rate_dropped` times W_max.
CONVEYOR_DECL double send_limit::rate_locked(clock::time_point now) const
{
    if (rate_max_ <= 0) return 0;
    const double x = std::chrono::duration<double>(now - rate_cut_).count() / probe_s_ - 1;
    const double r = rate_max_ * (1 + (1 - rate_cut) * x * x * x);
    return r >= rate_dropped * rate_max_ ? 0 : std::max(rate_floor, r);
}

CONVEYOR_DECL bool send_limit::may_send_locked(clock::time_point now)
{
    if (in_flight_ >= static_cast<unsigned>(limit_)) return false;
    if (rate_max_ <= 0) return true;
    if (rate_locked(now) == 0) { // the store has taken far more than it throttled at: no rate limit
        rate_max_ = 0;
        return true;
    }
    return next_send_ <= now;
}

CONVEYOR_DECL void send_limit::sent_locked(clock::time_point now)
{
    ++in_flight_;
    if (const double r = rate_locked(now); r > 0) {
        // The next turn one interval after this one was due; a turn long past (an idle
        // client) starts from now, so at most two go at once.
        const auto interval = std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(1 / r));
        next_send_ = std::max(next_send_ + interval, now);
    }
}

CONVEYOR_DECL asio::awaitable<void> send_limit::acquire()
{
    std::shared_ptr<waiter> w;
    {
        std::lock_guard lk(mu_);
        const auto now = clock::now();
        if (waiters_.empty() && may_send_locked(now)) {
            sent_locked(now);
            co_return;
        }
        w = std::make_shared<waiter>(co_await asio::this_coro::executor);
        waiters_.push_back(w);
        ++waited_;
        grant_locked(); // room but not yet its turn: the pacer's timer
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

CONVEYOR_DECL void send_limit::grant_locked()
{
    const auto now = clock::now();
    while (!waiters_.empty()) {
        if (waiters_.front()->gone) {
            waiters_.pop_front();
            continue;
        }
        if (!may_send_locked(now)) break;
        std::shared_ptr<waiter> w = std::move(waiters_.front());
        waiters_.pop_front();
        w->granted = true;
        sent_locked(now);
        auto ex = w->timer.get_executor();
        asio::post(ex, [w = std::move(w)] { w->timer.cancel(); });
    }
    // Room, but the next turn to send is to come: a timer grants it then.
    if (waiters_.empty() || pacer_armed_ || in_flight_ >= static_cast<unsigned>(limit_)) return;
    try {
        auto t = std::make_shared<asio::steady_timer>(waiters_.front()->timer.get_executor(), next_send_);
        t->async_wait([t, self = weak_from_this()](const boost::system::error_code&) {
            if (auto l = self.lock()) {
                std::lock_guard lk(l->mu_);
                l->pacer_armed_ = false;
                l->grant_locked();
            }
        });
        pacer_armed_ = true;
    } catch (...) {
        // No timer (out of memory): the next release or acquire grants the turn.
    }
}

CONVEYOR_DECL void send_limit::release(outcome o, clock::duration took)
{
    std::lock_guard lk(mu_);
    if (in_flight_ > 0) --in_flight_;
    if (const double s = std::chrono::duration<double>(took).count(); s > 0)
        round_trip_s_ = round_trip_s_ > 0 ? round_trip_s_ + 0.125 * (s - round_trip_s_) : s;
    if (o == outcome::throttled) {
        ++throttled_;
        const auto now = clock::now();
        const auto window = std::max<clock::duration>(
            cool_down_, std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(round_trip_s_)));
        if (now - last_decrease_ >= window) {
            last_decrease_ = now;
            // The rate the requests were going at: those in flight (this one too) over the
            // time of one (Little's law), or the rate allowed when that is less.
            const double allowed = rate_locked(now);
            double sent = round_trip_s_ > 0 ? (in_flight_ + 1) / round_trip_s_ : 0;
            if (allowed > 0) {
                sent = sent > 0 ? std::min(sent, allowed) : allowed;
            } else {
                // No rate limit yet: the in-flight limit falls too. Under one, the requests in
                // flight follow the rate, and cutting both would cut twice.
                limit_ = std::max(floor_, limit_ * 0.7);
                lowest_ = std::min(lowest_, limit_);
            }
            if (sent > 0) {
                rate_max_ = std::max(rate_floor, sent);
                rate_cut_ = now;
                const double r = rate_locked(now);
                lowest_rate_ = lowest_rate_ > 0 ? std::min(lowest_rate_, r) : r;
            }
        }
    } else if (o == outcome::healthy) {
        limit_ = std::min(ceiling_, limit_ + 0.5 / limit_);
    }
    grant_locked();
}

CONVEYOR_DECL send_limit::counters send_limit::stats() const
{
    std::lock_guard lk(mu_);
    return {limit_, lowest_, rate_locked(clock::now()), lowest_rate_, throttled_, waited_};
}

} // namespace conveyor::s3::detail

#endif
