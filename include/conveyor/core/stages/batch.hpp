// conveyor/core/stages/batch.hpp — the `batch` stage: groups items into vectors of `n`.
#ifndef CONVEYOR_CORE_STAGES_BATCH_HPP
#define CONVEYOR_CORE_STAGES_BATCH_HPP

#include <conveyor/core/error.hpp>
#include <conveyor/core/pipeline.hpp>

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace conveyor {

/// Settings of `batch`.
struct batch_options {
    /// Deliver a last, smaller batch (true) or drop it (false).
    bool partial = true;
    /// Batches waiting between this stage and the next.
    std::size_t capacity = 4;
};

/// The `batch` stage; see `conveyor::batch`.
class batch_stage {
public:
    batch_stage(std::size_t n, batch_options o) : n_(n), o_(o)
    {
        if (n == 0) throw error(make_error_code(errc::invalid_argument), {.stage = "batch", .detail = "batch size must be at least 1"});
    }

    template <class T>
    stream<std::vector<T>> operator()(const std::shared_ptr<run_context>& ctx, stream<T> in) const
    {
        return make_stream<std::vector<T>>(
            ctx, "batch", o_.capacity,
            [in, n = n_, o = o_](sink<std::vector<T>>& out) mutable -> asio::awaitable<void> {
                std::vector<T> cur;
                cur.reserve(n);
                std::vector<T> got;
                while (co_await in.async_next_batch(got, n - cur.size())) {
                    for (auto& x : got) cur.push_back(std::move(x));
                    got.clear();
                    if (cur.size() == n) {
                        if (!co_await out.send(std::move(cur))) {
                            in.close();
                            co_return;
                        }
                        cur = std::vector<T>(); // not `= {}`: that is the initializer-list assignment, which copies
                        cur.reserve(n);
                    }
                }
                if (!cur.empty() && o.partial) co_await out.send(std::move(cur));
            });
    }

private:
    std::size_t n_;
    batch_options o_;
};

/// Groups items into vectors of `n` (the last one may be smaller; see `batch_options`).
inline batch_stage batch(std::size_t n, batch_options o = {})
{
    return batch_stage(n, o);
}

} // namespace conveyor

#endif
