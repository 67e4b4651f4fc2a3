// conveyor/core/stages/shuffle.hpp — the `shuffle` stage: held items leave in random order.
#ifndef CONVEYOR_CORE_STAGES_SHUFFLE_HPP
#define CONVEYOR_CORE_STAGES_SHUFFLE_HPP

#include <conveyor/core/detail/splitmix64.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/pipeline.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace conveyor {

/// Settings of `shuffle`.
struct shuffle_options {
    /// Items held for shuffling; more is more random and more memory.
    std::size_t buffer = 1000;
    /// Items to collect before the first one leaves (0: the whole buffer).
    std::size_t initial = 0;
    /// The seed; with the run's epoch it fixes the order.
    std::uint64_t seed = 0;
};

namespace detail {

/// An item type with a `compact_for_holding(T&)` found by argument-dependent lookup: what a
/// stage calls on an item it is about to hold for long (see `shuffle`).
template <class T>
concept compactable = requires(T& t) { compact_for_holding(t); };

template <class T>
void hold_compactly(T& item)
{
    if constexpr (compactable<T>) compact_for_holding(item);
}

} // namespace detail

/// The `shuffle` stage; see `conveyor::shuffle`.
class shuffle_stage {
public:
    explicit shuffle_stage(shuffle_options o) : o_(o)
    {
        if (o_.buffer == 0) throw error(make_error_code(errc::invalid_argument), {.stage = "shuffle", .detail = "shuffle buffer must hold at least 1 item"});
        if (o_.initial == 0 || o_.initial > o_.buffer) o_.initial = o_.buffer;
    }

    template <class T>
    stream<T> operator()(const std::shared_ptr<run_context>& ctx, stream<T> in) const
    {
        const std::uint64_t seed = detail::epoch_seed(o_.seed, ctx->epoch());
        return make_stream<T>(ctx, "shuffle", default_stream_capacity,
                              [in, o = o_, seed](sink<T>& out) mutable -> asio::awaitable<void> {
                                  detail::splitmix64 rng(seed);
                                  std::vector<T> pool;
                                  pool.reserve(o.buffer + 1);
                                  std::uint64_t arrived = 0;
                                  std::vector<T> got, put;
                                  while (co_await in.async_next_batch(got, 256)) {
                                      for (auto& x : got) {
                                          detail::hold_compactly(x);
                                          pool.push_back(std::move(x));
                                          ++arrived;
                                          // Emit (a random one of the `buffer` held, so a buffer of
                                          // one keeps the order) once full; between `initial` and
                                          // full, on every other arrival, so the pool keeps growing.
                                          const bool emit = pool.size() >= o.buffer ||
                                                            (pool.size() >= o.initial && (arrived & 1) == 0);
                                          if (!emit) continue;
                                          const auto k = rng.below(pool.size());
                                          std::swap(pool[k], pool.back());
                                          put.push_back(std::move(pool.back()));
                                          pool.pop_back();
                                      }
                                      got.clear();
                                      if (!put.empty() && !co_await out.send_all(put)) {
                                          in.close();
                                          co_return;
                                      }
                                  }
                                  // Drain: a Fisher-Yates pass over what is held.
                                  for (std::size_t i = pool.size(); i > 1; --i) std::swap(pool[i - 1], pool[rng.below(i)]);
                                  co_await out.send_all(pool);
                              });
    }

private:
    shuffle_options o_;
};

/** Shuffles with a bounded buffer (webdataset's method): held items leave in random order
    as new ones arrive. Deterministic for a given seed and epoch.

    Items of a type with a `compact_for_holding(T&)` (found by argument-dependent lookup)
    are passed to it as they enter the buffer. Shard samples have one: their fields are
    zero-copy views of the chunks they were read in, and a buffer of them, each drawn at a
    random time, would keep up to one whole chunk alive per sample held; compacted, a
    sample holds its own bytes (one copy each). */
inline shuffle_stage shuffle(shuffle_options o = {})
{
    return shuffle_stage(o);
}

} // namespace conveyor

#endif
