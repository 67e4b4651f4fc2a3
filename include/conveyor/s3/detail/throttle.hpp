// conveyor/s3/detail/throttle.hpp — how the S3 client backs off when a store throttles: per
// endpoint and bucket, a limit on requests in flight and on requests sent per second that
// fall on throttling and grow back while replies are healthy, and the AWS SDKs' retry quota
// (internal: the client's; definitions in detail/impl/throttle.ipp).
#ifndef CONVEYOR_S3_DETAIL_THROTTLE_HPP
#define CONVEYOR_S3_DETAIL_THROTTLE_HPP

#include <conveyor/detail/config.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>

namespace conveyor::s3::detail {

namespace asio = boost::asio;

/** The retry quota of the AWS SDKs' standard retry mode: a bucket of tokens that retries
    take from (5 each, 10 after a timeout) and successes put back (the retry's cost when
    a retried request succeeds, else 1), up to its capacity. A dead or throttling endpoint
    drains it, and then requests fail at their first error instead of storming it with
    retries; healthy traffic refills it.

    @par Thread Safety
    Safe.
*/
class retry_quota {
public:
    static constexpr unsigned retry_cost = 5, timeout_cost = 10;

    explicit retry_quota(unsigned capacity) : capacity_(capacity), tokens_(capacity) {}

    /// Takes a retry's tokens; the cost taken (0: the quota is spent, do not retry).
    unsigned take(bool after_timeout)
    {
        const unsigned cost = after_timeout ? timeout_cost : retry_cost;
        std::lock_guard lk(mu_);
        if (tokens_ < cost) return 0;
        tokens_ -= cost;
        return cost;
    }

    /// A request succeeded; `retry_cost_taken` is what its last retry took (0: none).
    void on_success(unsigned retry_cost_taken)
    {
        std::lock_guard lk(mu_);
        tokens_ = std::min(capacity_, tokens_ + (retry_cost_taken ? retry_cost_taken : 1));
    }

    unsigned tokens() const
    {
        std::lock_guard lk(mu_);
        return tokens_;
    }

private:
    mutable std::mutex mu_;
    unsigned capacity_, tokens_;
};

/** How fast requests go to one endpoint and bucket: a limit on requests in flight and, once
    the store has throttled, a limit on requests sent per second.

    In flight: `ceiling` at first; on a throttling reply 0.7 times as many, never under
    `floor`; after each `limit` healthy replies half a place more, up to `ceiling`.

    Sends per second: none at first. A throttling reply sets the rate to 0.8 times the
    rate the requests were going at (those in flight over the smoothed time of a request,
    or the rate allowed, whichever is less), and the rate then grows back along CUBIC's
    curve: concave up to where the store throttled, which it reaches `probe` later, then
    convex past it. Sends are spaced evenly (one at most every 1/rate), so a store that
    throttles above a rate sees one request too many at a time, not a round trip's burst;
    a store that stops throttling sees the rate triple within about 2.7 `probe`s, and once
    the rate is 4 times where it was throttled the limit is dropped.

    Both cut at most once per round trip (the smoothed time of a request, at least
    `cool_down`): the replies to one burst count once, as TCP halves its window once per
    window. A request waits for room and its turn to be sent (first come, first served)
    and gives its place back with its outcome and how long it took.

    @par Thread Safety
    Safe: requests on any of the runtime's I/O threads may wait at once; each is resumed on
    its own executor.
*/
class send_limit : public std::enable_shared_from_this<send_limit> {
public:
    CONVEYOR_DECL send_limit(unsigned floor, unsigned ceiling, std::chrono::milliseconds cool_down = std::chrono::milliseconds(1),
                             std::chrono::milliseconds probe = std::chrono::seconds(1));

    /// A place in flight and a turn to send, the place held until `release`.
    CONVEYOR_DECL asio::awaitable<void> acquire();

    enum class outcome { healthy, throttled, other };
    CONVEYOR_DECL void release(outcome o, std::chrono::steady_clock::duration took = {});

    struct counters {
        double limit = 0;            ///< requests in flight allowed now
        double lowest = 0;           ///< the lowest that has been
        double rate = 0;             ///< requests per second allowed now (0: no limit)
        double lowest_rate = 0;      ///< the lowest that has been (0: never limited)
        std::uint64_t throttled = 0; ///< throttling replies seen
        std::uint64_t waited = 0;    ///< requests that waited for room or their turn
    };
    CONVEYOR_DECL counters stats() const;

private:
    using clock = std::chrono::steady_clock;
    static constexpr double rate_cut = 0.8;   // the rate after a throttle, of the rate before it
    static constexpr double rate_floor = 0.5; // requests per second, at least (the AWS SDKs' minimum)
    static constexpr double rate_dropped = 4; // no rate limit once it has grown to this times where it was throttled
    struct waiter;
    CONVEYOR_DECL double rate_locked(clock::time_point now) const;
    CONVEYOR_DECL bool may_send_locked(clock::time_point now);
    CONVEYOR_DECL void sent_locked(clock::time_point now);
    CONVEYOR_DECL void grant_locked();

    const double floor_, ceiling_;
    const std::chrono::milliseconds cool_down_;
    const double probe_s_;
    mutable std::mutex mu_;
    double limit_;
    double lowest_;
    unsigned in_flight_ = 0;
    clock::time_point last_decrease_{};
    double round_trip_s_ = 0; // smoothed time of a request
    double rate_max_ = 0;     // where the store last throttled, requests/s (0: no rate limit)
    double lowest_rate_ = 0;
    clock::time_point rate_cut_{};  // when it did
    clock::time_point next_send_{}; // the next turn to send, with a rate limit
    bool pacer_armed_ = false;      // a timer will grant the next turn
    std::deque<std::shared_ptr<waiter>> waiters_;
    std::uint64_t throttled_ = 0, waited_ = 0;
};

/// A place taken from a limit (or none), given back with its outcome when done.
struct limit_place {
    send_limit* l = nullptr;
    send_limit::outcome o = send_limit::outcome::other;
    std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
    explicit limit_place(send_limit* p) noexcept : l(p) {}
    limit_place(const limit_place&) = delete;
    limit_place& operator=(const limit_place&) = delete;
    void done()
    {
        if (l) std::exchange(l, nullptr)->release(o, std::chrono::steady_clock::now() - since);
    }
    ~limit_place() { done(); }
};

} // namespace conveyor::s3::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/s3/detail/impl/throttle.ipp>
#endif

#endif
