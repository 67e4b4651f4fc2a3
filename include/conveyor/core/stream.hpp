// conveyor/core/stream.hpp — the asynchronous stream between stages, and how a stage's
// producer task is started on one (its sending end is in sink.hpp).
#ifndef CONVEYOR_CORE_STREAM_HPP
#define CONVEYOR_CORE_STREAM_HPP

#include <conveyor/core/detail/channel.hpp>
#include <conveyor/core/run_context.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/sink.hpp>

#include <boost/asio/awaitable.hpp>

#include <concepts>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace conveyor {

/// Items a stage lets wait between itself and the next one, unless told otherwise.
inline constexpr std::size_t default_stream_capacity = 64;

/** An asynchronous stream of `T`: the receiving end of a bounded channel, fed by the
    tasks of one run. Stages take one and return another; coroutine consumers read it.

    @par Thread Safety
    One reader at a time.
*/
template <class T>
class stream {
public:
    using value_type = T;

    /** The next item, or nullopt at the end.
        @par Completion Signature
        `std::optional<T>`; throws the pipeline's error. */
    [[nodiscard]] asio::awaitable<std::optional<T>> async_next() { return ch_->receive(); }

    /** Appends between 1 and `max` items to `out`; false at the end. Cheaper per item
        than `async_next()` when items arrive in bursts. */
    [[nodiscard]] asio::awaitable<bool> async_next_batch(std::vector<T>& out, std::size_t max = 256)
    {
        return ch_->receive_some(out, max);
    }

    /// Stops reading: the producer is told nobody listens any more and winds down.
    void close() { ch_->close_receiver(); }

    run_context& context() const noexcept { return *ctx_; }
    const std::shared_ptr<run_context>& context_ptr() const noexcept { return ctx_; }

private:
    friend struct detail::access;
    stream(std::shared_ptr<run_context> ctx, std::shared_ptr<detail::channel<T>> ch)
        : ctx_(std::move(ctx)), ch_(std::move(ch))
    {
    }

    std::shared_ptr<run_context> ctx_;
    std::shared_ptr<detail::channel<T>> ch_;
};

namespace detail {

/// The stream that the tasks of run `ctx` feed through `ch`.
template <class T>
stream<T> stream_of(std::shared_ptr<run_context> ctx, std::shared_ptr<channel<T>> ch)
{
    return access::make<stream<T>>(std::move(ctx), std::move(ch));
}

/// The channel behind `s`: for the library's own stages (room, blocking reads).
template <class T>
const std::shared_ptr<channel<T>>& channel_of(const stream<T>& s) noexcept
{
    return access::channel(s);
}

} // namespace detail

/** Starts a producer task and returns the stream it feeds: the way to write a stage.

    `body(sink<T>&)` is a coroutine that sends items to the sink; when it returns the stream
    ends (after the highest sequence number sent, for ordered senders). If it throws, the
    run fails with `stage` named in the error. A body that reads a stream (the stage's
    input) closes it (`stream::close()`) when a send completes with false, so that upstream
    stops too. See docs/core.md, "Writing a stage".

    The stream's channel is registered as the output of a one-task stage called `stage`:
    the run's metrics (`range::snapshot()`) count the items it sends and the time the task
    waits for room (blocked) and for its input (starved, when `|` built it). */
template <class T, class Body>
stream<T> make_stream(const std::shared_ptr<run_context>& ctx, std::string stage, std::size_t capacity, Body body)
{
    static_assert(std::is_invocable_r_v<asio::awaitable<void>, Body&, sink<T>&>,
                  "make_stream: the body must be callable with a conveyor::sink<T>& and return asio::awaitable<void>");
    auto ch = detail::make_channel<T>(*ctx, capacity);
    detail::register_stage(*ctx, stage, ch, 1);
    auto task = [](sink<T> out, Body body) -> asio::awaitable<void> {
        co_await body(out);
        detail::channel_of(out)->close();
    };
    ctx->spawn(task(detail::sink_to(ch), std::move(body)), std::move(stage));
    return detail::stream_of(ctx, std::move(ch));
}

/// A stage usable on a stream of `T`: callable with the run and the input stream.
template <class S, class T>
concept stage_for = requires(const S& s, const std::shared_ptr<run_context>& ctx, stream<T> in) {
    { s(ctx, std::move(in)) } -> std::same_as<stream<typename decltype(s(ctx, std::move(in)))::value_type>>;
};

/// The item type a stage produces from a stream of `T`.
template <class S, class T>
using stage_output_t = typename std::invoke_result_t<const S&, const std::shared_ptr<run_context>&, stream<T>>::value_type;

} // namespace conveyor

#endif
