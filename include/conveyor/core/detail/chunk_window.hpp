// conveyor/core/detail/chunk_window.hpp — the prefetcher under every chunk reader: the
// window of chunks asked for and not yet taken, in order, each one's memory taken from the
// budget before its bytes are read, and the consumer's wait for the next one.
#ifndef CONVEYOR_CORE_DETAIL_CHUNK_WINDOW_HPP
#define CONVEYOR_CORE_DETAIL_CHUNK_WINDOW_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/chunks.hpp>
#include <conveyor/core/memory_budget.hpp>
#include <conveyor/core/runtime.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <system_error>
#include <utility>

namespace conveyor::detail {

/** The consumer's side of a chunk reader and the rule its producer follows, whatever the
    producer is: one ranged read per chunk, several in flight and finishing in any order
    (files), or one streamed body cut into chunks as it arrives (HTTP and S3 GETs).

    The window holds, in offset order, the chunks asked for and not yet taken: at most
    `capacity` of them, so a consumer that stops stops the reads, and memory stays bounded
    whatever the object's size. A chunk enters the window when its producer asks for it
    (`reserve` or `async_reserve`); its bytes are taken from the memory budget first, by the
    chunk rule (`chunk_memory_now`, `async_wait_chunk_memory`: a reader the merge waits on
    does not wait for room); its producer fills it and marks it done (`complete`); the
    consumer takes chunks in order (`async_take`), each once it is done. The producer ends
    the object with `finish` (an error, if any, comes after the chunks before it).

    Everything happens on the reader's lane (one I/O thread); the memory waits and the
    consumer's wait complete there. Shared (`shared_ptr`) by the reader and the handlers of
    its reads, which may complete after the reader is gone. */
class chunk_window : public std::enable_shared_from_this<chunk_window> {
public:
    /// One chunk in the window.
    struct slot {
        std::uint64_t offset = 0;
        std::size_t length = 0;           ///< bytes asked for (a file's last chunk may come shorter)
        bool done = false;
        buffer buf;                       ///< its bytes, once done
        memory_lease lease;               ///< its share of the budget
        std::error_code ec;               ///< why it could not be read, once done
        asio::cancellation_signal cancel; ///< its memory wait or its read
    };

    chunk_window(runtime& rt, const chunk_options& o, runtime::io_executor_type lane, std::size_t capacity)
        : rt_(rt), o_(o), lane_(lane), capacity_(capacity ? capacity : 1), consumer_wake_(lane), producer_wake_(lane)
    {
    }

    runtime& rt() const noexcept { return rt_; }
    const chunk_options& options() const noexcept { return o_; }
    const runtime::io_executor_type& lane() const noexcept { return lane_; }
    bool closed() const noexcept { return closed_; }

    /// True while another chunk may enter the window.
    bool has_room() const noexcept { return !closed_ && slots_.size() < capacity_; }

    /** Puts a chunk of `length` bytes at `offset` into the window (there must be room) and
        takes its memory: `start(slot)` runs at once when the memory is there, else on the
        lane once the budget grants it (never after `close`); a failed wait completes the
        slot with its error. For producers that start reads of their own (files). */
    void reserve(std::uint64_t offset, std::size_t length, std::function<void(const std::shared_ptr<slot>&)> start)
    {
        auto s = push_slot(offset, length);
        if (auto lease = chunk_memory_now(rt_.memory(), length, o_)) {
            s->lease = std::move(*lease);
            start(s);
            return;
        }
        async_wait_chunk_memory(rt_.memory(), length, o_,
                                asio::bind_cancellation_slot(
                                    s->cancel.slot(), asio::bind_executor(lane_, [self = shared_from_this(), s, start = std::move(start)](
                                                                                     std::error_code ec, memory_lease l) {
                                        if (self->closed_) return;
                                        if (ec) return self->complete(*s, buffer{}, ec);
                                        s->lease = std::move(l);
                                        start(s);
                                    })));
    }

    /** Waits for room in the window, puts a chunk of `length` bytes at `offset` into it and
        waits for its memory: the slot, or null when the window was closed or the wait
        cancelled. For producers that fill chunks as bytes arrive (streamed bodies). */
    asio::awaitable<std::shared_ptr<slot>> async_reserve(std::uint64_t offset, std::size_t length)
    {
        while (!has_room()) {
            if (closed_) co_return nullptr;
            producer_wake_.expires_at(asio::steady_timer::time_point::max());
            co_await producer_wake_.async_wait(asio::as_tuple(asio::use_awaitable));
            const auto cs = co_await asio::this_coro::cancellation_state; // (not inside the condition: GCC 12)
            if (cs.cancelled() != asio::cancellation_type::none) co_return nullptr;
        }
        auto s = push_slot(offset, length);
        if (auto lease = chunk_memory_now(rt_.memory(), length, o_)) {
            s->lease = std::move(*lease);
        } else {
            auto [ec, l] = co_await async_wait_chunk_memory(rt_.memory(), length, o_, asio::as_tuple(asio::use_awaitable));
            if (closed_) co_return nullptr;
            if (ec) { // cancelled: the chunk leaves the window, which the consumer must not wait on
                drop_last(s);
                co_return nullptr;
            }
            s->lease = std::move(l);
        }
        co_return s;
    }

    /// Slot `s` is read (`buf`, its bytes) or failed (`ec`): the consumer may take it.
    void complete(slot& s, buffer buf, std::error_code ec = {})
    {
        s.buf = std::move(buf);
        s.ec = ec;
        s.done = true;
        consumer_wake_.cancel();
    }

    /// Drops the newest slot, not done and holding nothing (a streamed body that ended
    /// where a chunk had just been asked for).
    void drop_last(const std::shared_ptr<slot>& s)
    {
        if (!slots_.empty() && slots_.back() == s) {
            slots_.pop_back();
            producer_wake_.cancel();
        }
    }

    /// The producer is done: after the chunks in the window the consumer gets `error`, or
    /// the end of the object (null).
    void finish(std::exception_ptr error)
    {
        error_ = std::move(error);
        finished_ = true;
        consumer_wake_.cancel();
    }

    /** The next chunk in order once it is done (its error, if it failed, is the caller's to
        throw), or null at the end; throws the producer's error (`finish`) after the chunks
        before it. `refill`, when set, runs before each wait (producers that start reads as
        room comes). Cancelling the awaiting coroutine ends the wait with operation_canceled. */
    asio::awaitable<std::shared_ptr<slot>> async_take(const std::function<void()>& refill = {})
    {
        for (;;) {
            if (refill) refill();
            if (!slots_.empty() && slots_.front()->done) {
                auto s = std::move(slots_.front());
                slots_.pop_front();
                producer_wake_.cancel(); // room for one more
                co_return s;
            }
            if (slots_.empty()) {
                if (error_) std::rethrow_exception(error_);
                if (finished_) co_return nullptr;
            }
            consumer_wake_.expires_at(asio::steady_timer::time_point::max());
            co_await consumer_wake_.async_wait(asio::as_tuple(asio::use_awaitable));
            const auto cs = co_await asio::this_coro::cancellation_state; // (not inside the condition: GCC 12)
            if (cs.cancelled() != asio::cancellation_type::none)
                throw std::system_error(std::make_error_code(std::errc::operation_canceled));
        }
    }

    /// Cancels every read and memory wait in the window and wakes both sides. On the lane.
    void close()
    {
        if (closed_) return;
        closed_ = true;
        for (auto& s : slots_)
            if (!s->done) s->cancel.emit(asio::cancellation_type::terminal);
        slots_.clear();
        consumer_wake_.cancel();
        producer_wake_.cancel();
    }

private:
    std::shared_ptr<slot> push_slot(std::uint64_t offset, std::size_t length)
    {
        auto s = std::make_shared<slot>();
        s->offset = offset;
        s->length = length;
        slots_.push_back(s);
        return s;
    }

    runtime& rt_;
    chunk_options o_;
    runtime::io_executor_type lane_;
    std::size_t capacity_;
    asio::steady_timer consumer_wake_; // async_take waits on it; a done chunk or the end cancels it
    asio::steady_timer producer_wake_; // async_reserve waits on it; a taken chunk cancels it
    std::deque<std::shared_ptr<slot>> slots_;
    std::exception_ptr error_;
    bool finished_ = false, closed_ = false;
};

} // namespace conveyor::detail

#endif
