// conveyor/core/stages/filter.hpp — the `filter` stage: keeps the items a predicate accepts.
#ifndef CONVEYOR_CORE_STAGES_FILTER_HPP
#define CONVEYOR_CORE_STAGES_FILTER_HPP

#include <conveyor/core/pipeline.hpp>

#include <memory>
#include <utility>
#include <vector>

namespace conveyor {

/// The `filter` stage; see `conveyor::filter`.
template <class P>
class filter_stage {
public:
    explicit filter_stage(P p) : p_(std::move(p)) {}

    template <class T>
    stream<T> operator()(const std::shared_ptr<run_context>& ctx, stream<T> in) const
    {
        return make_stream<T>(ctx, "filter", default_stream_capacity,
                              [in, p = p_](sink<T>& out) mutable -> asio::awaitable<void> {
                                  std::vector<T> got, put;
                                  while (co_await in.async_next_batch(got, 256)) {
                                      for (auto& x : got)
                                          if (p(std::as_const(x))) put.push_back(std::move(x));
                                      got.clear();
                                      if (!co_await out.send_all(put)) {
                                          in.close();
                                          co_return;
                                      }
                                  }
                              });
    }

private:
    P p_;
};

/// Keeps the items for which `pred(const T&)` is true.
template <class P>
filter_stage<P> filter(P pred)
{
    return filter_stage<P>(std::move(pred));
}

} // namespace conveyor

#endif
