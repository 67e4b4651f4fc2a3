// conveyor/cuda/impl/decode.hpp — the template of the GPU decode stage.
#ifndef CONVEYOR_CUDA_IMPL_DECODE_HPP
#define CONVEYOR_CUDA_IMPL_DECODE_HPP

#include <conveyor/core/detail/offload.hpp>
#include <conveyor/cuda/decode.hpp>

#include <deque>
#include <exception>
#include <vector>

namespace conveyor::cuda {

/* How a run goes. One coroutine on the run's thread takes items, a batch at a time, and
   hands their encoded images to the run's GPU thread, which decodes them (the GPU's share
   with nvJPEG, the rest on the compute pool, both at once) straight into the batch's
   device buffers and pinned host slab, and waits for both. A bad image is failed, or
   skipped and its slot filled by the next good one: later images move down a slot (on
   the device or in the slab, wherever they were decoded), and more items are taken to
   fill the end, so batches stay full and in order. Then the CPU-decoded images and the
   labels are copied to the device and the batch goes out. All CUDA work is on the GPU
   thread, in stream order. */
template <class T>
    requires(std::is_same_v<T, shard::sample> || std::is_same_v<T, blob>)
stream<device_batch<image::image_batch>> decode_batches_stage::operator()(const std::shared_ptr<run_context>& ctx, stream<T> in) const
{
    return make_stream<device_batch<image::image_batch>>(
        ctx, "gpu_decode_batches", g_->capacity,
        [ctx = ctx.get(), in, d = d_, b = b_, g = g_, plan = plan_,
         counters = counters_](conveyor::detail::channel<device_batch<image::image_batch>>& out) mutable -> asio::awaitable<void> {
            auto run = detail::make_gpu_batch_run(*ctx, d, b, g, plan, counters);
            const auto gpu = detail::gpu_executor_of(*run);
            const std::size_t n = b->size;
            std::shared_ptr<image::slab_pool> pool = b->pool;
            if (!pool)
                pool = std::make_shared<image::slab_pool>(plan->slab_bytes, b->slabs ? b->slabs : b->capacity + g->ring + 2,
                                                          image::pinned_slab_allocator());
            std::uint64_t index = 0;
            bool ended = false;
            std::vector<T> got;
            while (!ended) {
                image::slab slab = co_await pool->async_acquire();
                const std::size_t set = co_await detail::ring_of(*run)->async_acquire();
                std::vector<device_tensor> tensors;
                try {
                    tensors = co_await conveyor::detail::offload(gpu, [&] { return detail::prepare_batch(*run, set); });
                } catch (...) {
                    detail::ring_of(*run)->release(set, nullptr);
                    throw;
                }
                std::byte* host = slab.data();
                void* device = tensors[0].data;
                std::deque<T> items; // owners of the encoded images' bytes, until the batch is done
                std::vector<std::string> keys(n);
                std::vector<std::int64_t> labels(n, -1);
                std::vector<char> on_gpu(n, 0);
                std::size_t filled = 0;
                while (filled < n) {
                    got.clear();
                    if (!co_await in.async_next_batch(got, n - filled)) {
                        ended = true;
                        break;
                    }
                    std::vector<image::encoded_image> part;
                    std::vector<std::string> part_keys;
                    for (auto& x : got) {
                        T& item = items.emplace_back(std::move(x));
                        try {
                            part.push_back(image::encoded_image_of(item, *d));
                            part_keys.emplace_back(part.back().key);
                        } catch (...) {
                            if (d->errors == on_error::fail || ctx->stopping()) {
                                ctx->fail(std::current_exception(), "gpu_decode_batches", conveyor::detail::item_key(item));
                                detail::ring_of(*run)->release(set, nullptr);
                                co_return;
                            }
                            ctx->note_skip(conveyor::detail::skip_line("gpu_decode_batches", conveyor::detail::item_key(item),
                                                                       std::current_exception()));
                            counters->skipped.fetch_add(1, std::memory_order_relaxed);
                        }
                    }
                    const std::size_t first = filled;
                    std::vector<detail::slot_result> results;
                    try {
                        results = co_await conveyor::detail::offload(gpu, [&] { return detail::decode_part(*run, part, first, host, device); });
                    } catch (...) {
                        detail::ring_of(*run)->release(set, nullptr);
                        throw;
                    }
                    std::vector<std::pair<std::size_t, std::size_t>> moves; // (from, to)
                    for (std::size_t i = 0; i < part.size(); ++i) {
                        detail::slot_result& r = results[i];
                        if (!r.ok) {
                            if (d->errors == on_error::fail || ctx->stopping()) {
                                ctx->fail(r.error, "gpu_decode_batches", part_keys[i]);
                                detail::ring_of(*run)->release(set, nullptr);
                                co_return;
                            }
                            ctx->note_skip(conveyor::detail::skip_line("gpu_decode_batches", part_keys[i], r.error));
                            counters->skipped.fetch_add(1, std::memory_order_relaxed);
                            continue;
                        }
                        if (first + i != filled) moves.emplace_back(first + i, filled);
                        keys[filled] = std::move(part_keys[i]);
                        labels[filled] = part[i].label;
                        on_gpu[filled] = r.on_gpu ? 1 : 0;
                        ++filled;
                    }
                    if (!moves.empty())
                        co_await conveyor::detail::offload(gpu, [&] {
                            for (auto [from, to] : moves) detail::move_slot(*run, from, to, on_gpu[to] != 0, host, device);
                        });
                }
                if (filled == 0 || (filled < n && !b->partial) || ctx->stopping()) {
                    detail::ring_of(*run)->release(set, nullptr);
                    break;
                }
                // The batch: labels into the slab, then the CPU's images and the labels to the device.
                auto* label_out = reinterpret_cast<std::int64_t*>(host + plan->labels_offset);
                for (std::size_t i = 0; i < filled; ++i) label_out[i] = labels[i];
                try {
                    co_await conveyor::detail::offload(gpu, [&] { detail::finish_batch(*run, set, filled, on_gpu, host, tensors); });
                } catch (...) {
                    detail::ring_of(*run)->release(set, nullptr);
                    throw;
                }
                auto hb = std::make_shared<image::image_batch>();
                const std::int64_t h = plan->height, w = plan->width, c = plan->channels, count = static_cast<std::int64_t>(filled);
                hb->layout = b->layout;
                hb->images.type = b->type;
                hb->images.shape = b->layout == image::tensor_layout::nhwc ? std::vector<std::int64_t>{count, h, w, c}
                                                                           : std::vector<std::int64_t>{count, c, h, w};
                hb->images.strides = b->layout == image::tensor_layout::nhwc ? std::vector<std::int64_t>{h * w * c, w * c, c, 1}
                                                                            : std::vector<std::int64_t>{c * h * w, h * w, w, 1};
                hb->labels = {label_out, image::dtype::int64, {count}, {1}};
                keys.resize(filled);
                hb->keys = std::move(keys);
                hb->slab = std::move(slab);
                hb->index = index++;
                tensors[0].shape = hb->images.shape;
                tensors[0].bytes = filled * plan->item_bytes;
                tensors[1].shape = {count};
                tensors[1].bytes = filled * sizeof(std::int64_t);
                items.clear();
                counters->batches.fetch_add(1, std::memory_order_relaxed);
                auto batch = detail::device_batch_access<image::image_batch>::make(hb, std::move(tensors), detail::ring_of(*run), set, {});
                if (!co_await out.send(std::move(batch))) {
                    in.close();
                    co_return;
                }
            }
            in.close();
        });
}

} // namespace conveyor::cuda

#endif
