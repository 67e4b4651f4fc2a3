// conveyor/core/stages/prefetch.hpp — the `prefetch` stage: upstream runs ahead by a bounded count.
#ifndef CONVEYOR_CORE_STAGES_PREFETCH_HPP
#define CONVEYOR_CORE_STAGES_PREFETCH_HPP

#include <conveyor/core/pipeline.hpp>

#include <cstddef>
#include <memory>
#include <vector>

namespace conveyor {

/// The `prefetch` stage; see `conveyor::prefetch`.
class prefetch_stage {
public:
    explicit prefetch_stage(std::size_t n) : n_(n) {}

    template <class T>
    stream<T> operator()(const std::shared_ptr<run_context>& ctx, stream<T> in) const
    {
        return make_stream<T>(ctx, "prefetch", n_, [in](sink<T>& out) mutable -> asio::awaitable<void> {
            std::vector<T> got;
            while (co_await in.async_next_batch(got, 256))
                if (!co_await out.send_all(got)) {
                    in.close();
                    co_return;
                }
        });
    }

private:
    std::size_t n_;
};

/// Lets upstream run up to `n` items ahead of downstream (memory: `n` items).
inline prefetch_stage prefetch(std::size_t n)
{
    return prefetch_stage(n);
}

} // namespace conveyor

#endif
