// conveyor/core/detail/channel.hpp — the bounded channel between stages.
#ifndef CONVEYOR_CORE_DETAIL_CHANNEL_HPP
#define CONVEYOR_CORE_DETAIL_CHANNEL_HPP

#include <conveyor/core/error.hpp>
#include <conveyor/core/metrics.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/error_code.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace conveyor::detail {

namespace asio = boost::asio;
/// A suspended coroutine: its completion handler and the executor it resumes on.
struct wait_handler {
    wait_handler(asio::any_io_executor e, asio::any_completion_handler<void(boost::system::error_code)> r)
        : ex(std::move(e)), resume(std::move(r))
    {
    }
    // Move-only, explicitly: a copy would make any_completion_handler wrap itself.
    wait_handler(wait_handler&&) noexcept = default;
    // Boost 1.81's any_completion_handler move assignment copies its argument as an lvalue,
    // which wraps the handler in itself without end; move-construct and swap instead.
    wait_handler& operator=(wait_handler&& o) noexcept
    {
        ex = std::move(o.ex);
        asio::any_completion_handler<void(boost::system::error_code)> taken(std::move(o.resume));
        resume.swap(taken);
        return *this;
    }
    wait_handler(const wait_handler&) = delete;
    wait_handler& operator=(const wait_handler&) = delete;

    asio::any_io_executor ex;
    asio::any_completion_handler<void(boost::system::error_code)> resume;
};

/// Resumes a waiting coroutine on its own executor (never inline: no recursion, no lock held).
inline void wake(wait_handler w)
{
    asio::post(w.ex, [h = std::move(w.resume)]() mutable { std::move(h)(boost::system::error_code{}); });
}

/* Resumes waiting coroutines (`woken`, moved from), each on its own executor: one post per
   executor for all of its waiters, resumed there in the order given, as separate posts
   would be. A consumer that frees room for many senders at once (a file source's workers
   on two lanes) pays two posts, not one per sender: each post is an allocation, a lock of
   the lane's queue and a type-erased call (profiled: half the consumer's work per file).
   Waiters are grouped by executor among the first few distinct ones; the rest (strands,
   say, each its own executor) are posted one by one. */
inline void wake_all(std::vector<wait_handler>& woken)
{
    if (woken.size() == 1) { // the usual case of a receiver woken for an item: nothing to group
        wake(std::move(woken.front()));
        woken.clear();
        return;
    }
    using resume_handler = asio::any_completion_handler<void(boost::system::error_code)>;
    // Resumes a batch in order. Should one throw, the rest are still resumed (posted).
    struct resume_batch {
        asio::any_io_executor ex;
        std::vector<resume_handler> handlers;
        void operator()()
        {
            std::size_t i = 0;
            try {
                for (; i < handlers.size(); ++i) std::move(handlers[i])(boost::system::error_code{});
            } catch (...) {
                for (++i; i < handlers.size(); ++i) wake(wait_handler{ex, std::move(handlers[i])});
                throw;
            }
        }
    };
    constexpr std::size_t max_groups = 4;
    std::size_t groups = 0;
    std::array<resume_batch, max_groups> batch;
    for (auto& w : woken) {
        std::size_t g = 0;
        while (g < groups && batch[g].ex != w.ex) ++g;
        if (g == groups) {
            if (groups == max_groups) {
                wake(std::move(w));
                continue;
            }
            batch[g].ex = w.ex;
            ++groups;
        }
        batch[g].handlers.push_back(std::move(w.resume));
    }
    woken.clear();
    for (std::size_t g = 0; g < groups; ++g) {
        auto& b = batch[g];
        if (b.handlers.size() == 1) {
            wake(wait_handler{std::move(b.ex), std::move(b.handlers.front())});
        } else {
            asio::any_io_executor ex = b.ex;
            asio::post(ex, std::move(b));
        }
    }
}

/// Suspends the calling coroutine until `reg` wakes or stores the waiter it is given.
template <class Register>
asio::awaitable<void> suspend_with(Register reg)
{
    co_await asio::async_initiate<const asio::use_awaitable_t<>&, void(boost::system::error_code)>(
        [&reg](auto handler) {
            asio::any_io_executor ex = asio::get_associated_executor(handler);
            reg(wait_handler{std::move(ex), std::move(handler)});
        },
        asio::use_awaitable);
}

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

/** A bounded multi-producer, single-consumer channel with sequence numbers.

    Items occupy a ring of `capacity` slots indexed by sequence number. An unordered sender
    (`send`) takes the next free sequence number; an ordered sender (`send_at`) supplies its
    own, and the receiver sees items strictly in sequence order. Ordered delivery from many
    concurrent producers (a parallel map, file reads on several rings) is thus the same
    mechanism as a FIFO, and it is bounded the same way: an item may be at most `capacity`
    ahead of the receiver (or the larger room a parallel map asks for, `add_room`), so a
    fast producer waits (backpressure) instead of buffering.

    Transfers move batches where they can (`send_all`, `receive_some`): one lock and at
    most one wake-up per batch instead of per item.

    Receivers are coroutines (several may share one channel: the workers of a parallel
    map) or one plain thread (`receive_some_blocking`); senders are coroutines on any
    executor. `receive_some` can report each item's delivery index (its position in the
    stream, holes not counted), which parallel stages use to keep input order.

    @par Thread Safety
    Safe for any number of receivers and senders, on any threads.
*/
template <class T>
class channel final : public channel_base, public std::enable_shared_from_this<channel<T>> {
public:
    /// A channel with room for `capacity` items; `max_room` (if larger) is the most room
    /// `add_room` may give it later (slots are allocated for it now).
    explicit channel(std::size_t capacity, std::size_t max_room = 0)
        : cap_(capacity ? capacity : 1), slots_n_(std::max(cap_, max_room)), room_(cap_), slots_(slots_n_)
    {
    }

    std::size_t capacity() const noexcept { return cap_; }

    /** Changes how far ahead of the receiver items may be placed (the room) by `by` items
        (negative: less), starting from the capacity; the room is what was asked for in all,
        kept between the capacity and the slots (`max_room` given at construction, more
        with `add_slots`). Senders that now fit are woken. A parallel map's workers each add
        the batch they take, so that a worker ahead in the order places its batch at once
        instead of waiting, a stretch at a time, for the worker behind it; a map whose
        workers take one item at a time keeps the room near the capacity. */
    void add_room(std::ptrdiff_t by)
    {
        std::unique_lock lk(mu_);
        asked_ += by;
        apply_room(lk);
    }

    /** Adds `extra` slots to the ring, so that `add_room` can later give that much more
        room: for a stage that asks its *input* channel for room (a parallel map whose
        workers take batches larger than the producer's capacity), after the producer made
        the channel. Items already in it keep their places in the stream; room already
        asked for beyond the old slots is given now. */
    void add_slots(std::size_t extra)
    {
        if (extra == 0) return;
        std::unique_lock lk(mu_);
        const std::size_t n = slots_n_ + extra;
        std::vector<std::optional<T>> slots(n);
        std::vector<char> holes(n, 0);
        // Everything placed lies in [head_, head_ + room_), room_ <= slots_n_: each sequence
        // number has one slot in the old ring and one in the new.
        const std::uint64_t hi = std::max(tail_, seq_hi_);
        for (std::uint64_t s = head_; s < hi; ++s) {
            auto& from = slots_[s % slots_n_];
            if (from) slots[s % n].emplace(std::move(*from));
            holes[s % n] = holes_[s % slots_n_];
        }
        slots_ = std::move(slots);
        holes_ = std::move(holes);
        slots_n_ = n;
        apply_room(lk);
    }

    /// The room now (see `add_room`).
    std::size_t room() const
    {
        std::lock_guard lk(mu_);
        return room_;
    }

    // ---- producer side ------------------------------------------------------------------

    /// Appends `v`; waits while the channel is full. Returns false if the receiver is gone.
    asio::awaitable<bool> send(T v)
    {
        const auto ex = co_await asio::this_coro::executor;
        timed_wait waiting(*this, side::send);
        for (;;) {
            {
                std::unique_lock lk(mu_);
                waiting.end_locked();
                if (receiver_closed_ || cancelled_ || error_) co_return false;
                if (tail_ < head_ + room_) {
                    count_sent(v);
                    slots_[tail_ % slots_n_].emplace(std::move(v));
                    ++tail_;
                    notify_receiver(lk, false, &ex);
                    co_return true;
                }
            }
            co_await suspend_with([this, &waiting](wait_handler h) {
                std::unique_lock lk(mu_);
                if (receiver_closed_ || cancelled_ || error_ || tail_ < head_ + room_) return wake(std::move(h));
                waiting.begin_locked();
                send_waiters_.push_back({unordered, std::move(h)});
            });
        }
    }

    /// Appends all of `items` in order (moved from; `items` is cleared). Returns false if
    /// the receiver is gone.
    asio::awaitable<bool> send_all(std::vector<T>& items)
    {
        const auto ex = co_await asio::this_coro::executor;
        timed_wait waiting(*this, side::send);
        std::size_t i = 0;
        while (i < items.size()) {
            {
                std::unique_lock lk(mu_);
                waiting.end_locked();
                if (receiver_closed_ || cancelled_ || error_) {
                    items.clear();
                    co_return false;
                }
                bool any = false;
                while (i < items.size() && tail_ < head_ + room_) {
                    count_sent(items[i]);
                    slots_[tail_ % slots_n_].emplace(std::move(items[i++]));
                    ++tail_;
                    any = true;
                }
                if (any) notify_receiver(lk, false, &ex);
                if (i == items.size()) break;
            }
            co_await suspend_with([this, &waiting](wait_handler h) {
                std::unique_lock lk(mu_);
                if (receiver_closed_ || cancelled_ || error_ || tail_ < head_ + room_) return wake(std::move(h));
                waiting.begin_locked();
                send_waiters_.push_back({unordered, std::move(h)});
            });
        }
        items.clear();
        co_return true;
    }

    /// Places `v` at sequence number `seq`; waits until `seq` is within `capacity` of the
    /// receiver. Each sequence number must be sent once. Returns false if the receiver is gone.
    asio::awaitable<bool> send_at(std::uint64_t seq, T v)
    {
        std::optional<T> one(std::move(v));
        co_return co_await send_run_at(seq, std::span<std::optional<T>>(&one, 1));
    }

    /// Marks sequence number `seq` as having no item (it was skipped), so the receiver
    /// moves past it. Waits like `send_at`. Returns false if the receiver is gone.
    asio::awaitable<bool> skip_at(std::uint64_t seq)
    {
        std::optional<T> none;
        co_return co_await send_run_at(seq, std::span<std::optional<T>>(&none, 1));
    }

    /** Places `items[i]` at sequence number `seq + i` (moved from), or a hole where it is
        empty (a skipped item): a run of ordered items in one lock and at most one wake-up
        per stretch that fits, waiting for room like `send_at`. Returns false if the
        receiver is gone. */
    asio::awaitable<bool> send_run_at(std::uint64_t seq, std::span<std::optional<T>> items)
    {
        const auto ex = co_await asio::this_coro::executor;
        timed_wait waiting(*this, side::send);
        std::size_t i = 0;
        while (i < items.size()) {
            if (!place_run(seq, items, i, ex, &waiting)) co_return false;
            if (i == items.size()) break;
            const std::uint64_t next = seq + i;
            co_await suspend_with([this, next, &waiting](wait_handler h) {
                std::unique_lock lk(mu_);
                if (receiver_closed_ || cancelled_ || error_ || next < head_ + room_) return wake(std::move(h));
                waiting.begin_locked();
                send_waiters_.push_back({next, std::move(h)});
            });
        }
        co_return true;
    }

    /** `send_run_at` without waiting: places what fits now of `items` (from the front,
        moved from), and says in `placed` how many. For a sender on executor `ex` that
        usually finds room: no coroutine frame when it does, and it awaits `send_run_at`
        for the rest only when it does not. False if the receiver is gone. */
    bool try_send_run_at(std::uint64_t seq, std::span<std::optional<T>> items, std::size_t& placed,
                         const asio::any_io_executor& ex)
    {
        placed = 0;
        return place_run(seq, items, placed, ex, nullptr);
    }

    /// True once the receiver has stopped listening or the channel was cancelled or failed.
    bool receiver_gone() const override
    {
        std::lock_guard lk(mu_);
        return receiver_closed_ || cancelled_ || error_;
    }

    /// Ends the stream after the items sent so far (for ordered senders: after the highest
    /// sequence number sent or skipped).
    void close()
    {
        mark_ended();
        std::unique_lock lk(mu_);
        end_ = std::max(tail_, seq_hi_);
        notify_receiver(lk, true);
    }

    /// Ends an ordered stream after `total` items (sequence numbers 0 .. total-1).
    void close_at(std::uint64_t total)
    {
        mark_ended();
        std::unique_lock lk(mu_);
        end_ = total;
        notify_receiver(lk, true);
    }

    /// Ends the stream with an error: the receiver throws it; senders (also those waiting
    /// for room) get false, since nobody will take what they send.
    void fail(std::exception_ptr e) noexcept override
    {
        mark_ended();
        std::unique_lock lk(mu_);
        if (!error_) error_ = std::move(e);
        std::vector<wait_handler> senders;
        for (auto& w : send_waiters_) senders.push_back(std::move(w.handler));
        send_waiters_.clear();
        notify_receiver(lk, true);
        if (lk.owns_lock()) lk.unlock();
        wake_all(senders);
    }

    // ---- consumer side ------------------------------------------------------------------

    /** Appends at least one and at most `max` items to `out`, waiting for the first.
        Returns false at the end of the stream; throws the stream's error, or
        `errc::cancelled` if the channel was cancelled.

        `first_index` receives the delivery index of the first item taken (the others
        follow it). */
    asio::awaitable<bool> receive_some(std::vector<T>& out, std::size_t max, std::uint64_t* first_index = nullptr)
    {
        max = std::max<std::size_t>(max, 1); // "at least one": a zero would wait forever
        timed_wait waiting(*this, side::recv);
        for (;;) {
            {
                std::unique_lock lk(mu_);
                waiting.end_locked();
                throw_if_failed();
                if (receiver_closed_) co_return false; // another receiver closed it: the end for all
                if (first_index) *first_index = delivered_;
                if (take(lk, out, max)) co_return true;
                if (head_ >= end_) co_return false;
            }
            co_await suspend_with([this, &waiting](wait_handler h) {
                std::unique_lock lk(mu_);
                if (ready()) return wake(std::move(h));
                waiting.begin_locked();
                recv_waiters_.push_back(std::move(h));
            });
        }
    }

    /// One item, or nullopt at the end of the stream.
    asio::awaitable<std::optional<T>> receive()
    {
        std::vector<T> one;
        if (!co_await receive_some(one, 1)) co_return std::nullopt;
        co_return std::optional<T>(std::move(one.front()));
    }

    /// Like `receive_some`, for a plain thread: blocks on a condition variable.
    template <class Container>
    bool receive_some_blocking(Container& out, std::size_t max)
    {
        max = std::max<std::size_t>(max, 1);
        std::unique_lock lk(mu_);
        timed_wait waiting(*this, side::recv); // its wait ends below, before anything can throw
        for (;;) {
            throw_if_failed();
            if (receiver_closed_) return false;
            if (take(lk, out, max)) return true;
            if (head_ >= end_) return false;
            waiting.begin_locked();
            if (spin(lk, std::max<std::size_t>(max / 2, 1))) {
                waiting.end_locked();
                continue;
            }
            blocking_waiting_ = true;
            cv_.wait(lk);
            waiting.end_locked();
            blocking_waiting_ = false;
            blocking_woken_ = false;
        }
    }

    /// The receiver wants no more items (e.g. `take(n)` is satisfied): senders get false.
    void close_receiver() noexcept
    {
        std::unique_lock lk(mu_);
        receiver_closed_ = true;
        drop_all(lk);
    }

    void cancel() noexcept override
    {
        mark_ended();
        std::unique_lock lk(mu_);
        cancelled_ = true;
        drop_all(lk);
    }

    channel_counters counters() const override
    {
        channel_counters c;
        std::lock_guard lk(mu_);
        c.items = sent_;
        c.bytes = bytes_;
        c.bytes_known = has_byte_size<T>();
        c.capacity = cap_;
        const std::uint64_t hi = std::max(tail_, seq_hi_);
        c.size = static_cast<std::size_t>(hi > head_ ? hi - head_ : 0);
        c.delivered = delivered_;
        c.occupancy = occupancy_;
        c.occupancy_sum = occupancy_sum_;
        return c;
    }

private:
    static constexpr std::uint64_t unordered = std::numeric_limits<std::uint64_t>::max();
    struct sender_waiter {
        std::uint64_t seq; // the sequence number it waits to place, or `unordered`
        wait_handler handler;
    };

    bool ready() const
    {
        return error_ || cancelled_ || receiver_closed_ || slots_[head_ % slots_n_].has_value() || holes_[head_ % slots_n_] ||
               head_ >= end_;
    }

    void throw_if_failed()
    {
        if (error_) std::rethrow_exception(error_);
        if (cancelled_) throw error(make_error_code(errc::cancelled), {});
    }

    // Called with the lock held after the head slot may have been filled or the state
    // changed: wakes one waiting receiver, or all of them when the state changed (end,
    // error). May unlock `lk`.
    //
    // A plain thread waiting in `receive_some_blocking` is woken once per wait, not once
    // per item; and when the sender runs on an executor, the wake is posted to it, so it
    // comes after the handlers already queued there (the other reads completed in the same
    // turn of an I/O thread's loop): the consumer then takes a batch per wake-up instead
    // of one item, and the I/O thread makes one futex call per batch instead of one per
    // item (profiled: those calls were a fifth of an I/O thread's time reading small files).
    void notify_receiver(std::unique_lock<std::mutex>& lk, bool state_changed = false, const asio::any_io_executor* ex = nullptr)
    {
        if (!state_changed && !slots_[head_ % slots_n_].has_value()) return;
        if (state_changed) states_.fetch_add(1, std::memory_order_release);
        if (blocking_waiting_ && (state_changed || !blocking_woken_)) {
            blocking_woken_ = true;
            std::shared_ptr<channel> self;
            if (ex && !state_changed) self = this->weak_from_this().lock();
            if (self) {
                asio::post(*ex, [self = std::move(self)] {
                    std::lock_guard g(self->mu_);
                    self->cv_.notify_one();
                });
            } else {
                cv_.notify_one();
            }
        }
        if (recv_waiters_.empty()) return;
        std::vector<wait_handler> woken;
        if (state_changed) {
            woken = std::move(recv_waiters_);
            recv_waiters_.clear();
        } else {
            woken.push_back(std::move(recv_waiters_.back()));
            recv_waiters_.pop_back();
        }
        lk.unlock();
        wake_all(woken);
    }

    /* Places `items[i..]` at sequence numbers `seq + i ..` under one lock, as far as they
       fit, advancing `i`, and tells the receiver when the head became ready (through the
       sender's executor `ex`). False if the receiver is gone. `waiting`: the sender's
       timed wait, ended here when it had begun. */
    bool place_run(std::uint64_t seq, std::span<std::optional<T>> items, std::size_t& i, const asio::any_io_executor& ex,
                   timed_wait* waiting)
    {
        std::unique_lock lk(mu_);
        if (waiting) waiting->end_locked();
        if (receiver_closed_ || cancelled_ || error_) return false;
        bool at_head = false;
        for (; i < items.size() && seq + i < head_ + room_; ++i) {
            const std::uint64_t at = seq + i;
            at_head = at_head || at == head_;
            if (items[i]) {
                count_sent(*items[i]);
                slots_[at % slots_n_].emplace(std::move(*items[i]));
            } else {
                holes_[at % slots_n_] = 1;
            }
            seq_hi_ = std::max(seq_hi_, at + 1);
        }
        // A hole at the head is a change the receiver must see although no item came.
        if (at_head) notify_receiver(lk, !slots_[head_ % slots_n_].has_value(), &ex);
        return true;
    }

    template <class Container>
    bool take(std::unique_lock<std::mutex>& lk, Container& out, std::size_t max)
    {
        std::size_t n = 0;
        const std::uint64_t head0 = head_;
        {
            // How full the queue is when its receiver comes for items (under the lock
            // already held: a few instructions per batch taken).
            const std::uint64_t hi0 = std::max(tail_, seq_hi_);
            const std::uint64_t used0 = hi0 > head0 ? hi0 - head0 : 0;
            const std::size_t bucket = used0 == 0 ? 0 : used0 >= cap_ ? 5 : 1 + static_cast<std::size_t>((used0 * 4 - 1) / cap_);
            ++occupancy_[bucket];
            occupancy_sum_ += used0;
        }
        while (n < max && head_ < end_) {
            auto& slot = slots_[head_ % slots_n_];
            auto& hole = holes_[head_ % slots_n_];
            if (hole) {
                hole = 0;
                ++head_;
                continue;
            }
            if (!slot) break;
            out.push_back(std::move(*slot));
            slot.reset();
            ++head_;
            ++n;
        }
        delivered_ += n;
        if (head_ == head0) return false;
        if (n == 0 && head_ < end_) {
            // Only holes were passed: room was made, but the caller still waits for an item.
            wake_senders(lk);
            return false;
        }
        // Hysteresis: waking a sender for every slot freed makes producer and consumer
        // threads wake each other in lockstep. Wake them once half the ring is free, or
        // whenever the receiver has nothing more to take (it is about to wait, so anyone
        // who could fill its next slot must be running: this keeps progress guaranteed).
        const std::uint64_t hi = std::max(tail_, seq_hi_); // ordered senders do not move tail_
        const std::uint64_t used = hi > head_ ? hi - head_ : 0;
        const bool head_ready = slots_[head_ % slots_n_].has_value() || holes_[head_ % slots_n_];
        if (!head_ready || used <= room_ / 2) wake_senders(lk);
        // More items may be ready for other waiting receivers (parallel workers).
        if (!recv_waiters_.empty() && ready()) notify_receiver(lk);
        if (!lk.owns_lock()) lk.lock();
        return n > 0;
    }

    // Sets the room to what was asked for, clamped between the capacity and the slots, and
    // wakes the senders that fit if it grew. May unlock and relock `lk`.
    void apply_room(std::unique_lock<std::mutex>& lk)
    {
        const auto room = static_cast<std::size_t>(
            std::clamp(asked_, static_cast<std::ptrdiff_t>(cap_), static_cast<std::ptrdiff_t>(slots_n_)));
        if (room == room_) return;
        const bool grew = room > room_;
        room_ = room;
        if (grew) wake_senders(lk);
    }

    // Wakes the senders that now fit: ordered ones whose slot opened, and as many unordered
    // ones as there are free slots. Unlocks and relocks `lk`.
    void wake_senders(std::unique_lock<std::mutex>& lk)
    {
        std::vector<wait_handler> woken;
        std::size_t free_slots = head_ + room_ > tail_ ? head_ + room_ - tail_ : 0;
        for (auto it = send_waiters_.begin(); it != send_waiters_.end();) {
            const bool fits = it->seq == unordered ? free_slots > 0 : it->seq < head_ + room_;
            if (fits) {
                if (it->seq == unordered) --free_slots;
                woken.push_back(std::move(it->handler));
                it = send_waiters_.erase(it);
            } else {
                ++it;
            }
        }
        if (woken.empty()) return;
        lk.unlock();
        wake_all(woken);
        lk.lock();
    }

    /* A plain thread about to sleep for want of items (the range-for consumer) spins
       first (`spin_budget`), watching the channel without its lock, until half a batch
       has come, the stream's state changed, or the spin's time is up. When the senders
       keep up, that saves a sleep and a wake-up per batch: two futex calls and two context
       switches, which cost a lane -> range-for hand-off about 300 ns per item on a 2-core
       KVM guest (conveyor-micro-bench `generate`) and 24-110 ns with the spin. Waiting for
       half a batch, not the first item, keeps it from taking items one by one, fighting
       the senders for the lock. True if there is something to take now (lock held again). */
    bool spin(std::unique_lock<std::mutex>& lk, std::size_t want_items)
    {
        const auto ticks = spin_.next();
        const auto states0 = states_.load(std::memory_order_relaxed);
        const auto want = sent_hint_.load(std::memory_order_relaxed) + want_items;
        lk.unlock();
        const auto until = wait_clock::now() + ticks;
        bool got_batch = false;
        for (unsigned i = 1;; ++i) {
            if (states_.load(std::memory_order_acquire) != states0 || sent_hint_.load(std::memory_order_acquire) >= want) {
                got_batch = true;
                break;
            }
            if (i % 32 == 0 && wait_clock::now() > until) break;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
            __builtin_ia32_pause();
#endif
        }
        lk.lock();
        spin_.record(got_batch);
        // Looked at under the lock: a sender that came after the last look above found
        // nobody asleep and woke nobody.
        return ready();
    }

    void drop_all(std::unique_lock<std::mutex>& lk)
    {
        states_.fetch_add(1, std::memory_order_release);
        for (auto& s : slots_) s.reset();
        std::fill(holes_.begin(), holes_.end(), 0);
        std::vector<wait_handler> woken;
        for (auto& w : send_waiters_) woken.push_back(std::move(w.handler));
        send_waiters_.clear();
        for (auto& h : recv_waiters_) woken.push_back(std::move(h));
        recv_waiters_.clear();
        cv_.notify_all();
        lk.unlock();
        wake_all(woken);
    }

    const std::size_t cap_;
    std::size_t slots_n_;       // slots in the ring: the most room there can be (`add_slots`)
    std::size_t room_;          // how far ahead of head_ items may be placed (cap_ .. slots_n_)
    std::ptrdiff_t asked_ = static_cast<std::ptrdiff_t>(cap_); // the room asked for, before clamping
    std::vector<std::optional<T>> slots_;
    std::vector<char> holes_ = std::vector<char>(slots_n_, 0);
    std::uint64_t seq_hi_ = 0; // one past the highest sequence number sent or skipped
    std::uint64_t head_ = 0; // sequence number the receiver takes next
    std::uint64_t tail_ = 0; // next sequence number for an unordered sender
    std::uint64_t end_ = std::numeric_limits<std::uint64_t>::max();
    std::exception_ptr error_;
    bool receiver_closed_ = false;
    bool cancelled_ = false;
    std::vector<sender_waiter> send_waiters_;
    std::vector<wait_handler> recv_waiters_;
    std::uint64_t delivered_ = 0; // items handed to receivers so far
    std::uint64_t sent_ = 0;      // items sent so far
    std::uint64_t bytes_ = 0;     // their bytes, where the item type's are known
    std::array<std::uint64_t, 6> occupancy_{};
    std::uint64_t occupancy_sum_ = 0;

    // Counts an item about to be placed (lock held).
    void count_sent(const T& v) noexcept
    {
        ++sent_;
        sent_hint_.store(sent_, std::memory_order_release);
        if constexpr (has_byte_size<T>()) bytes_ += item_bytes(v);
    }
    std::condition_variable cv_;
    std::atomic<std::uint64_t> states_{0};  // bumped at the end, an error, a cancel
    std::atomic<std::uint64_t> sent_hint_{0}; // sent_, for a spinning receiver to watch
    spin_budget spin_; // the blocking receiver's (lock held)
    bool blocking_waiting_ = false;
    bool blocking_woken_ = false; // a wake of the waiting thread is on its way
};

/** Closes `out` when the last of the tasks that send to it ends, however it ends (the
    workers of a source, of a parallel `map`). Each task holds one; `left` starts at the
    number of tasks. */
template <class T>
struct last_worker_closes {
    std::atomic<std::size_t>& left;
    channel<T>& out;
    ~last_worker_closes()
    {
        out.producer_done();
        if (left.fetch_sub(1) == 1) out.close();
    }
};

} // namespace conveyor::detail

#endif
