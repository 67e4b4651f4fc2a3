// conveyor/s3/detail/throttle.hpp — how the S3 client backs off when a store throttles: a
// limit on requests in flight per endpoint and bucket that halves on throttling and grows
// back while replies are healthy (AIMD), and the AWS SDKs' retry quota (internal: the
// client's; definitions in detail/impl/throttle.ipp).
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

/** The requests one endpoint and bucket may have in flight: `ceiling` at first; on a
    throttling reply 0.7 times as many, never under `floor`, at most once per round trip
    (the smoothed time of a request, at least `cool_down`: the replies to one burst count
    once, as TCP halves its window once per window); after each `limit` healthy replies
    half a place more, up to `ceiling` (slower than TCP's one: a store's throttling
    threshold is found by going past it, and each step past it costs retries). A request waits for room before it is sent (first come,
    first served) and gives its place back with its outcome and how long it took.

    @par Thread Safety
    Safe: requests on any of the runtime's I/O threads may wait at once; each is resumed on
    its own executor.
*/
class concurrency_limit : public std::enable_shared_from_this<concurrency_limit> {
public:
    CONVEYOR_DECL concurrency_limit(unsigned floor, unsigned ceiling,
                                    std::chrono::milliseconds cool_down = std::chrono::milliseconds(1));

    /// A place in flight, held until `release`.
    CONVEYOR_DECL asio::awaitable<void> acquire();

    enum class outcome { healthy, throttled, other };
    CONVEYOR_DECL void release(outcome o, std::chrono::steady_clock::duration took = {});

    struct counters {
        double limit = 0;         ///< the limit now
        double lowest = 0;        ///< the lowest it has been
        std::uint64_t throttled = 0; ///< throttling replies seen
        std::uint64_t waited = 0;    ///< requests that waited for room
    };
    CONVEYOR_DECL counters stats() const;

private:
    struct waiter;
    CONVEYOR_DECL void grant_locked();

    const double floor_, ceiling_;
    const std::chrono::milliseconds cool_down_;
    mutable std::mutex mu_;
    double limit_;
    double lowest_;
    unsigned in_flight_ = 0;
    std::chrono::steady_clock::time_point last_decrease_{};
    double round_trip_s_ = 0; // smoothed time of a request
    std::deque<std::shared_ptr<waiter>> waiters_;
    std::uint64_t throttled_ = 0, waited_ = 0;
};

/// A place taken from a limit (or none), given back with its outcome when done.
struct limit_place {
    concurrency_limit* l = nullptr;
    concurrency_limit::outcome o = concurrency_limit::outcome::other;
    std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
    explicit limit_place(concurrency_limit* p) noexcept : l(p) {}
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
