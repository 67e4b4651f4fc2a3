// conveyor/core/sink.hpp — the sending end of a stream: what a stage writes its items to.
#ifndef CONVEYOR_CORE_SINK_HPP
#define CONVEYOR_CORE_SINK_HPP

#include <conveyor/core/detail/channel.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace conveyor {

namespace asio = boost::asio;

namespace detail {
/// Builds the public handles (`sink`, `stream`, `range`) on a channel, and hands the
/// library's own stages the channel behind one (room, closing, failing).
struct access {
    template <class Handle, class... Args>
    static Handle make(Args&&... args)
    {
        return Handle(std::forward<Args>(args)...);
    }
    template <class Handle>
    static const auto& channel(const Handle& h) noexcept
    {
        return h.ch_;
    }
};
} // namespace detail

/** Where a stage sends its items: the sending end of the bounded stream that the next
    stage (or the consumer) reads. `make_stream` hands one to the stage's body; the stream
    ends when the body returns.

    Items are sent either unordered (`send`, `send_all`: each takes the next place) or in
    an order of the sender's choosing (`send_at`, `send_run_at`, `skip_at`: each sequence
    number 0, 1, 2, ... is sent or skipped once, by any of several tasks, and the reader
    sees them in that order). A sink takes one of the two kinds, not both. Every send waits
    while the stream is full (backpressure): an unordered item waits for a free place, an
    ordered one until its sequence number is within the stream's capacity of the reader.

    Every send completes with false once nobody will take what is sent (`closed()`): the
    reader stopped (a `take` downstream is satisfied, the consumer left), or the run failed
    or was cancelled. A stage then stops producing and returns.

    A `sink` is a cheap handle; copies send to the same stream.

    @code
    // A stage that sends each line of each text blob as an item of its own.
    auto lines = [](const std::shared_ptr<conveyor::run_context>& ctx, conveyor::stream<conveyor::blob> in) {
        return conveyor::make_stream<std::string>(ctx, "lines", conveyor::default_stream_capacity,
            [in](conveyor::sink<std::string>& out) mutable -> asio::awaitable<void> {
                while (auto b = co_await in.async_next())
                    for (auto& line : split_lines(*b))
                        if (!co_await out.send(std::move(line))) {
                            in.close(); // upstream stops too
                            co_return;
                        }
            });
    };
    @endcode

    @par Thread Safety
    Safe: any number of tasks may send, on any threads.
*/
template <class T>
class sink {
public:
    using value_type = T;

    /** Sends `v` after the items sent so far, waiting while the stream is full.
        @par Completion Signature
        `bool`: false if nobody takes it (see `closed()`). */
    [[nodiscard]] asio::awaitable<bool> send(T v) { return ch_->send(std::move(v)); }

    /** Sends all of `items` in order (moved from; `items` is cleared): one hand-off for
        the lot, cheaper per item than `send` one at a time.
        @par Completion Signature
        `bool`: false if nobody takes them. */
    [[nodiscard]] asio::awaitable<bool> send_all(std::vector<T>& items) { return ch_->send_all(items); }

    /** Sends `v` as item number `seq` of an ordered stream, waiting until `seq` is within
        the stream's capacity of the reader. Each sequence number is sent (or skipped) once.
        @par Completion Signature
        `bool`: false if nobody takes it. */
    [[nodiscard]] asio::awaitable<bool> send_at(std::uint64_t seq, T v) { return ch_->send_at(seq, std::move(v)); }

    /** Marks sequence number `seq` of an ordered stream as having no item (it was
        dropped), so the reader moves past it. Waits like `send_at`.
        @par Completion Signature
        `bool`: false if nobody takes what is sent. */
    [[nodiscard]] asio::awaitable<bool> skip_at(std::uint64_t seq) { return ch_->skip_at(seq); }

    /** Sends `items[i]` as item number `seq + i` (moved from), or skips that number where
        `items[i]` is empty: a run of ordered items in one hand-off per stretch that fits,
        waiting for room like `send_at`.
        @par Completion Signature
        `bool`: false if nobody takes them. */
    [[nodiscard]] asio::awaitable<bool> send_run_at(std::uint64_t seq, std::span<std::optional<T>> items)
    {
        return ch_->send_run_at(seq, items);
    }

    /** `send_run_at` without waiting: sends what fits now of `items` (from the front, moved
        from) and says in `placed` how many; the caller awaits `send_run_at` for the rest.
        For a sender on executor `ex` that usually finds room: no coroutine frame when it
        does. False if nobody takes what is sent. */
    bool try_send_run_at(std::uint64_t seq, std::span<std::optional<T>> items, std::size_t& placed,
                         const asio::any_io_executor& ex)
    {
        return ch_->try_send_run_at(seq, items, placed, ex);
    }

    /// True once nobody will take what is sent: the reader stopped, or the run failed or
    /// was cancelled. Sends then complete with false at once.
    bool closed() const { return ch_->receiver_gone(); }

    /// How many items may wait in the stream, or how far ahead of the reader an ordered
    /// item may be sent.
    std::size_t capacity() const noexcept { return ch_->capacity(); }

private:
    friend struct detail::access;
    explicit sink(std::shared_ptr<detail::channel<T>> ch) noexcept : ch_(std::move(ch)) {}

    std::shared_ptr<detail::channel<T>> ch_;
};

namespace detail {

/// A sink that sends to `ch`.
template <class T>
sink<T> sink_to(std::shared_ptr<channel<T>> ch) noexcept
{
    return access::make<sink<T>>(std::move(ch));
}

/// The channel behind `s`: for the library's own stages (closing it, adjusting its room).
template <class T>
const std::shared_ptr<channel<T>>& channel_of(const sink<T>& s) noexcept
{
    return access::channel(s);
}

} // namespace detail

} // namespace conveyor

#endif
