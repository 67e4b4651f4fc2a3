// conveyor/core/range.hpp — a running pipeline: the blocking input range (and coroutine
// reader) its consumer holds, which stops the run when it goes away.
#ifndef CONVEYOR_CORE_RANGE_HPP
#define CONVEYOR_CORE_RANGE_HPP

#include <conveyor/core/detail/channel.hpp>
#include <conveyor/core/metrics.hpp>
#include <conveyor/core/run_context.hpp>
#include <conveyor/core/sink.hpp>

#include <boost/asio/awaitable.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <ranges>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace conveyor {

/** A running pipeline, read as a blocking input range or, by coroutines, with
    `async_next()`.

    Destroying it (or breaking out of a loop over it and letting it go) cancels all the
    run's work and waits until it has stopped, so no task outlives it.

    @par Thread Safety
    One consumer at a time.
*/
template <class T>
class range {
public:
    class iterator {
    public:
        using value_type = T;
        using difference_type = std::ptrdiff_t;
        using iterator_concept = std::input_iterator_tag;

        iterator() = default;
        explicit iterator(range* r) : r_(r) {}

        T& operator*() const { return *r_->current_; }
        T* operator->() const { return &*r_->current_; }
        iterator& operator++()
        {
            r_->advance();
            return *this;
        }
        void operator++(int) { ++*this; }
        friend bool operator==(const iterator& it, std::default_sentinel_t) noexcept { return it.at_end(); }

    private:
        bool at_end() const noexcept { return !r_ || !r_->current_; }
        range* r_ = nullptr;
    };

    range(range&& o) noexcept
        : ctx_(std::move(o.ctx_)), sink_(std::move(o.sink_)), buffered_(std::move(o.buffered_)),
          current_(std::move(o.current_)), started_(o.started_), moved_from_(std::exchange(o.moved_from_, true)),
          stats_ctx_(std::move(o.stats_ctx_)), final_mu_(std::move(o.final_mu_)), final_(std::move(o.final_))
    {
        o.current_.reset();
        o.final_mu_ = std::make_unique<std::mutex>();
    }
    range& operator=(range&& o) noexcept
    {
        if (this != &o) {
            stop();
            ctx_ = std::move(o.ctx_);
            sink_ = std::move(o.sink_);
            buffered_ = std::move(o.buffered_);
            current_ = std::move(o.current_);
            o.current_.reset();
            started_ = o.started_;
            moved_from_ = std::exchange(o.moved_from_, true);
            stats_ctx_ = std::move(o.stats_ctx_);
            std::swap(final_mu_, o.final_mu_);
            final_ = std::move(o.final_);
        }
        return *this;
    }
    ~range() { stop(); }

    /// Waits for the first item. Call once.
    iterator begin()
    {
        if (!started_) {
            started_ = true;
            advance();
        }
        return iterator(this);
    }
    std::default_sentinel_t end() const noexcept { return {}; }

    /// The next item, blocking; nullopt at the end. Throws the pipeline's error.
    std::optional<T> next()
    {
        started_ = true;
        advance();
        return std::move(current_);
    }

    /** The next item, waiting at most `timeout`: the item; nullopt at the end (`done()` is
        then true) or when the time ran out first (`done()` false: call again). For a
        consumer that must stay responsive while it waits, such as a binding that checks
        for an interrupt between waits. Throws the pipeline's error. */
    std::optional<T> next_for(std::chrono::steady_clock::duration timeout)
    {
        started_ = true;
        current_.reset();
        if (!fill(std::chrono::steady_clock::now() + timeout)) return std::nullopt;
        std::optional<T> x(std::move(buffered_.front()));
        buffered_.pop_front();
        return x;
    }

    /// True once the run has ended (every item taken, an error thrown, or stopped).
    bool done() const noexcept { return !sink_ && buffered_.empty(); }

    /** The next item, for a coroutine consumer.
        @par Completion Signature
        `std::optional<T>`; throws the pipeline's error. */
    [[nodiscard]] asio::awaitable<std::optional<T>> async_next()
    {
        if (moved_from_) throw error(make_error_code(errc::stream_ended), {});
        started_ = true;
        if (!buffered_.empty()) {
            std::optional<T> x(std::move(buffered_.front()));
            buffered_.pop_front();
            co_return x;
        }
        if (!sink_) co_return std::nullopt;
        auto x = co_await sink_->receive();
        if (!x) finish(false); // a coroutine must not block its thread waiting for the tasks
        co_return x;
    }

    /// The run's counters.
    const run_stats& stats() const { return ctx_->stats(); }

    /** The run's metrics now: every stage in pipeline order with its items, bytes, busy /
        starved / blocked time and queue, and the consumer's wait. After the run stopped,
        the final snapshot.
        @par Thread Safety
        Safe from any thread while another consumes the range (not while it is moved,
        assigned or destroyed). */
    stats_snapshot snapshot() const
    {
        std::shared_ptr<run_context> c;
        {
            std::lock_guard lk(*final_mu_);
            if (!stats_ctx_) return final_ ? *final_ : stats_snapshot{};
            c = stats_ctx_;
        }
        return c->snapshot();
    }

    /// Cancels the run and waits for its tasks to stop (no-op when already stopped).
    void stop()
    {
        if (!ctx_) return;
        ctx_->cancel();
        ctx_->wait_idle();
        ctx_->report();
        ctx_->stop_stats();
        keep_final_stats();
        ctx_.reset();
        sink_.reset();
        buffered_.clear();
        current_.reset();
    }

private:
    friend struct detail::access; // pipeline::run makes ranges (detail::range_of)
    range(std::shared_ptr<run_context> ctx, std::shared_ptr<detail::channel<T>> ch)
        : ctx_(std::move(ctx)), sink_(std::move(ch)), stats_ctx_(ctx_)
    {
    }

    // How many items the consumer takes from the channel per lock at most: enough that a
    // fast pipeline is not slowed by per-item locking and wake-ups; taken items leave the
    // channel, so at most this many more than its capacity are held.
    static constexpr std::size_t take_per_lock = 64;

    void advance()
    {
        current_.reset();
        if (!fill(std::nullopt)) return;
        current_.emplace(std::move(buffered_.front()));
        buffered_.pop_front();
    }

    // Makes sure an item is buffered, waiting until `deadline` at most (none: for ever).
    // False at the end of the stream (finished) or when the deadline passed first.
    bool fill(std::optional<std::chrono::steady_clock::time_point> deadline)
    {
        if (moved_from_) throw error(make_error_code(errc::stream_ended), {});
        if (!buffered_.empty()) return true;
        if (!sink_) return false;
        try {
            const auto got = sink_->receive_some_blocking_until(buffered_, take_per_lock, deadline);
            if (!got) return false; // timed out
            if (!*got) {
                finish();
                return false;
            }
        } catch (...) {
            finish();
            throw;
        }
        return true;
    }

    // The stream ended: report, and (on a plain thread) wait until every task is done.
    void finish(bool wait = true)
    {
        if (!ctx_) return;
        if (wait) ctx_->wait_idle();
        ctx_->report();
        ctx_->stop_stats();
        sink_.reset();
    }

    // The run is going away: its last snapshot stays readable.
    void keep_final_stats()
    {
        std::shared_ptr<run_context> c;
        {
            std::lock_guard lk(*final_mu_);
            c = stats_ctx_;
        }
        if (!c) return;
        std::optional<stats_snapshot> snap;
        try {
            snap = c->snapshot();
        } catch (...) {
            // Out of memory while stopping: the final snapshot is lost, nothing else.
        }
        std::lock_guard lk(*final_mu_);
        final_ = std::move(snap);
        stats_ctx_.reset();
    }

    std::shared_ptr<run_context> ctx_;
    std::shared_ptr<detail::channel<T>> sink_;
    std::deque<T> buffered_;
    std::optional<T> current_;
    bool started_ = false;
    bool moved_from_ = false;
    // What `snapshot()` reads, from any thread: the run until it stops, then its final
    // snapshot (kept apart from ctx_, which the consumer's thread resets).
    std::shared_ptr<run_context> stats_ctx_;
    std::unique_ptr<std::mutex> final_mu_ = std::make_unique<std::mutex>();
    std::optional<stats_snapshot> final_;
};

namespace detail {

/// The range a consumer holds on run `ctx`, reading `ch` (the channel the last stage feeds).
template <class T>
range<T> range_of(std::shared_ptr<run_context> ctx, std::shared_ptr<channel<T>> ch)
{
    return access::make<range<T>>(std::move(ctx), std::move(ch));
}

} // namespace detail

} // namespace conveyor

#endif
