// conveyor/core/stages/map.hpp — the `map` stage: a function over every item, on one or more workers.
#ifndef CONVEYOR_CORE_STAGES_MAP_HPP
#define CONVEYOR_CORE_STAGES_MAP_HPP

#include <conveyor/core/detail/offload.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/metrics.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/run_context.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace conveyor {

namespace detail {
template <class X>
struct awaitable_value {
    using type = void;
    static constexpr bool is_awaitable = false;
};
template <class U, class E>
struct awaitable_value<asio::awaitable<U, E>> {
    using type = U;
    static constexpr bool is_awaitable = true;
};

/* How many items a worker of a parallel `map` takes at once. One item at a time costs a
   channel round trip per item, and on the compute pool a hop to a pool thread and back
   (two wake-ups, microseconds); for cheap functions that is most of the time. So a worker
   takes as many items as run in about 50 us by the function's measured cost per item (a
   moving average), at most `max_items`, and for items whose bytes are known at most
   `max_bytes` of them; a function that takes 50 us or more goes one item at a time, so
   slow calls (decode) still spread over all workers, and a batch holds back at most about
   50 us of work from the other workers. One per worker.

   Why 256: a hop costs about the same however many items it carries, so a cheap function
   on the compute pool runs at a fraction of its per-item cost only when its batches are
   hundreds long (with the room for them upstream, see `map_stage`;
   conveyor-micro-bench measures it). The byte bound keeps a cheap function over large items (a `blob`'s size) from holding
   hundreds of files in its workers' batches and in the room they ask upstream. */
class batch_sizer {
public:
    std::size_t want() const noexcept { return want_; }

    /// `n` items of `bytes` in all (0: not known) took `ticks` (`wait_clock`) to run.
    void record(std::size_t n, std::int64_t ticks, std::size_t bytes = 0) noexcept
    {
        if (n == 0) return;
        const double per_item = static_cast<double>(std::max<std::int64_t>(ticks, 1)) / static_cast<double>(n);
        cost_ = cost_ < 0 ? per_item : cost_ + (per_item - cost_) / 4;
        double fit = target_ticks() / cost_;
        if (bytes > 0) {
            const double item_bytes = static_cast<double>(bytes) / static_cast<double>(n);
            bytes_ = bytes_ < 0 ? item_bytes : bytes_ + (item_bytes - bytes_) / 4;
            fit = std::min(fit, static_cast<double>(max_bytes) / bytes_);
        }
        want_ = fit >= static_cast<double>(max_items) ? max_items : std::max<std::size_t>(1, static_cast<std::size_t>(fit));
    }

    static constexpr std::size_t max_items = 256;
    static constexpr std::size_t max_bytes = std::size_t{4} << 20;

private:
    static double target_ticks() noexcept
    {
        static const double ticks = 50'000 / wait_clock::ns_per_tick();
        return ticks;
    }
    double cost_ = -1;  // ticks per item; negative until measured
    double bytes_ = -1; // bytes per item; negative until measured
    std::size_t want_ = 1;
};
} // namespace detail

/// Where a synchronous map function runs.
enum class run_on {
    io,      ///< inline on the pipeline's I/O thread: for cheap functions
    compute, ///< on the runtime's compute pool: for CPU work (decode, parsing)
};

/// Settings of `map`.
struct map_options {
    /// Calls of the function in flight at once.
    std::size_t concurrency = 1;
    /// Keep input order (true) or deliver in completion order (false).
    bool ordered = true;
    /// Where a synchronous function runs (coroutine functions run on the I/O thread and
    /// hop wherever they like).
    run_on where = run_on::io;
    /// What an exception from the function does.
    on_error errors = on_error::fail;
    /// Items waiting between this stage and the next. With `concurrency` > 1 and a
    /// synchronous function, the stage also has room for the batch each worker takes (one
    /// item for a function that takes 50 us or more, up to 256 for a cheap one, at most
    /// 4 MiB of items whose bytes are known), and asks the stage before it for as much
    /// room, so that a worker finds a whole batch waiting.
    std::size_t capacity = default_stream_capacity;
    /// The stage's name in errors.
    std::string name = "map";
};

/// The type `map(f)` produces from `T`: what `f` returns, or what its awaitable yields.
template <class F, class T>
using map_result_t = std::conditional_t<detail::awaitable_value<std::invoke_result_t<F&, T&&>>::is_awaitable,
                                        typename detail::awaitable_value<std::invoke_result_t<F&, T&&>>::type,
                                        std::invoke_result_t<F&, T&&>>;

/// The `map` stage; see `conveyor::map`.
template <class F>
class map_stage {
public:
    map_stage(F f, map_options o) : f_(std::make_shared<F>(std::move(f))), o_(std::move(o))
    {
        if (o_.concurrency == 0) throw error(make_error_code(errc::invalid_argument), {.stage = o_.name, .detail = "map concurrency must be at least 1"});
    }

    template <class T>
    stream<map_result_t<F, T>> operator()(const std::shared_ptr<run_context>& ctx, stream<T> in) const
    {
        using U = map_result_t<F, T>;
        constexpr bool is_coro = detail::awaitable_value<std::invoke_result_t<F&, T&&>>::is_awaitable;
        if constexpr (!is_coro) {
            if (o_.concurrency == 1 && o_.where == run_on::io) return inline_map<T, U>(ctx, std::move(in));
        }
        return parallel_map<T, U, is_coro>(ctx, std::move(in));
    }

private:
    // One task, batch in, batch out: the cheapest path, for functions that cost little.
    template <class T, class U>
    stream<U> inline_map(const std::shared_ptr<run_context>& ctx, stream<T> in) const
    {
        return make_stream<U>(ctx, o_.name, o_.capacity,
                              [in, f = f_, o = o_, ctx = ctx.get()](sink<U>& out) mutable -> asio::awaitable<void> {
                                  std::vector<T> got;
                                  std::vector<U> put;
                                  while (co_await in.async_next_batch(got, 256)) {
                                      for (auto& x : got) {
                                          // The key is taken before the item moves into `f` (free
                                          // for items without one), so errors can name it.
                                          std::string key = detail::item_key(x);
                                          try {
                                              put.push_back((*f)(std::move(x)));
                                          } catch (...) {
                                              if (o.errors == on_error::fail) {
                                                  ctx->fail(std::current_exception(), o.name, key);
                                                  co_return;
                                              }
                                              ctx->note_skip(detail::skip_line(o.name, key, std::current_exception()));
                                          }
                                      }
                                      got.clear();
                                      if (!co_await out.send_all(put)) {
                                          in.close();
                                          co_return;
                                      }
                                  }
                              });
    }

    // N workers share the input; each item keeps its position (ordered) or not.
    template <class T, class U, bool IsCoro>
    stream<U> parallel_map(const std::shared_ptr<run_context>& ctx, stream<T> in) const
    {
        // A synchronous function's workers take batches (`batch_sizer`): the channel gets
        // room for every worker's batch beyond its capacity, added by each worker as its
        // batches grow or shrink (`window`), so that a worker ahead in the order places its
        // batch at once rather than a stretch at a time behind the worker before it. Slots
        // are allocated for the largest batches; the room follows the batches taken, so a
        // slow function (decode: one item at a time) keeps about `capacity` + workers.
        // At most `max_extra_room` slots more, so that a map of many workers does not
        // allocate slots for tens of thousands of items up front.
        //
        // The input channel gets as much more room, asked by each worker for its batch the
        // same way: a worker takes what is waiting, so with only the producer's capacity
        // (64) the first worker would empty it and the others take what trickles in,
        // batches far smaller than `batch_sizer` wants.
        const std::size_t base = std::max(o_.capacity, o_.concurrency);
        const std::size_t extra = std::min(o_.concurrency * detail::batch_sizer::max_items, max_extra_room);
        auto out = detail::make_channel<U>(*ctx, base, IsCoro ? 0 : base + extra);
        if constexpr (!IsCoro) detail::channel_of(in)->add_slots(extra);
        detail::register_stage(*ctx, o_.name, out, o_.concurrency);
        auto remaining = std::make_shared<std::atomic<std::size_t>>(o_.concurrency);
        for (std::size_t w = 0; w < o_.concurrency; ++w)
            ctx->spawn(worker<T, U, IsCoro>(ctx, in, out, f_, o_, remaining), o_.name);
        return detail::stream_of(ctx, out);
    }

    // What went wrong with the item at `at` of a batch.
    struct fault {
        std::size_t at;
        std::exception_ptr error;
    };

    /* Calls `f` on each of `items` (moved from), filling `results` and `keys` (the item
       keys, taken before the items move, for errors). Stops at the first exception when
       `stop_at_first`, else records each and goes on. Returns the time taken (`wait_clock` ticks). */
    template <class T, class U>
    static std::int64_t apply(F& f, std::vector<T>& items, std::vector<std::optional<U>>& results,
                              std::vector<std::string>& keys, std::vector<fault>& faults, bool stop_at_first)
    {
        const auto t0 = detail::wait_clock::now();
        for (std::size_t i = 0; i < items.size(); ++i) {
            keys.push_back(detail::item_key(items[i]));
            results.emplace_back();
            try {
                results.back().emplace(f(std::move(items[i])));
            } catch (...) {
                faults.push_back({i, std::current_exception()});
                if (stop_at_first) break;
            }
        }
        return detail::wait_clock::now() - t0;
    }

    template <class T, class U, bool IsCoro>
    static asio::awaitable<void> worker(std::shared_ptr<run_context> ctx, stream<T> in,
                                        std::shared_ptr<detail::channel<U>> out, std::shared_ptr<F> f,
                                        map_options o, std::shared_ptr<std::atomic<std::size_t>> remaining)
    {
        detail::last_worker_closes<U> closer{*remaining, *out};

        std::vector<T> got;
        std::vector<std::optional<U>> results;
        std::vector<std::string> keys;
        std::vector<fault> faults;
        std::vector<U> unordered;
        detail::batch_sizer sizer;
        std::size_t room_for = 0; // the batch this worker has added room for in the channels
        // Each channel's room is its capacity plus the batch each worker takes now: each
        // worker adds the change of its own batch size, to its output and to its input.
        const auto window = [&](std::size_t batch) {
            if (batch == room_for) return;
            const auto by = static_cast<std::ptrdiff_t>(batch) - static_cast<std::ptrdiff_t>(room_for);
            out->add_room(by);
            detail::channel_of(in)->add_room(by);
            room_for = batch;
        };
        std::uint64_t index = 0;
        // A coroutine function awaits I/O: its calls overlap only across workers, so each
        // worker takes one item at a time.
        while (co_await detail::channel_of(in)->receive_some(got, IsCoro ? 1 : sizer.want(), &index)) {
            results.clear();
            keys.clear();
            faults.clear();
            const bool stop_at_first = o.errors == on_error::fail;
            if constexpr (IsCoro) {
                keys.push_back(detail::item_key(got.front()));
                results.emplace_back();
                try {
                    results.back().emplace(co_await (*f)(std::move(got.front())));
                } catch (...) {
                    faults.push_back({0, std::current_exception()});
                }
            } else {
                // The batch's bytes, counted before the function takes the items.
                std::size_t bytes = 0;
                if constexpr (detail::has_byte_size<T>())
                    for (const auto& x : got) bytes += detail::item_bytes(x);
                std::int64_t ticks = 0;
                if (o.where == run_on::compute) {
                    ticks = co_await detail::offload(ctx->rt().compute_executor(), [&] {
                        return apply<T, U>(*f, got, results, keys, faults, stop_at_first);
                    });
                } else {
                    ticks = apply<T, U>(*f, got, results, keys, faults, stop_at_first);
                }
                sizer.record(results.size(), ticks, bytes);
                window(sizer.want());
            }
            got.clear();
            // A failure ends the run at once, as it would have one item at a time: the
            // results of the batch before it are dropped, not sent first, since sending may
            // wait for a consumer that is not reading.
            for (const auto& fl : faults) {
                if (o.errors == on_error::fail || ctx->stopping()) {
                    ctx->fail(fl.error, o.name, keys[fl.at]);
                    co_return;
                }
                ctx->note_skip(detail::skip_line(o.name, keys[fl.at], fl.error));
            }
            bool listening = true;
            if (o.ordered) {
                listening = co_await out->send_run_at(index, std::span<std::optional<U>>(results));
            } else {
                for (auto& r : results)
                    if (r) unordered.push_back(std::move(*r));
                listening = unordered.empty() ? !out->receiver_gone() : co_await out->send_all(unordered);
            }
            if (!listening) {
                in.close();
                co_return;
            }
        }
    }

    // The most slots a parallel map's channel has beyond its capacity for its workers' batches.
    static constexpr std::size_t max_extra_room = 1024;

    std::shared_ptr<F> f_;
    map_options o_;
};

/** Applies `f` to every item.

    `f` is either synchronous (`U f(T)`) or a coroutine (`asio::awaitable<U> f(T)`).
    With `concurrency` N, up to N calls are in flight; `ordered` keeps input order.
    Synchronous functions run inline on the I/O thread unless `where = run_on::compute`.
    With `concurrency` > 1, each worker of a synchronous function takes several items at
    once when the function is cheap (as many as it runs in about 50 us, at most 256), so
    the hand-offs between threads are paid per batch, not per item.

    @code
    auto p = files | map([](blob b) { return b.data.size(); }, {.concurrency = 4, .where = run_on::compute});
    @endcode
*/
template <class F>
map_stage<F> map(F f, map_options o = {})
{
    return map_stage<F>(std::move(f), std::move(o));
}

} // namespace conveyor

#endif
