// conveyor/core/source.hpp — the one source core: N keyed reads in flight, ordered or not,
// bad items failed or skipped, cancelled as a group; or keys read as sequences of items
// (a shard's samples), a few at once, merged in a fixed order. Every source is built on it.
#ifndef CONVEYOR_CORE_SOURCE_HPP
#define CONVEYOR_CORE_SOURCE_HPP

#include <conveyor/core/chunks.hpp>
#include <conveyor/core/detail/channel.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/order.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/run_context.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/sink.hpp>
#include <conveyor/core/stream.hpp>
#include <conveyor/detail/config.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

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
    /// Which keys each run reads, in what order: this slot's share of the epoch's order,
    /// less what `epochs.resume` records as used (see `plan_run`). Default: every key, in
    /// order, each run.
    epoch_options epochs{};
};

/// Gives an item of a keyed source its place in the epoch's work list (what resume state is
/// kept by): an item type with a `work` member (`blob`) receives it; others keep none.
template <class T>
void set_work_position(T& item, std::uint64_t work) noexcept
{
    if constexpr (requires { item.work = work; }) item.work = work;
}

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
    keyed_run(Reader r, std::shared_ptr<const std::vector<work_item>> p, std::uint64_t n, source_settings<T> s, std::string name)
        : reader(std::move(r)), plan(std::move(p)), count(plan ? plan->size() : n), settings(std::move(s)), stage(std::move(name))
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
    std::shared_ptr<const std::vector<work_item>> plan; // the run's keys (null: 0 … count-1)
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
        const work_item key = st->plan ? (*st->plan)[i] : work_item{i, i};
        try {
            auto read = st->reader(key.item); // named: no temporary lives across the co_await
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
        set_work_position(r.value(), key.work);
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
    and returns the run's reader. The run reads the keys `settings.epochs` gives it for its
    epoch (all of them, in order, by default; see `plan_run`), and each item learns its
    place in the epoch (`set_work_position`). `settings.concurrency` workers, spread over the I/O
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
    settings.epochs.share = checked_split(settings.epochs.share.value_or(split{}), stage); // a bad share fails here, not in a run
    return pipeline<T>([stage = std::move(stage), count, settings = std::move(settings), open = std::move(open),
                        io](const std::shared_ptr<run_context>& ctx) {
        using reader_type = std::decay_t<std::invoke_result_t<const Open&, run_context&>>;
        static_assert(keyed_reader<reader_type, T>,
                      "keyed_source: the reader must be callable with a std::uint64_t key index and return "
                      "asio::awaitable<T> or asio::awaitable<read_outcome<T>>");
        auto out = detail::make_channel<T>(*ctx, std::max(settings.capacity, settings.concurrency));
        std::shared_ptr<detail::keyed_run<T, reader_type>> st;
        try {
            auto plan = plan_run(count, ctx->epoch(), settings.epochs, stage);
            st = std::make_shared<detail::keyed_run<T, reader_type>>(open(*ctx), std::move(plan), count, settings, stage);
        } catch (...) {
            ctx->fail(std::current_exception(), stage);
            out->close();
            return detail::stream_of(ctx, out);
        }
        runtime& lanes = io ? *io : ctx->rt();
        const std::uint64_t workers = std::max<std::uint64_t>(1, std::min<std::uint64_t>(settings.concurrency, st->count));
        st->workers_left = static_cast<std::size_t>(workers);
        detail::register_stage(*ctx, stage, out, static_cast<std::size_t>(workers));
        auto metrics = detail::source_metrics_of(*ctx, out);
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
        return detail::stream_of(ctx, out);
    });
}

/// `sequence_source`'s count of keys for a source that never ends (bound it with `take()`).
inline constexpr std::uint64_t endless = std::numeric_limits<std::uint64_t>::max();

/// Settings of a `sequence_source`.
struct sequence_settings {
    /// Keys read at once (lanes), each a sequence of items. At least 1.
    std::size_t sequences_in_flight = 4;
    /// A key that cannot be read fails the pipeline, or (`skip`) the rest of that key's
    /// items is left out, counted and logged, and the other keys go on.
    on_error errors = on_error::fail;
    /// Items waiting between the source and the next stage.
    std::size_t capacity = default_stream_capacity;
    /// Items read ahead on each lane, waiting for the merge to take them.
    std::size_t lane_capacity = 16;
    /** Bytes of memory each open key's reads may hold (its read-ahead: a shard's chunks in
        flight). When set, a run takes `sequences_in_flight` times this from the runtime's
        memory budget in one piece before it reads (waiting for room, so runs on one runtime
        share its budget), gives it back when it ends, and its lanes' chunk readers take
        each chunk from that share (`sequence_lane::chunks`). 0: they take from the
        runtime's budget directly. */
    std::size_t memory_per_sequence = 0;
};

/// The lane a `sequence_reader` opens a key on.
struct sequence_lane {
    /// 0 … `sequences_in_flight` - 1.
    std::size_t index = 0;
    /** Marked while the merge waits on this lane alone: chunk readers given it
        (`chunk_options::priority`) do not wait for memory then, so that their waits cannot
        hold up the merge for ever (see `read_priority`). */
    std::shared_ptr<read_priority> priority;
    /// The run's share of the memory budget (null: none taken, the runtime's budget).
    std::shared_ptr<memory_budget> budget;

    /// `o` as the key's chunk readers on this lane must use it: its chunks taken from the
    /// run's share, with this lane's priority.
    chunk_options chunks(chunk_options o) const
    {
        if (budget) o.budget = budget;
        o.priority = priority;
        return o;
    }
};

/** A reader for `sequence_source`: called with a key and its lane, it returns the key's
    cursor, whose `async_next()` completes with the next item or nullopt after the last
    (and throws when the key cannot be read further). It may also have
    `std::string skip_note(std::uint64_t key, std::string_view why)`: what the log says when
    the rest of key `key` is skipped. */
template <class R, class T>
concept sequence_reader = requires(R& r, std::uint64_t k, const sequence_lane& l) {
    { r(k, l).async_next() } -> std::same_as<asio::awaitable<std::optional<T>>>;
};

namespace detail {

/// The shared state of one run of a sequence source.
template <class Reader>
struct sequence_run {
    sequence_run(Reader r, std::uint64_t n, sequence_settings s, std::string name)
        : reader(std::move(r)), count(n), settings(s), stage(std::move(name))
    {
    }
    Reader reader;
    std::uint64_t count;
    sequence_settings settings;
    std::string stage;
    std::size_t lanes = 1;
    std::vector<sequence_lane> lane; // one per lane
};

/// What the log says when the rest of key `k` is skipped after `e`.
template <class Reader>
std::string sequence_skip_note(Reader& r, std::uint64_t k, const std::exception_ptr& e)
{
    std::string why = what_of(e);
    if (why.starts_with("conveyor: ")) why.erase(0, 10);
    if constexpr (requires { { r.skip_note(k, std::string_view(why)) } -> std::convertible_to<std::string>; })
        return r.skip_note(k, std::string_view(why));
    else
        return "key " + std::to_string(k) + ": " + why + "; the rest of its items is skipped";
}

/// One lane: keys `j`, `j + lanes`, … each read to its end in turn into `out`, the error
/// policy applied per key.
template <class T, class Reader>
asio::awaitable<void> sequence_lane_task(std::shared_ptr<run_context> ctx, std::shared_ptr<sequence_run<Reader>> st, std::size_t j,
                                         std::shared_ptr<channel<T>> out)
{
    struct closer {
        channel<T>& ch;
        ~closer() { ch.close(); }
    } closes{*out};
    const sequence_lane& lane = st->lane[j];
    for (std::uint64_t k = j; k < st->count; k += st->lanes) {
        if (ctx->stopping()) co_return;
        std::exception_ptr failed;
        try {
            auto cursor = st->reader(k, lane);
            for (;;) {
                auto next = cursor.async_next(); // named: no temporary lives across the co_await
                std::optional<T> item = co_await std::move(next);
                if (!item) break;
                if (!co_await out->send(std::move(*item))) co_return;
            }
        } catch (...) {
            failed = std::current_exception();
        }
        if (failed) {
            if (ctx->stopping()) co_return; // the failure is the cancellation's doing
            if (st->settings.errors == on_error::fail) {
                // Fail the run before closing this lane: a clean end must not be seen first.
                ctx->fail(failed, st->stage);
                co_return;
            }
            ctx->note_skip(sequence_skip_note(st->reader, k, failed));
        }
        if (st->count - k <= st->lanes) break; // the next key would pass the end (or wrap)
    }
}

/** Starts the lanes and merges their items one from each in turn (lanes that ended are
    passed over), so that the order does not depend on timing. While it waits on a lane it
    marks the lane urgent (`read_priority`): the other lanes' items hold memory until their
    turn comes, and the lane waited on must not wait for that memory. */
template <class T, class Reader>
asio::awaitable<void> merge_sequences(std::shared_ptr<run_context> ctx, std::shared_ptr<sequence_run<Reader>> st, runtime* io,
                                      sink<T>& out)
{
    runtime& rt = io ? *io : ctx->rt();
    // The run's share of the runtime's budget, taken in one piece before any read: its
    // chunk readers then take their chunks from it (`sequence_lane::budget`).
    memory_lease share;
    if (st->settings.memory_per_sequence > 0) {
        const std::size_t want = st->lanes * st->settings.memory_per_sequence;
        auto [ec, lease] = co_await ctx->rt().memory().async_acquire(want, asio::as_tuple(asio::use_awaitable));
        if (ec) co_return;
        share = std::move(lease);
    }
    std::vector<std::shared_ptr<channel<T>>> lanes;
    lanes.reserve(st->lanes);
    // However this ends (the consumer or a `take` stopped listening, or a failure), the
    // lanes are told nobody listens, so that none waits for room for ever.
    struct close_lanes {
        std::vector<std::shared_ptr<channel<T>>>& lanes;
        ~close_lanes()
        {
            for (auto& l : lanes) l->close_receiver();
        }
    } closer{lanes};
    for (std::size_t j = 0; j < st->lanes; ++j) {
        lanes.push_back(make_channel<T>(*ctx, std::max<std::size_t>(st->settings.lane_capacity, 1)));
        ctx->spawn(rt.io_executor(j % rt.io_lanes()), sequence_lane_task<T>(ctx, st, j, lanes.back()), st->stage);
    }
    std::vector<bool> ended(lanes.size(), false);
    std::size_t alive = lanes.size();
    while (alive > 0) {
        for (std::size_t j = 0; j < lanes.size(); ++j) {
            if (ended[j]) continue;
            read_priority& prio = *st->lane[j].priority;
            prio.set_urgent(true);
            auto got = lanes[j]->receive(); // named: no temporary lives across the co_await
            std::optional<T> item = co_await std::move(got);
            prio.set_urgent(false);
            if (!item) {
                ended[j] = true;
                --alive;
                continue;
            }
            if (!co_await out.send(std::move(*item))) co_return;
        }
    }
}

} // namespace detail

/** A source of `count` keys (0 … count-1, or `endless`), each read as a sequence of items
    (a shard's samples): the core that the shard source is built on.

    For each run, `open(run_context&)` is called once and returns the run's reader (see
    `sequence_reader`). `sequences_in_flight` lanes, spread over the I/O lanes of `io` (the
    run's runtime when null), each read keys `j`, `j + lanes`, `j + 2 lanes`, … in turn, each
    to its end; their items are merged one from each lane in turn (the first lane's next
    item, then the second's, …; a lane whose keys are done is passed over), so for given
    keys the order never depends on timing. The core does the rest, the same way for every
    source:
    - a key that fails (its cursor throws, or the reader throws opening it) fails the run
      (named with `stage` unless the error names a stage itself), or, under
      `on_error::skip`, the rest of that key's items is left out, counted in the run's
      stats and logged (`skip_note`), and the lane goes on with its next key;
    - the memory budget: with `memory_per_sequence`, the run takes its read-ahead from the
      runtime's budget in one piece, and the lanes' chunk readers (given
      `sequence_lane::chunks`) take each chunk from that share; while the merge waits on a
      lane, that lane's `read_priority` is marked, so its readers cannot deadlock the merge
      by waiting for memory that only the merge's progress would free (the other lanes'
      items hold it until their turn);
    - breaking out of the loop or destroying the range cancels every lane's read in flight;
    - the run's metrics show the source as a stage called `stage`.

    The reader is shared by all lanes, on several I/O threads at once. An exception thrown
    by `open` fails the run (naming `stage`), whatever `errors` says. */
template <class T, class Open>
pipeline<T> sequence_source(std::string stage, std::uint64_t count, sequence_settings settings, Open open, runtime* io = nullptr)
{
    if (settings.sequences_in_flight == 0) settings.sequences_in_flight = 1;
    return pipeline<T>([stage = std::move(stage), count, settings, open = std::move(open), io](const std::shared_ptr<run_context>& ctx) {
        using reader_type = std::decay_t<std::invoke_result_t<const Open&, run_context&>>;
        static_assert(sequence_reader<reader_type, T>,
                      "sequence_source: the reader must be callable with a std::uint64_t key and a sequence_lane and "
                      "return a cursor whose async_next() returns asio::awaitable<std::optional<T>>");
        std::shared_ptr<detail::sequence_run<reader_type>> st;
        try {
            st = std::make_shared<detail::sequence_run<reader_type>>(open(*ctx), count, settings, stage);
        } catch (...) {
            auto ch = detail::make_channel<T>(*ctx, 1);
            ctx->fail(std::current_exception(), stage);
            ch->close();
            return detail::stream_of(ctx, ch);
        }
        st->lanes = static_cast<std::size_t>(std::max<std::uint64_t>(1, std::min<std::uint64_t>(settings.sequences_in_flight, count)));
        std::shared_ptr<memory_budget> share;
        if (settings.memory_per_sequence > 0) share = std::make_shared<memory_budget>(st->lanes * settings.memory_per_sequence);
        for (std::size_t j = 0; j < st->lanes; ++j) st->lane.push_back({j, std::make_shared<read_priority>(), share});
        return make_stream<T>(ctx, stage, settings.capacity, [ctx, st, io](sink<T>& out) {
            return detail::merge_sequences<T>(ctx, st, io, out);
        });
    });
}

} // namespace conveyor

#if CONVEYOR_HEADER_ONLY
#include <conveyor/core/impl/source.ipp>
#endif

#endif
