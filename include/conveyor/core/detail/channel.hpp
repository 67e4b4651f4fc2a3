// conveyor/core/detail/channel.hpp — the bounded channel between stages: its interface and
// state. The definitions of its longer members are in impl/channel.hpp; the waiters it
// queues are in wait.hpp, what it shares with channels of other item types in
// channel_base.hpp.
#ifndef CONVEYOR_CORE_DETAIL_CHANNEL_HPP
#define CONVEYOR_CORE_DETAIL_CHANNEL_HPP

#include <conveyor/core/detail/channel_base.hpp>
#include <conveyor/core/detail/wait.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/metrics.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace conveyor::detail {

namespace asio = boost::asio;

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
    void add_slots(std::size_t extra);

    /// The room now (see `add_room`).
    std::size_t room() const
    {
        std::lock_guard lk(mu_);
        return room_;
    }

    // ---- producer side ------------------------------------------------------------------

    /// Appends `v`; waits while the channel is full. Returns false if the receiver is gone.
    asio::awaitable<bool> send(T v);

    /// Appends all of `items` in order (moved from; `items` is cleared). Returns false if
    /// the receiver is gone.
    asio::awaitable<bool> send_all(std::vector<T>& items);

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
    asio::awaitable<bool> send_run_at(std::uint64_t seq, std::span<std::optional<T>> items);

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
        return gone_locked();
    }

    /** Calls `f` once, when the receiver goes (`close_receiver`, `cancel`, `fail`), or at
        once if it is gone already: for a sender that waits on something other than this
        channel (a free slab) and must stop waiting when nobody reads on. `f` runs on the
        thread that ends the receiver, outside the channel's lock, so it must not block (post
        to an executor). One watcher per channel: a second call replaces the first. */
    void on_receiver_gone(std::function<void()> f)
    {
        std::unique_lock lk(mu_);
        if (!gone_locked()) {
            gone_ = std::move(f);
            return;
        }
        lk.unlock();
        if (f) f();
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
    void fail(std::exception_ptr e) noexcept override;

    // ---- consumer side ------------------------------------------------------------------

    /** Appends at least one and at most `max` items to `out`, waiting for the first.
        Returns false at the end of the stream; throws the stream's error, or
        `errc::cancelled` if the channel was cancelled.

        `first_index` receives the delivery index of the first item taken (the others
        follow it). */
    asio::awaitable<bool> receive_some(std::vector<T>& out, std::size_t max, std::uint64_t* first_index = nullptr);

    /// One item, or nullopt at the end of the stream.
    asio::awaitable<std::optional<T>> receive()
    {
        std::vector<T> one;
        if (!co_await receive_some(one, 1)) co_return std::nullopt;
        co_return std::optional<T>(std::move(one.front()));
    }

    /** `receive_some` that never waits: appends what is there now (at most `max` items) to
        `out`. True when it took any; false when there was none, `ended` then saying whether
        the stream is at its end. Throws like `receive_some`. */
    bool try_receive_some(std::vector<T>& out, std::size_t max, bool& ended);

    /// Like `receive_some`, for a plain thread: blocks on a condition variable.
    template <class Container>
    bool receive_some_blocking(Container& out, std::size_t max)
    {
        return *receive_some_blocking_until(out, max, std::nullopt);
    }

    /// `receive_some_blocking` that waits until `deadline` at most (none: for ever):
    /// nullopt when the deadline passed with nothing to take and the stream not ended.
    template <class Container>
    std::optional<bool> receive_some_blocking_until(Container& out, std::size_t max,
                                                    std::optional<std::chrono::steady_clock::time_point> deadline);

    /// The receiver wants no more items (e.g. `take(n)` is satisfied): senders get false.
    void close_receiver() noexcept
    {
        std::unique_lock lk(mu_);
        receiver_closed_ = true;
        auto gone = std::exchange(gone_, {});
        drop_all(lk);
        tell_gone(gone);
    }

    void cancel() noexcept override
    {
        mark_ended();
        std::unique_lock lk(mu_);
        cancelled_ = true;
        auto gone = std::exchange(gone_, {});
        drop_all(lk);
        tell_gone(gone);
    }

    channel_counters counters() const override;

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
    // item.
    void notify_receiver(std::unique_lock<std::mutex>& lk, bool state_changed = false, const asio::any_io_executor* ex = nullptr);

    /* Places `items[i..]` at sequence numbers `seq + i ..` under one lock, as far as they
       fit, advancing `i`, and tells the receiver when the head became ready (through the
       sender's executor `ex`). False if the receiver is gone. `waiting`: the sender's
       timed wait, ended here when it had begun. */
    bool place_run(std::uint64_t seq, std::span<std::optional<T>> items, std::size_t& i, const asio::any_io_executor& ex,
                   timed_wait* waiting);

    template <class Container>
    bool take(std::unique_lock<std::mutex>& lk, Container& out, std::size_t max);

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
    void wake_senders(std::unique_lock<std::mutex>& lk);

    /* A plain thread about to sleep for want of items (the range-for consumer) spins
       first (`spin_budget`), watching the channel without its lock, until half a batch
       has come, the stream's state changed, or the spin's time is up. When the senders
       keep up, that saves a sleep and a wake-up per batch: two futex calls and two context
       switches, most of the cost of a lane -> range-for hand-off (conveyor-micro-bench
       `generate` measures it). Waiting for
       half a batch, not the first item, keeps it from taking items one by one, fighting
       the senders for the lock. True if there is something to take now (lock held again). */
    bool spin(std::unique_lock<std::mutex>& lk, std::size_t want_items);

    void drop_all(std::unique_lock<std::mutex>& lk);

    // Whether the receiver is gone (lock held): it stopped, or the channel was cancelled or failed.
    bool gone_locked() const noexcept { return receiver_closed_ || cancelled_ || error_; }

    // Runs the receiver-gone watcher taken from `gone_` (lock not held).
    static void tell_gone(std::function<void()>& gone) noexcept
    {
        if (!gone) return;
        try {
            gone();
        } catch (...) { // a watcher that cannot post: its waiter ends with the run instead
        }
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
    std::function<void()> gone_; // on_receiver_gone's watcher
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

#include <conveyor/core/detail/impl/channel.hpp>

#endif
