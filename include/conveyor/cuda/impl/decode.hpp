// conveyor/cuda/impl/decode.hpp — the template of the GPU decode stage.
#ifndef CONVEYOR_CUDA_IMPL_DECODE_HPP
#define CONVEYOR_CUDA_IMPL_DECODE_HPP

#include <conveyor/core/detail/offload.hpp>

#include <boost/asio/this_coro.hpp>
#include <conveyor/cuda/decode.hpp>

#include <chrono>
#include <deque>
#include <exception>
#include <vector>

namespace conveyor::cuda {

/* How a run goes. One coroutine on the run's thread takes items, a batch at a time, and
   hands their encoded images to the run's GPU thread, which decodes them (the GPU's share
   with nvJPEG, the rest on the compute pool, both at once) straight into the batch's
   device buffers and pinned host slab. It waits for the CPU's share, but not for the
   device: nvJPEG's work is queued on the stream and the next batch's host work goes on
   meanwhile. A bad image is failed, or skipped and its slot filled by the next good one:
   later images move down a slot (on the device or in the slab, wherever they were
   decoded), and more items are taken to fill the end, so batches stay full and in order.
   Then the CPU-decoded images and the labels are copied to the device and the batch goes
   out, its ready event recorded after all of that. All CUDA work is on the GPU thread, in
   stream order. The items (owners of the encoded bytes nvJPEG reads) and the slab (read
   by the copies) live until the stream is past the batch. */
template <class T>
    requires(std::is_same_v<T, shard::sample> || std::is_same_v<T, blob>)
stream<device_batch<image::image_batch>> decode_batches_stage::operator()(const std::shared_ptr<run_context>& ctx, stream<T> in) const
{
    // Items, a batch's worth at a time, taken ahead while the batch before decodes.
    // The time spent waiting for them is measured: the split's input rate.
    auto ahead = conveyor::detail::make_channel<std::vector<T>>(*ctx, 2);
    auto input = std::make_shared<detail::input_meter>();
    const std::size_t n = b_->size;
    ctx->spawn(
        [](stream<T> in, std::shared_ptr<conveyor::detail::channel<std::vector<T>>> ahead, std::size_t n,
           std::shared_ptr<detail::input_meter> input) -> asio::awaitable<void> {
            for (;;) {
                std::vector<T> items;
                items.reserve(n);
                bool more = true;
                const auto t0 = std::chrono::steady_clock::now();
                while (items.size() < n && (more = co_await in.async_next_batch(items, n - items.size()))) {
                }
                input->wait_ns.fetch_add(static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                                        std::chrono::steady_clock::now() - t0)
                                                                        .count()),
                                         std::memory_order_relaxed);
                input->items.fetch_add(items.size(), std::memory_order_relaxed);
                if (!items.empty() && !co_await ahead->send(std::move(items))) break;
                if (!more) break;
            }
            in.close();
            ahead->close();
        }(std::move(in), ahead, n, input),
        "gpu_decode_batches");
    return make_stream<device_batch<image::image_batch>>(
        ctx, "gpu_decode_batches", g_->capacity,
        [ctx = ctx.get(), ahead, d = d_, b = b_, g = g_, plan = plan_, counters = counters_, cache = cache_,
         pool = pool_, input](sink<device_batch<image::image_batch>>& out) mutable -> asio::awaitable<void> {
            struct closer {
                conveyor::detail::channel<std::vector<T>>& ahead;
                ~closer() { ahead.close_receiver(); }
            } close_on_exit{*ahead};
            auto run = detail::make_gpu_batch_run(*ctx, d, b, g, plan, counters, cache, input);
            const auto gpu = detail::gpu_executor_of(*run);
            const asio::any_io_executor here = co_await asio::this_coro::executor;
            const std::size_t n = b->size;
            std::deque<T> pending; // items taken from `ahead`, not yet decoded, in input order
            bool ended = false;
            // Whether an item is pending, taking the next ones from `ahead` if none is.
            auto have_item = [&]() -> asio::awaitable<bool> {
                if (pending.empty() && !ended) {
                    std::vector<std::vector<T>> one;
                    if (co_await ahead->receive_some(one, 1))
                        for (auto& x : one.front()) pending.push_back(std::move(x));
                    else
                        ended = true;
                }
                co_return !pending.empty();
            };
            // Up to `want` items from the front of the input, into `got`.
            auto next_items = [&](std::size_t want, std::vector<T>& got) -> asio::awaitable<void> {
                while (got.size() < want && co_await have_item()) {
                    got.push_back(std::move(pending.front()));
                    pending.pop_front();
                }
            };
            std::uint64_t index = 0;
            std::vector<T> got;
            // An item before the slab and the buffer set: the run ends without taking them
            // (a consumer may hold every set until the end).
            while (co_await have_item()) {
                image::slab slab = co_await pool->async_acquire();
                const std::size_t set = co_await detail::ring_of(*run)->async_acquire();
                detail::held_set held{detail::ring_of(*run), set}; // given back unless a batch takes it out
                std::vector<device_tensor> tensors = co_await conveyor::detail::offload(gpu, [&] { return detail::prepare_batch(*run, set); });
                std::byte* host = slab.data();
                void* device = tensors[0].data;
                // The owners of the encoded images' bytes: they go with the host batch, or,
                // if the batch does not go out, once the stream is past what was queued.
                struct owners {
                    image::image_batch batch;
                    std::deque<T> items;
                };
                auto own = std::make_shared<owners>();
                struct owners_guard {
                    std::shared_ptr<owners>& own;
                    detail::staging_ring& ring;
                    asio::any_io_executor ex;
                    owners_guard(std::shared_ptr<owners>& o, detail::staging_ring& r, asio::any_io_executor e) : own(o), ring(r), ex(std::move(e)) {}
                    owners_guard(const owners_guard&) = delete;
                    owners_guard& operator=(const owners_guard&) = delete;
                    ~owners_guard()
                    {
                        if (!own) return;
                        try {
                            ring.when_done(detail::host_keepalive<owners>{std::move(own), ex});
                        } catch (...) {
                            // A failed device reads nothing any more.
                        }
                    }
                } own_guard(own, *detail::ring_of(*run), here);
                std::deque<T>& items = own->items;
                std::vector<std::string> keys(n);
                std::vector<conveyor::sample_id> ids(n);
                std::vector<std::int64_t> labels(n, -1);
                std::vector<char> on_gpu(n, 0);
                std::size_t filled = 0;
                while (filled < n) {
                    got.clear();
                    co_await next_items(n - filled, got);
                    if (got.empty()) break;
                    std::vector<image::encoded_image> part;
                    std::vector<std::string> part_keys;
                    std::vector<conveyor::sample_id> part_ids;
                    for (auto& x : got) {
                        T& item = items.emplace_back(std::move(x));
                        try {
                            part.push_back(image::encoded_image_of(item, *d));
                            part_keys.emplace_back(part.back().key);
                            part_ids.push_back(image::item_id(item));
                        } catch (...) {
                            if (d->errors == on_error::fail || ctx->stopping()) {
                                ctx->fail(std::current_exception(), "gpu_decode_batches", conveyor::detail::item_key(item));
                                co_return;
                            }
                            ctx->note_skip(conveyor::detail::skip_line("gpu_decode_batches", conveyor::detail::item_key(item),
                                                                       std::current_exception()));
                            counters->skipped.fetch_add(1, std::memory_order_relaxed);
                        }
                    }
                    const std::size_t first = filled;
                    std::vector<detail::slot_result> results =
                        co_await conveyor::detail::offload(gpu, [&] { return detail::decode_part(*run, part, first, host, device); });
                    std::vector<std::pair<std::size_t, std::size_t>> moves; // (from, to)
                    for (std::size_t i = 0; i < part.size(); ++i) {
                        detail::slot_result& r = results[i];
                        if (!r.ok) {
                            if (d->errors == on_error::fail || ctx->stopping()) {
                                ctx->fail(r.error, "gpu_decode_batches", part_keys[i]);
                                co_return;
                            }
                            ctx->note_skip(conveyor::detail::skip_line("gpu_decode_batches", part_keys[i], r.error));
                            counters->skipped.fetch_add(1, std::memory_order_relaxed);
                            continue;
                        }
                        if (first + i != filled) moves.emplace_back(first + i, filled);
                        keys[filled] = std::move(part_keys[i]);
                        ids[filled] = part_ids[i];
                        labels[filled] = part[i].label;
                        on_gpu[filled] = r.on_gpu ? 1 : 0;
                        ++filled;
                    }
                    if (!moves.empty())
                        co_await conveyor::detail::offload(gpu, [&] {
                            for (auto [from, to] : moves) detail::move_slot(*run, from, to, on_gpu[to] != 0, host, device);
                        });
                }
                if (filled == 0 || (filled < n && !b->partial) || ctx->stopping()) break;
                // The batch: labels into the slab, then the CPU's images and the labels to the device.
                auto* label_out = reinterpret_cast<std::int64_t*>(host + plan->labels_offset);
                for (std::size_t i = 0; i < filled; ++i) label_out[i] = labels[i];
                own->batch = image::detail::batch_over_slab(std::move(slab), std::move(keys), filled, index++, *b, *plan);
                ids.resize(filled);
                own->batch.ids = std::move(ids);
                own->batch.images.data = nullptr; // the pixels are on the device only
                image::image_batch* const made = &own->batch;
                const std::shared_ptr<image::image_batch> hb(std::move(own), made); // owns the items too
                try {
                    co_await conveyor::detail::offload(gpu, [&] { detail::finish_batch(*run, set, filled, on_gpu, host, tensors); });
                } catch (...) {
                    // Copies may be queued: the slab stays until the stream is past them.
                    try {
                        detail::ring_of(*run)->when_done(detail::host_keepalive<image::image_batch>{hb, here});
                    } catch (...) {
                    }
                    throw;
                }
                tensors[0].shape = hb->images.shape;
                tensors[0].bytes = filled * plan->item_bytes;
                tensors[1].shape = hb->labels.shape;
                tensors[1].bytes = filled * sizeof(std::int64_t);
                counters->batches.fetch_add(1, std::memory_order_relaxed);
                // The host batch (its slab feeds the copies) lives until they are done.
                auto batch = detail::device_batch_access<image::image_batch>::make(hb, std::move(tensors), held.hand_over(), set,
                                                                                   detail::host_keepalive<image::image_batch>{hb, here});
                if (!co_await out.send(std::move(batch))) co_return;
            }
        });
}

} // namespace conveyor::cuda

#endif
