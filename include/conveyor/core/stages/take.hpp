// conveyor/core/stages/take.hpp — the `take` stage: the first `n` items, then upstream stops.
#ifndef CONVEYOR_CORE_STAGES_TAKE_HPP
#define CONVEYOR_CORE_STAGES_TAKE_HPP

#include <conveyor/core/pipeline.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

namespace conveyor {

/// The `take` stage; see `conveyor::take`.
class take_stage {
public:
    explicit take_stage(std::uint64_t n) : n_(n) {}

    template <class T>
    stream<T> operator()(const std::shared_ptr<run_context>& ctx, stream<T> in) const
    {
        return make_stream<T>(ctx, "take", default_stream_capacity,
                              [in, n = n_](sink<T>& out) mutable -> asio::awaitable<void> {
                                  std::uint64_t left = n;
                                  std::vector<T> got;
                                  // No co_await inside `&&`: GCC 12 evaluates it even when the
                                  // left side is false.
                                  while (left > 0) {
                                      if (!co_await in.async_next_batch(got, std::min<std::uint64_t>(left, 256))) break;
                                      left -= got.size();
                                      if (!co_await out.send_all(got)) break;
                                  }
                                  in.close(); // upstream stops: nobody needs more
                              });
    }

private:
    std::uint64_t n_;
};

/// Passes the first `n` items, then stops everything upstream (a dataset limit).
inline take_stage take(std::uint64_t n)
{
    return take_stage(n);
}

} // namespace conveyor

#endif
