// conveyor/core/pipeline.hpp — lazy pipelines, `|` composition, and the pipelines that are not
// I/O (`from_range`, `generate`). Streams are in stream.hpp, the running range in range.hpp.
#ifndef CONVEYOR_CORE_PIPELINE_HPP
#define CONVEYOR_CORE_PIPELINE_HPP

#include <conveyor/core/detail/channel.hpp>
#include <conveyor/core/range.hpp>
#include <conveyor/core/run_context.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/stream.hpp>

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
    /// The runtime `on()` chose; null when runs use the shared one (not started by asking).
    runtime* chosen_runtime() const noexcept { return rt_; }

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
                std::shared_ptr<detail::channel_base> in_ch = detail::channel_of(in);
                detail::link_stage(*ctx, nullptr, in_ch); // a source that registered nothing itself
                stream<U> out = s(ctx, std::move(in));
                detail::link_stage(*ctx, in_ch, detail::channel_of(out));
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

template <class T>
range<T> pipeline<T>::run(std::uint64_t epoch)
{
    auto& r = rt();
    auto ctx = std::make_shared<run_context>(r, epoch);
    r.attach(ctx);
    stream<T> out = build_(ctx);
    const auto& ch = detail::channel_of(out);
    detail::link_stage(*ctx, nullptr, ch); // a source alone that registered nothing itself
    detail::set_sink(*ctx, ch);
    if (auto e = ctx->failure()) ch->fail(e); // failed while starting
    if (on_stats_ && *on_stats_) ctx->start_stats(stats_every_, *on_stats_);
    return detail::range_of(ctx, ch);
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
                              [data](sink<T>& out) -> asio::awaitable<void> {
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
                              [count, f](sink<T>& out) mutable -> asio::awaitable<void> {
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
