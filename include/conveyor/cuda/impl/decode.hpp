// conveyor/cuda/impl/decode.hpp — the template of the GPU decode stage: what depends on the
// item type (taking the items and their encoded images); the rest is compiled once
// (cuda/impl/decode.ipp).
#ifndef CONVEYOR_CUDA_IMPL_DECODE_HPP
#define CONVEYOR_CUDA_IMPL_DECODE_HPP

#include <conveyor/cuda/decode.hpp>

#include <chrono>
#include <exception>
#include <vector>

namespace conveyor::cuda {

namespace detail {

/// The items of `owned` as the run decodes them: each one's encoded image (pointing into
/// `owned`, which the result keeps) or why it has none.
template <class T>
gpu_items gpu_items_of(std::shared_ptr<std::vector<T>> owned, const image::decode_image_options& d)
{
    gpu_items out;
    out.items.resize(owned->size());
    for (std::size_t i = 0; i < owned->size(); ++i) {
        const T& x = (*owned)[i];
        gpu_item& g = out.items[i];
        g.key = conveyor::detail::item_key(x);
        g.id = image::item_id(x);
        try {
            g.image = image::encoded_image_of(x, d);
        } catch (...) {
            g.error = std::current_exception();
        }
    }
    out.owner = std::move(owned);
    return out;
}

/// Takes the stage's input, a batch's worth at a time (taken ahead while the batch before
/// decodes), into `ahead`; measures the time spent waiting for it: the split's input rate.
template <class T>
asio::awaitable<void> take_gpu_items(stream<T> in, std::shared_ptr<conveyor::detail::channel<gpu_items>> ahead, std::size_t n,
                                     std::shared_ptr<input_meter> input, std::shared_ptr<const image::decode_image_options> d)
{
    for (;;) {
        auto owned = std::make_shared<std::vector<T>>();
        owned->reserve(n);
        bool more = true;
        const auto t0 = std::chrono::steady_clock::now();
        while (owned->size() < n && (more = co_await in.async_next_batch(*owned, n - owned->size()))) {
        }
        input->waited(std::chrono::steady_clock::now() - t0, owned->size());
        if (!owned->empty()) {
            gpu_items items = gpu_items_of(std::move(owned), *d); // named: GCC 12 and temporaries in co_await
            if (!co_await ahead->send(std::move(items))) break;
        }
        if (!more) break;
    }
    in.close();
    ahead->close();
}

} // namespace detail

template <class T>
    requires(std::is_same_v<T, shard::sample> || std::is_same_v<T, blob>)
stream<device_batch<image::image_batch>> decode_batches_stage::operator()(const std::shared_ptr<run_context>& ctx, stream<T> in) const
{
    auto ahead = conveyor::detail::make_channel<detail::gpu_items>(*ctx, 2);
    auto input = std::make_shared<detail::input_meter>();
    ctx->spawn(detail::take_gpu_items<T>(std::move(in), ahead, b_->size, input, d_), "gpu_decode_batches");
    return batches(ctx, std::move(ahead), std::move(input));
}

} // namespace conveyor::cuda

#endif
