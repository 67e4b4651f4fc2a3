// conveyor/core/detail/channel_base.hpp — what every channel is without its item type: the
// handle that stops it, its counters, and the timing of the waits on both of its sides.
#ifndef CONVEYOR_CORE_DETAIL_CHANNEL_BASE_HPP
#define CONVEYOR_CORE_DETAIL_CHANNEL_BASE_HPP

#include <conveyor/core/metrics.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>

namespace conveyor::detail {

/// What a channel counted of the items that went through it (see `channel_base::counters`).
struct channel_counters {
    std::uint64_t items = 0;     ///< items sent
    std::uint64_t bytes = 0;     ///< their bytes, where `bytes_known`
    bool bytes_known = false;
    std::size_t capacity = 0;
    std::size_t size = 0;        ///< items in it now
    std::uint64_t delivered = 0; ///< items its receivers took
    std::array<std::uint64_t, 6> occupancy{}; ///< see `stage_stats::queue_histogram`
    std::uint64_t occupancy_sum = 0;          ///< the sizes seen at those samples, summed
};

/** The part of a channel the pipeline needs to stop it, and to read its metrics, without
    knowing its item type.

    A channel is the output of one stage, so it counts for that stage: the time its
    producers live (`producer_time`), the time they wait for room (`waits().send_ns`,
    "blocked") and the time its receivers wait for items (`waits().recv_ns`: the next
    stage's "starved"). Waits are timed only when a side suspends, so a run that never
    waits reads no clock per item. */
class channel_base {
public:
    virtual ~channel_base() = default;
    /// Ends the channel for both sides: waiting senders get `false`, receivers `errc::cancelled`.
    virtual void cancel() noexcept = 0;
    /// Ends the channel with an error that its receiver will throw.
    virtual void fail(std::exception_ptr e) noexcept = 0;
    /// Its counters, read together under its lock (none for a channel of another kind).
    virtual channel_counters counters() const { return {}; }
    /// True once the receiver stopped listening or the channel was cancelled or failed.
    virtual bool receiver_gone() const { return false; }

    // ---- metrics ------------------------------------------------------------------------

    /// How many tasks produce into it (1 unless told otherwise; say so before they start).
    void set_producers(std::size_t n) noexcept
    {
        std::lock_guard lk(mu_);
        producers_ = running_ = std::max<std::size_t>(n, 1);
    }
    std::size_t producers() const noexcept
    {
        std::lock_guard lk(mu_);
        return producers_;
    }
    /// One of several producers ended (`last_worker_closes` says it): its time stops counting.
    void producer_done() noexcept
    {
        const auto t = now_ns();
        std::lock_guard lk(mu_);
        if (running_ == 0) return;
        --running_;
        done_ns_ += t - created_;
    }
    /// The producers' time alive so far, summed (nanoseconds).
    std::int64_t producer_time(std::int64_t now) const noexcept
    {
        const auto end = ended_.load(std::memory_order_acquire);
        std::lock_guard lk(mu_);
        return done_ns_ + static_cast<std::int64_t>(running_) * ((end ? end : now) - created_);
    }
    std::int64_t created_ns() const noexcept { return created_; }
    /// When the stream ended (closed, cancelled or failed); 0 while it goes on.
    std::int64_t ended_ns() const noexcept { return ended_.load(std::memory_order_acquire); }

    struct wait_times {
        std::int64_t send_ns = 0; ///< senders' time waiting for room
        std::int64_t recv_ns = 0; ///< receivers' time waiting for items
    };
    /// The waits so far, those still going on included (counted up to now).
    wait_times waits() const noexcept
    {
        const double k = wait_clock::ns_per_tick();
        std::lock_guard lk(mu_);
        const auto now = wait_clock::now();
        return {static_cast<std::int64_t>(static_cast<double>(send_.total(now)) * k),
                static_cast<std::int64_t>(static_cast<double>(recv_.total(now)) * k)};
    }

    /// Marks it as a registered stage output; true the first time.
    bool mark_registered() noexcept { return !registered_.exchange(true); }

protected:
    void mark_ended() noexcept
    {
        std::int64_t zero = 0;
        ended_.compare_exchange_strong(zero, now_ns(), std::memory_order_acq_rel);
    }

    enum class side { send, recv };

    /** Times the waits of one send or receive call, under the channel's own lock: a wait
        begins where the caller registers as a waiter (the lock is held there anyway) and
        ends where it next takes the lock, or when its frame is destroyed while waiting.
        So a wait costs two reads of `wait_clock` and no lock of its own; a call that never
        waits, nothing. */
    channel_base() noexcept { wait_clock::start(); }

    class timed_wait {
    public:
        timed_wait(channel_base& c, side s) noexcept : c_(c), s_(s) {}
        ~timed_wait()
        {
            if (!on_) return;
            std::lock_guard lk(c_.mu_);
            end_locked();
        }
        timed_wait(const timed_wait&) = delete;
        timed_wait& operator=(const timed_wait&) = delete;

        /// The caller is about to wait (`mu_` held).
        void begin_locked() noexcept
        {
            t0_ = wait_clock::now();
            c_.account(s_).begin(t0_);
            on_ = true;
        }
        /// The caller took the lock again: its wait, if any, is over (`mu_` held).
        void end_locked() noexcept
        {
            if (!on_) return;
            c_.account(s_).end(t0_, std::max(t0_, wait_clock::now()));
            on_ = false;
        }

    private:
        channel_base& c_;
        side s_;
        std::int64_t t0_ = 0;
        bool on_ = false;
    };

    mutable std::mutex mu_; // the channel's state, its counters and its waits

private:
    struct wait_account {
        // in `wait_clock` ticks
        std::int64_t done = 0;      // finished waits, summed
        std::int64_t waiting = 0;   // waits going on
        std::int64_t start_sum = 0; // their start times, summed
        void begin(std::int64_t t) noexcept
        {
            ++waiting;
            start_sum += t;
        }
        void end(std::int64_t t0, std::int64_t t) noexcept
        {
            --waiting;
            start_sum -= t0;
            done += t - t0;
        }
        std::int64_t total(std::int64_t now) const noexcept { return done + waiting * now - start_sum; }
    };
    wait_account& account(side s) noexcept { return s == side::send ? send_ : recv_; }

    wait_account send_, recv_;
    std::size_t producers_ = 1;
    std::size_t running_ = 1;
    std::int64_t done_ns_ = 0;
    const std::int64_t created_ = now_ns();
    std::atomic<std::int64_t> ended_{0};
    std::atomic<bool> registered_{false};
};
} // namespace conveyor::detail

#endif
