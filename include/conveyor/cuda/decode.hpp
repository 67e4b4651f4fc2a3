// conveyor/cuda/decode.hpp — the GPU decode stage: shard samples or file blobs straight to
// device batches, JPEGs decoded by nvJPEG (the hardware engines where the GPU has them)
// and by the CPU decoders at once, shared from their measured rates.
#ifndef CONVEYOR_CUDA_DECODE_HPP
#define CONVEYOR_CUDA_DECODE_HPP

#include <conveyor/core/pipeline.hpp>
#include <conveyor/cuda/batch.hpp>
#include <conveyor/cuda/staging.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/image/batch.hpp>
#include <conveyor/image/split.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

namespace conveyor::cuda {

/// Settings of the GPU side of `cuda::decode_batches`.
struct gpu_decode_options {
    /// The CUDA device the batches are made on.
    int device = 0;
    /// The stream the decoding and copies go on; null: the stage makes a non-blocking one.
    CUstream_st* stream = nullptr;
    /// Device batches being made plus those the consumer holds (as `to_cuda`'s `ring`).
    std::size_t ring = 3;
    /// Device batches waiting for the consumer.
    std::size_t capacity = 1;
    /// Use the GPU's hardware JPEG engines (A100, H100, H200) where it has them; else, and
    /// for what they refuse, nvJPEG's hybrid decoders.
    bool hardware = true;
    /** Share of the JPEGs the GPU could decode that go to the CPU decoders instead. Negative
        (the default): measured, batch by batch, so that both sides finish together (see
        `image::decode_split`). 0: the GPU decodes all it can; 1: the CPU decodes all (what
        the GPU would do is then measured by nobody). PNGs, and JPEGs nvJPEG refuses,
        always go to the CPU. */
    double cpu_share = -1;
    /// Size hint for the engines' buffers, allocated when the run starts.
    std::uint32_t preallocate_width = 640, preallocate_height = 480;
};

/// What a GPU decode stage has done so far (all its runs).
struct gpu_decode_stats {
    std::uint64_t batches = 0;          ///< device batches handed on
    std::uint64_t hardware = 0;         ///< images decoded by the hardware engines
    std::uint64_t hybrid = 0;           ///< images decoded by nvJPEG's hybrid decoders
    std::uint64_t cpu = 0;              ///< images decoded on the CPU (shared out, PNGs, refused)
    std::uint64_t refused = 0;          ///< of those, JPEGs the GPU was given and refused
    std::uint64_t skipped = 0;          ///< bad images skipped (`on_error::skip`)
    double gpu_seconds = 0;             ///< wall time of the GPU's parts of the batches
    double cpu_thread_seconds = 0;      ///< thread time of the CPU decodes
    image::split_stats split;           ///< the rates measured and the last share
    std::string decoder;                ///< "nvJPEG 13.0.0, hardware (7 engines x 1 core)", or why the CPU does it all
};

namespace detail {

/// The counters a stage and its runs share.
struct gpu_decode_counters {
    std::atomic<std::uint64_t> batches{0}, hardware{0}, hybrid{0}, cpu{0}, refused{0}, skipped{0};
    std::atomic<std::uint64_t> gpu_ns{0}, cpu_ns{0};
    mutable std::mutex mu;
    image::split_stats split;
    std::string decoder;
};

/// What a run's input delivered, and the time spent waiting for it (the split's input rate).
struct input_meter {
    std::atomic<std::uint64_t> items{0}, wait_ns{0};
    void waited(std::chrono::steady_clock::duration d, std::size_t got) noexcept
    {
        wait_ns.fetch_add(static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()),
                          std::memory_order_relaxed);
        items.fetch_add(got, std::memory_order_relaxed);
    }
};

/// An item as the run decodes it: its encoded image (pointing into its owner, the item), or
/// why it has none (`error`: `image::encoded_image_of` threw).
struct gpu_item {
    image::encoded_image image;
    std::string key;
    conveyor::sample_id id;
    std::exception_ptr error;
};

/// Items taken together from the input, and what owns their bytes (the items themselves).
struct gpu_items {
    std::vector<gpu_item> items;
    std::shared_ptr<const void> owner;
};

/// The stage's nvJPEG decoder, kept between its runs (setting one up takes a second).
class gpu_decoder_cache;
/// A run of the stage: the loop that makes its batches (cuda/impl/decode.ipp).
class gpu_batches;

/// The counters as they are now.
CONVEYOR_DECL gpu_decode_stats snapshot(const gpu_decode_counters& c);

} // namespace detail

/** The GPU decode stage; see `conveyor::cuda::decode_batches`.

    @par Thread Safety
    Distinct objects: safe. Shared objects: safe (immutable once built; counters atomic).
*/
class decode_batches_stage {
public:
    CONVEYOR_DECL decode_batches_stage(image::decode_image_options d, image::collate_options b, gpu_decode_options g);

    template <class T>
        requires(std::is_same_v<T, shard::sample> || std::is_same_v<T, blob>)
    stream<device_batch<image::image_batch>> operator()(const std::shared_ptr<run_context>& ctx, stream<T> in) const;

    /// What the stage has done so far: decoders' shares and rates, images per decoder.
    gpu_decode_stats stats() const { return detail::snapshot(*counters_); }
    /// The CPU decoders' counters (images decoded, warnings tolerated).
    const std::shared_ptr<image::decode_stats>& decode_stats() const noexcept { return d_->stats; }

private:
    friend class detail::gpu_batches;
    /// The run's batches, made from the items `ahead` brings (the stage's input, taken by
    /// `detail::take_gpu_items`).
    CONVEYOR_DECL stream<device_batch<image::image_batch>> batches(const std::shared_ptr<run_context>& ctx,
                                                                   std::shared_ptr<conveyor::detail::channel<detail::gpu_items>> ahead,
                                                                   std::shared_ptr<const detail::input_meter> input) const;

    std::shared_ptr<const image::decode_image_options> d_;
    std::shared_ptr<const image::collate_options> b_;
    std::shared_ptr<const gpu_decode_options> g_;
    std::shared_ptr<const image::detail::batch_plan> plan_;
    std::shared_ptr<detail::gpu_decode_counters> counters_;
    std::shared_ptr<detail::gpu_decoder_cache> cache_;
    std::shared_ptr<image::slab_pool> pool_; // pinned slabs (labels, CPU-decoded images), kept between runs
};

/** Decodes images straight into device batches: a stage on shard samples or file blobs
    (image and label picked as `image::decode_image` picks them) giving the same
    `device_batch<image_batch>`es as `image::decode_batches(d, b) | cuda::to_cuda()`, with
    the same crops, flips, layout, type and normalization, but with the JPEGs decoded on
    the GPU by nvJPEG and only their compressed bytes crossing the bus.

    Each batch's JPEGs are shared between the GPU (the hardware engines where the GPU has
    them, in one batched call with a region of interest per image, so only the crop is
    decoded; nvJPEG's hybrid decoders for what the engines refuse) and the CPU decoders of
    the runtime's compute pool, in the proportion that makes both finish together, from
    rates measured as the run goes (`g.cpu_share` fixes it instead). The crops are
    resampled on the GPU with the CPU path's filter into their slots. PNGs and JPEGs that
    nvJPEG cannot read go to the CPU, which decodes them or names what is wrong.

    The host batch (`host()`) has the labels, keys and index; its `images` tensor has the
    shape but no data (`data` is null): the pixels are on the device only.

    A bad image fails the run or is skipped and counted (`d.errors`), its place taken by
    the next good image, so batches stay full and in input order. Without nvJPEG (or on a
    build without the CUDA compiler's kernels), the run says so once in its log and the
    CPU decodes everything; without a usable device it fails at once with `errc::no_device`.

    @code
    auto pipe = conveyor::shard::shards(list).on(rt)
              | conveyor::cuda::decode_batches({.decode = {.size = {224, 224},
                                                           .crop = conveyor::image::crop_mode::random_resized,
                                                           .flip = 0.5, .seed = 7}},
                                               {.size = 256, .layout = conveyor::image::tensor_layout::nchw,
                                                .type = conveyor::image::dtype::float16,
                                                .mean = conveyor::image::imagenet_mean, .std = conveyor::image::imagenet_std},
                                               {.device = 0});
    for (auto& b : pipe) {
        cudaStreamWaitEvent(my_stream, b.ready(), 0);
        train_step(b.tensors()[0], b.tensors()[1], my_stream);
        b.done_on(my_stream);
    }
    @endcode */
inline decode_batches_stage decode_batches(image::decode_image_options d, image::collate_options b, gpu_decode_options g = {})
{
    return decode_batches_stage(std::move(d), std::move(b), g);
}

} // namespace conveyor::cuda

#include <conveyor/cuda/impl/decode.hpp>

#if CONVEYOR_HEADER_ONLY
#include <conveyor/cuda/impl/decode.ipp>
#endif

#endif
