// conveyor/core/pipeline.hpp — streams, lazy pipelines, `|` composition and the range sink.
#ifndef CONVEYOR_CORE_PIPELINE_HPP
#define CONVEYOR_CORE_PIPELINE_HPP

#include <conveyor/core/detail/channel.hpp>
#include <conveyor/core/run_context.hpp>
#include <conveyor/core/runtime.hpp>

#include <boost/asio/awaitable.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <deque>
#include <mutex>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <ranges>
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

    stream(std::shared_ptr<run_context> ctx, std::shared_ptr<detail::channel<T>> ch)
        : ctx_(std::move(ctx)), ch_(std::move(ch))
    {
    }

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
    const std::shared_ptr<detail::channel<T>>& channel() const noexcept { return ch_; }

private:
    std::shared_ptr<run_context> ctx_;
    std::shared_ptr<detail::channel<T>> ch_;
};

/** Starts a producer task and returns the stream it feeds.

    `body(channel&)` is a coroutine that sends items; when it returns the stream ends (after
    the highest sequence number sent, for ordered senders). If it throws, the run fails
    with `stage` named in the error.

    The stream's channel is registered as the output of a one-task stage called `stage`:
    the run's metrics (`range::snapshot()`) count the items it sends and the time the task
    waits for room (blocked) and for its input (starved, when `|` built it). */
template <class T, class Body>
stream<T> make_stream(const std::shared_ptr<run_context>& ctx, std::string stage, std::size_t capacity, Body body)
{
    auto ch = ctx->make_channel<T>(capacity);
    ctx->register_stage(stage, ch, 1);
    auto task = [](std::shared_ptr<detail::channel<T>> ch, Body body) -> asio::awaitable<void> {
        co_await body(*ch);
        ch->close();
    };
    ctx->spawn(task(ch, std::move(body)), std::move(stage));
    return stream<T>(ctx, std::move(ch));
}

template <class T>
class range;

/// A stage usable on a stream of `T`: callable with the run and the input stream.
template <class S, class T>
concept stage_for = requires(const S& s, const std::shared_ptr<run_context>& ctx, stream<T> in) {
    { s(ctx, std::move(in)) } -> std::same_as<stream<typename decltype(s(ctx, std::move(in)))::value_type>>;
};

/// The item type a stage produces from a stream of `T`.
template <class S, class T>
using stage_output_t = typename std::invoke_result_t<const S&, const std::shared_ptr<run_context>&, stream<T>>::value_type;

/** A lazy description of a data pipeline producing `T`.

    Nothing runs until it is iterated. Iterating it directly (`for (auto& x : p)`) starts a
    run owned by the pipeline; each new iteration is a new run and a new epoch, so a
    shuffle reshuffles. `run()` starts a run the caller owns. Both are blocking input
    ranges; `run().async_next()` serves coroutine consumers.

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe. A pipeline's runs may be consumed on
    other threads than the one that built it.
*/
template <class T>
class pipeline {
public:
    using value_type = T;
    using builder = std::function<stream<T>(const std::shared_ptr<run_context>&)>;

    explicit pipeline(builder b, runtime* rt = nullptr) : build_(std::move(b)), rt_(rt) {}

    pipeline(const pipeline& o)
        : build_(o.build_), rt_(o.rt_), next_epoch_(o.next_epoch_), stats_every_(o.stats_every_), on_stats_(o.on_stats_)
    {
    }
    pipeline& operator=(const pipeline& o)
    {
        if (this != &o) {
            build_ = o.build_;
            rt_ = o.rt_;
            next_epoch_ = o.next_epoch_;
            stats_every_ = o.stats_every_;
            on_stats_ = o.on_stats_;
            current_.reset();
        }
        return *this;
    }
    pipeline(pipeline&&) noexcept = default;
    pipeline& operator=(pipeline&&) noexcept = default;

    /// Runs on `rt` instead of the shared runtime.
    pipeline& on(runtime& rt) &
    {
        rt_ = &rt;
        return *this;
    }
    // By value: `for (auto& x : make_pipeline().on(rt))` must not bind a reference to a
    // temporary that dies before the loop starts.
    pipeline on(runtime& rt) &&
    {
        rt_ = &rt;
        return std::move(*this);
    }

    /// The runtime runs use (the shared one unless `on()` chose another).
    runtime& rt() const { return rt_ ? *rt_ : runtime::shared(); }

    /// Sets the epoch of the next run (later runs count up from it).
    void set_epoch(std::uint64_t e) noexcept { next_epoch_ = e; }

    /// Starts a run now, for the next epoch.
    [[nodiscard]] range<T> run() { return run(next_epoch_++); }

    /// Starts a run now, for epoch `epoch`.
    [[nodiscard]] range<T> run(std::uint64_t epoch);

    /// Builds the stages of a run (for stages that nest pipelines).
    stream<T> build(const std::shared_ptr<run_context>& ctx) const { return build_(ctx); }

    class iterator;

    /** Starts a run owned by this pipeline (ending any earlier one) and returns its
        iterator. The iterator is move-only, and when it is destroyed before the end (a
        `break` out of a range-for), the run is stopped at once rather than left filling
        its buffers until the pipeline goes away. */
    iterator begin();
    std::default_sentinel_t end() const noexcept { return {}; }

    /// Appends a stage.
    template <class S>
        requires stage_for<S, T>
    friend pipeline<stage_output_t<S, T>> operator|(pipeline p, S s)
    {
        using U = stage_output_t<S, T>;
        pipeline<U> r(
            [b = std::move(p.build_), s = std::move(s)](const std::shared_ptr<run_context>& ctx) {
                stream<T> in = b(ctx);
                std::shared_ptr<detail::channel_base> in_ch = in.channel();
                ctx->link_stage(nullptr, in_ch); // a source that registered nothing itself
                stream<U> out = s(ctx, std::move(in));
                ctx->link_stage(in_ch, out.channel());
                return out;
            },
            p.rt_);
        if (p.on_stats_) r.on_stats(p.stats_every_, *p.on_stats_);
        return r;
    }

    /** Delivers snapshots of each run's metrics to `fn` every `interval` while it goes
        (on an I/O thread: keep `fn` quick, e.g. print a progress line), and the final one
        when it ends or is stopped (on the thread that saw the end). Stages appended later
        with `|` keep the setting.
        @code
        auto p = (files | decode | batch(64)).on_stats(std::chrono::seconds(1), [](const conveyor::stats_snapshot& s) {
            std::fprintf(stderr, "%s\n", conveyor::format_shares(s).c_str());
        });
        @endcode */
    pipeline& on_stats(std::chrono::nanoseconds interval, stats_callback fn) &
    {
        stats_every_ = interval;
        on_stats_ = std::make_shared<stats_callback>(std::move(fn));
        return *this;
    }
    pipeline on_stats(std::chrono::nanoseconds interval, stats_callback fn) &&
    {
        on_stats(interval, std::move(fn));
        return std::move(*this);
    }

private:
    builder build_;
    runtime* rt_ = nullptr;
    std::uint64_t next_epoch_ = 0;
    std::unique_ptr<range<T>> current_;
    std::chrono::nanoseconds stats_every_{0};
    std::shared_ptr<stats_callback> on_stats_;
};

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

    range(std::shared_ptr<run_context> ctx, std::shared_ptr<detail::channel<T>> sink)
        : ctx_(std::move(ctx)), sink_(std::move(sink)), stats_ctx_(ctx_)
    {
    }
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
    // How many items the consumer takes from the channel per lock at most: enough that a
    // fast pipeline is not slowed by per-item locking and wake-ups; taken items leave the
    // channel, so at most this many more than its capacity are held.
    static constexpr std::size_t take_per_lock = 64;

    void advance()
    {
        if (moved_from_) throw error(make_error_code(errc::stream_ended), {});
        current_.reset();
        if (buffered_.empty()) {
            if (!sink_) return;
            try {
                if (!sink_->receive_some_blocking(buffered_, take_per_lock)) {
                    finish();
                    return;
                }
            } catch (...) {
                finish();
                throw;
            }
        }
        current_.emplace(std::move(buffered_.front()));
        buffered_.pop_front();
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

template <class T>
range<T> pipeline<T>::run(std::uint64_t epoch)
{
    auto& r = rt();
    auto ctx = std::make_shared<run_context>(r, epoch);
    r.attach(ctx);
    stream<T> out = build_(ctx);
    ctx->link_stage(nullptr, out.channel()); // a source alone that registered nothing itself
    ctx->set_sink(out.channel());
    if (auto e = ctx->failure()) out.channel()->fail(e); // failed while starting
    if (on_stats_ && *on_stats_) ctx->start_stats(stats_every_, *on_stats_);
    return range<T>(ctx, out.channel());
}

/// The iterator of a pipeline-owned run (see `pipeline::begin`).
template <class T>
class pipeline<T>::iterator {
public:
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using iterator_concept = std::input_iterator_tag;

    iterator() = default;
    iterator(range<T>* r, typename range<T>::iterator it) : r_(r), it_(it) {}
    iterator(iterator&& o) noexcept : r_(std::exchange(o.r_, nullptr)), it_(o.it_) {}
    iterator& operator=(iterator&& o) noexcept
    {
        if (this != &o) {
            stop_early();
            r_ = std::exchange(o.r_, nullptr);
            it_ = o.it_;
        }
        return *this;
    }
    iterator(const iterator&) = delete;
    iterator& operator=(const iterator&) = delete;
    ~iterator() { stop_early(); }

    T& operator*() const { return *it_; }
    T* operator->() const { return &*it_; }
    iterator& operator++()
    {
        ++it_;
        return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(const iterator& i, std::default_sentinel_t s) noexcept { return i.it_ == s; }

private:
    void stop_early() noexcept
    {
        if (r_ && !(it_ == std::default_sentinel)) r_->stop();
        r_ = nullptr;
    }

    range<T>* r_ = nullptr;
    typename range<T>::iterator it_;
};

template <class T>
typename pipeline<T>::iterator pipeline<T>::begin()
{
    current_.reset(); // stop the previous run before starting the next
    current_ = std::make_unique<range<T>>(run());
    auto it = current_->begin();
    return iterator(current_.get(), it);
}

// ---- sources that are not I/O --------------------------------------------------------

/// A pipeline over the items of a container (copied into the pipeline).
template <std::ranges::input_range R>
auto from_range(R&& items)
{
    using T = std::ranges::range_value_t<R>;
    auto data = std::make_shared<const std::vector<T>>(std::ranges::begin(items), std::ranges::end(items));
    return pipeline<T>([data](const std::shared_ptr<run_context>& ctx) {
        return make_stream<T>(ctx, "from_range", default_stream_capacity,
                              [data](detail::channel<T>& out) -> asio::awaitable<void> {
                                  std::vector<T> chunk;
                                  for (std::size_t i = 0; i < data->size();) {
                                      const std::size_t n = std::min<std::size_t>(64, data->size() - i);
                                      chunk.assign(data->begin() + i, data->begin() + i + n);
                                      i += n;
                                      if (!co_await out.send_all(chunk)) co_return;
                                  }
                              });
    });
}

/// A pipeline of `f(0), f(1), ..., f(count - 1)`, computed on the I/O thread as needed.
template <class F>
auto generate(std::uint64_t count, F f)
{
    using T = std::invoke_result_t<F&, std::uint64_t>;
    return pipeline<T>([count, f](const std::shared_ptr<run_context>& ctx) {
        return make_stream<T>(ctx, "generate", default_stream_capacity,
                              [count, f](detail::channel<T>& out) mutable -> asio::awaitable<void> {
                                  std::vector<T> chunk;
                                  for (std::uint64_t i = 0; i < count;) {
                                      for (std::size_t k = 0; k < 64 && i < count; ++k) chunk.push_back(f(i++));
                                      if (!co_await out.send_all(chunk)) co_return;
                                  }
                              });
    });
}

} // namespace conveyor

#endif
