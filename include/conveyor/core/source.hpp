// conveyor/core/source.hpp — the one source core: N keyed reads in flight, ordered or not,
// bad items failed or skipped, cancelled as a group. Every source is built on it.
#ifndef CONVEYOR_CORE_SOURCE_HPP
#define CONVEYOR_CORE_SOURCE_HPP

#include <conveyor/core/detail/channel.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/run_context.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/detail/config.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace conveyor {

/** What reading one item gave: the item, or the reason there is none.

    A reader returns this when failing is part of its normal work (a missing file in a
    listing of a million): building the error costs no throw. A reader may also simply
    throw; the source core treats both the same way. */
template <class T>
class read_outcome {
public:
    /// The item.
    read_outcome(T item) : v_(std::in_place_index<0>, std::move(item)) {}
    /// No item: `e` says why (usually a `conveyor::error` naming the item).
    read_outcome(std::exception_ptr e) : v_(std::in_place_index<1>, std::move(e)) {}
    /// No item: `e` says why.
    read_outcome(const error& e) : read_outcome(std::make_exception_ptr(e)) {}

    bool has_value() const noexcept { return v_.index() == 0; }
    explicit operator bool() const noexcept { return has_value(); }
    T& value() & { return std::get<0>(v_); }
    T&& value() && { return std::get<0>(std::move(v_)); }
    /// Why there is no item (null when there is one).
    std::exception_ptr error_ptr() const noexcept { return v_.index() == 1 ? std::get<1>(v_) : nullptr; }

private:
    std::variant<T, std::exception_ptr> v_;
};

/** Settings that every source built on `keyed_source` shares. The file and S3 sources
    take them from their own options. */
template <class T>
struct source_settings {
    /// Reads in flight at once, spread over the I/O lanes.
    std::size_t concurrency = 64;
    /// Deliver in key order (true) or as reads complete (false).
    bool ordered = true;
    /// An item that cannot be read fails the pipeline, or is skipped, counted and logged.
    on_error errors = on_error::fail;
    /// Items waiting between the source and the next stage (at least `concurrency`).
    std::size_t capacity = default_stream_capacity;
    /// Called on an I/O thread after each successful read with the time it took. Must be
    /// thread-safe and cheap.
    std::function<void(const T&, std::chrono::nanoseconds)> on_read;
};

/// A reader for `keyed_source`: called with a key index on an I/O lane, it completes with
/// the item (`asio::awaitable<T>`, throwing on failure) or a `read_outcome<T>`.
template <class R, class T>
concept keyed_reader = std::invocable<R&, std::uint64_t> &&
                       (std::same_as<std::invoke_result_t<R&, std::uint64_t>, asio::awaitable<T>> ||
                        std::same_as<std::invoke_result_t<R&, std::uint64_t>, asio::awaitable<read_outcome<T>>>);

namespace detail {

/// The shared state of one run of a keyed source.
template <class T, class Reader>
struct keyed_run {
    keyed_run(Reader r, std::uint64_t n, source_settings<T> s, std::string name)
        : reader(std::move(r)), count(n), settings(std::move(s)), stage(std::move(name))
    {
    }
    ~keyed_run()
    {
        // The reader's retries, now that snapshots can no longer read them from it.
        if constexpr (requires(const Reader& r) { { r.retries() } -> std::convertible_to<std::uint64_t>; })
            if (metrics) metrics->add_retries(static_cast<std::uint64_t>(reader.retries()));
    }
    keyed_run(const keyed_run&) = delete;
    keyed_run& operator=(const keyed_run&) = delete;

    Reader reader;
    std::uint64_t count;
    source_settings<T> settings;
    std::string stage;
    std::shared_ptr<source_metrics> metrics;
    std::atomic<std::uint64_t> next{0};
    std::atomic<std::size_t> workers_left{0};
};

/** Throws `conveyor::error` (`result_out_of_range`, naming `stage`) when key index `i` is
    not below `size`: random access (`dataset`) to the `size` `items` of a keyed source. */
CONVEYOR_DECL void check_key_index(std::string_view stage, std::uint64_t i, std::uint64_t size, std::string_view items);

/// One worker: takes the next key, reads it, applies the error policy, delivers.
template <class T, class Reader>
asio::awaitable<void> keyed_worker(std::shared_ptr<run_context> ctx, std::shared_ptr<keyed_run<T, Reader>> st,
                                   std::shared_ptr<channel<T>> out, std::shared_ptr<source_metrics> metrics)
{
    last_worker_closes<T> closer{st->workers_left, *out};
    const auto& s = st->settings;
    const asio::any_io_executor ex = co_await asio::this_coro::executor;
    for (;;) {
        const std::uint64_t i = st->next.fetch_add(1, std::memory_order_relaxed);
        if (i >= st->count || ctx->stopping()) co_return;
        metrics->request_started();
        const auto t0 = std::chrono::steady_clock::now();
        // The reader is awaited here, not through a helper coroutine: one frame fewer per
        // item. Whatever it throws becomes the outcome's error.
        std::optional<read_outcome<T>> got;
        try {
            auto read = st->reader(i); // named: no temporary lives across the co_await
            got.emplace(co_await std::move(read));
        } catch (...) {
            got.emplace(std::current_exception());
        }
        read_outcome<T>& r = *got;
        const auto took = std::chrono::steady_clock::now() - t0;
        if (!r && ctx->stopping()) {
            metrics->request_abandoned(); // the failure is the cancellation's doing
            co_return;
        }
        metrics->request_finished(took);
        if (!r) {
            if (s.errors == on_error::fail) {
                // Fail the run before this worker's exit can close the stream: closing
                // first would let the consumer see a clean end and lose the error.
                ctx->fail(r.error_ptr(), st->stage);
                co_return;
            }
            ctx->note_skip(what_of(r.error_ptr()));
            if (s.ordered && !co_await out->skip_at(i)) co_return;
            continue;
        }
        if (s.on_read) s.on_read(r.value(), std::chrono::duration_cast<std::chrono::nanoseconds>(took));
        if (!s.ordered) {
            if (!co_await out->send(std::move(r).value())) co_return;
            continue;
        }
        // Placed at once when there is room (no coroutine frame per item); awaited only
        // when the channel is full.
        std::optional<T> item(std::move(r).value());
        std::size_t placed = 0;
        if (!out->try_send_run_at(i, std::span<std::optional<T>>(&item, 1), placed, ex)) co_return;
        if (placed == 0 && !co_await out->send_run_at(i, std::span<std::optional<T>>(&item, 1))) co_return;
    }
}

} // namespace detail

/** A source of `count` items read by key index (0 … count-1): the core that the file and
    S3 sources, and any source of your own, are built on.

    For each run, `open(run_context&)` is called once, on the thread that starts the run,
    and returns the run's reader. `settings.concurrency` workers, spread over the I/O
    lanes of `io` (the run's runtime when null), then each take the next key and call
    `reader(i)`, which completes with the item or the reason there is none (see
    `keyed_reader`). The core does the rest, the same way for every source:
    - at most `concurrency` reads in flight; items delivered in key order or as they come;
    - a failed item fails the run (the consumer's iteration throws the error, named with
      `stage` unless it names a stage itself), or, under `on_error::skip`, is counted in
      the run's stats and logged, and its place in an ordered stream is left out;
    - breaking out of the loop or destroying the range cancels every read in flight: each
      worker's pending operation gets Asio's terminal cancellation;
    - `settings.on_read` is told each item and how long it took;
    - the run's metrics (`range::snapshot()`) show the source as a stage called `stage`
      with `concurrency` workers, its requests in flight, its latency histogram, and its
      retries where the reader counts them (a `retries()` member returning a count).

    The reader is shared by all workers of the run, on several I/O threads at once: what
    it keeps per lane must be kept per lane (`detail::current_lane` says which). An
    exception thrown by `open` fails the run (naming `stage`), whatever `errors` says.

    @code
    // A source of rows of a key-value store, 16 requests in flight.
    auto rows = conveyor::keyed_source<row>("kv", keys->size(), {.concurrency = 16},
        [keys, db](conveyor::run_context&) {
            return [keys, db](std::uint64_t i) -> asio::awaitable<row> { co_return co_await db->async_get((*keys)[i]); };
        });
    @endcode
    See examples/custom_source.cpp for a complete program. */
template <class T, class Open>
pipeline<T> keyed_source(std::string stage, std::uint64_t count, source_settings<T> settings, Open open, runtime* io = nullptr)
{
    if (settings.concurrency == 0) settings.concurrency = 1;
    return pipeline<T>([stage = std::move(stage), count, settings = std::move(settings), open = std::move(open),
                        io](const std::shared_ptr<run_context>& ctx) {
        using reader_type = std::decay_t<std::invoke_result_t<const Open&, run_context&>>;
        static_assert(keyed_reader<reader_type, T>,
                      "keyed_source: the reader must be callable with a std::uint64_t key index and return "
                      "asio::awaitable<T> or asio::awaitable<read_outcome<T>>");
        auto out = ctx->make_channel<T>(std::max(settings.capacity, settings.concurrency));
        std::shared_ptr<detail::keyed_run<T, reader_type>> st;
        try {
            st = std::make_shared<detail::keyed_run<T, reader_type>>(open(*ctx), count, settings, stage);
        } catch (...) {
            ctx->fail(std::current_exception(), stage);
            out->close();
            return stream<T>(ctx, out);
        }
        runtime& lanes = io ? *io : ctx->rt();
        const std::uint64_t workers = std::max<std::uint64_t>(1, std::min<std::uint64_t>(settings.concurrency, count));
        st->workers_left = static_cast<std::size_t>(workers);
        ctx->register_stage(stage, out, static_cast<std::size_t>(workers));
        auto metrics = ctx->source_metrics_of(out);
        st->metrics = metrics;
        if constexpr (requires(const reader_type& r) { { r.retries() } -> std::convertible_to<std::uint64_t>; }) {
            // The reader counts its retries (an HTTP client's): read with each snapshot.
            metrics->retries_from([w = std::weak_ptr<detail::keyed_run<T, reader_type>>(st)]() -> std::uint64_t {
                auto s = w.lock();
                return s ? static_cast<std::uint64_t>(s->reader.retries()) : 0;
            });
        }
        for (std::uint64_t w = 0; w < workers; ++w)
            ctx->spawn(lanes.io_executor(static_cast<std::size_t>(w % lanes.io_lanes())),
                       detail::keyed_worker<T>(ctx, st, out, metrics), stage);
        return stream<T>(ctx, out);
    });
}

} // namespace conveyor

#if CONVEYOR_HEADER_ONLY
#include <conveyor/core/impl/source.ipp>
#endif

#endif
