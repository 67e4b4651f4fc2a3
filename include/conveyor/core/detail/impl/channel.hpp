// conveyor/core/detail/impl/channel.hpp — the longer members of `channel<T>`: placing items
// (in order or not), taking them, and waking the other side. Marked `inline` as they were
// when defined in the class, so the compiler weighs inlining them the same way.
#ifndef CONVEYOR_CORE_DETAIL_IMPL_CHANNEL_HPP
#define CONVEYOR_CORE_DETAIL_IMPL_CHANNEL_HPP

#include <conveyor/core/detail/channel.hpp>

#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>

namespace conveyor::detail {

template <class T>
inline void channel<T>::add_slots(std::size_t extra)
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

template <class T>
asio::awaitable<bool> channel<T>::send(T v)
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

template <class T>
asio::awaitable<bool> channel<T>::send_all(std::vector<T>& items)
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

template <class T>
asio::awaitable<bool> channel<T>::send_run_at(std::uint64_t seq, std::span<std::optional<T>> items)
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

template <class T>
inline void channel<T>::fail(std::exception_ptr e) noexcept
{
    mark_ended();
    std::unique_lock lk(mu_);
    if (!error_) error_ = std::move(e);
    std::vector<wait_handler> senders;
    for (auto& w : send_waiters_) senders.push_back(std::move(w.handler));
    send_waiters_.clear();
    auto gone = std::exchange(gone_, {});
    notify_receiver(lk, true);
    if (lk.owns_lock()) lk.unlock();
    wake_all(senders);
    tell_gone(gone);
}

template <class T>
asio::awaitable<bool> channel<T>::receive_some(std::vector<T>& out, std::size_t max, std::uint64_t* first_index)
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

template <class T>
inline bool channel<T>::try_receive_some(std::vector<T>& out, std::size_t max, bool& ended)
{
    max = std::max<std::size_t>(max, 1);
    std::unique_lock lk(mu_);
    ended = false;
    throw_if_failed();
    if (receiver_closed_) {
        ended = true;
        return false;
    }
    if (take(lk, out, max)) return true;
    ended = head_ >= end_;
    return false;
}

template <class T>
template <class Container>
inline std::optional<bool> channel<T>::receive_some_blocking_until(Container& out, std::size_t max,
                                                                   std::optional<std::chrono::steady_clock::time_point> deadline)
{
    max = std::max<std::size_t>(max, 1);
    std::unique_lock lk(mu_);
    timed_wait waiting(*this, side::recv); // its wait ends below, before anything can throw
    for (;;) {
        throw_if_failed();
        if (receiver_closed_) return false;
        if (take(lk, out, max)) return true;
        if (head_ >= end_) return false;
        if (deadline && std::chrono::steady_clock::now() >= *deadline) return std::nullopt;
        waiting.begin_locked();
        if (spin(lk, std::max<std::size_t>(max / 2, 1))) {
            waiting.end_locked();
            continue;
        }
        blocking_waiting_ = true;
        if (deadline) cv_.wait_until(lk, *deadline);
        else cv_.wait(lk);
        waiting.end_locked();
        blocking_waiting_ = false;
        blocking_woken_ = false;
    }
}

template <class T>
inline channel_counters channel<T>::counters() const
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

template <class T>
inline void channel<T>::notify_receiver(std::unique_lock<std::mutex>& lk, bool state_changed, const asio::any_io_executor* ex)
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

template <class T>
inline bool channel<T>::place_run(std::uint64_t seq, std::span<std::optional<T>> items, std::size_t& i, const asio::any_io_executor& ex,
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

template <class T>
template <class Container>
inline bool channel<T>::take(std::unique_lock<std::mutex>& lk, Container& out, std::size_t max)
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

template <class T>
inline void channel<T>::wake_senders(std::unique_lock<std::mutex>& lk)
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

template <class T>
inline bool channel<T>::spin(std::unique_lock<std::mutex>& lk, std::size_t want_items)
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

template <class T>
inline void channel<T>::drop_all(std::unique_lock<std::mutex>& lk)
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

} // namespace conveyor::detail

#endif
