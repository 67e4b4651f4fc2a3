// conveyor/image/batch.hpp — batches of decoded images in pooled slabs: the decode_batches
// stage, the slab pool it takes memory from, and the tensors a batch exposes.
#ifndef CONVEYOR_IMAGE_BATCH_HPP
#define CONVEYOR_IMAGE_BATCH_HPP

#include <conveyor/core/pipeline.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/image/columns.hpp>
#include <conveyor/image/decode.hpp>
#include <conveyor/image/dtype.hpp>
#include <conveyor/image/stage.hpp>
#include <conveyor/shard/sample.hpp>

#include <boost/asio/awaitable.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace conveyor::image {

// ---- tensors --------------------------------------------------------------------------

/// How the four dimensions of an image batch are ordered.
enum class tensor_layout {
    nhwc, ///< batch, height, width, channels: pixels interleaved, as decoded
    nchw, ///< batch, channels, height, width: one plane per channel, as PyTorch models take
};

/** A view of a dense tensor: where its elements are, their type, the shape and the strides
    (in elements, as DLPack and PyTorch count them). Owns nothing: the batch it came from
    keeps the memory alive. */
struct tensor {
    void* data = nullptr;
    image::dtype type = dtype::uint8;
    std::vector<std::int64_t> shape;
    std::vector<std::int64_t> strides;

    /// Elements in the tensor.
    std::size_t elements() const noexcept
    {
        std::size_t n = 1;
        for (auto d : shape) n *= static_cast<std::size_t>(d);
        return n;
    }
    /// Bytes the elements take (the tensors here are contiguous).
    std::size_t bytes() const noexcept { return elements() * size_of(type); }
};

/** The binary16 value nearest to `f` (round to nearest, ties to even), as its bits:
    subnormal halves for tiny values, infinity beyond 65504 (beyond 65520, precisely, where
    rounding would carry out of the largest finite half), NaN kept NaN (quiet). */
CONVEYOR_DECL std::uint16_t float_to_half(float f) noexcept;

/// The float a binary16 value (its bits) stands for; exact.
CONVEYOR_DECL float half_to_float(std::uint16_t h) noexcept;

// ---- slabs ----------------------------------------------------------------------------

/// What kind of memory a slab allocator hands out (DLPack reports it; see `to_dlpack`).
enum class memory_kind {
    host,      ///< ordinary (pageable) host memory
    cuda_host, ///< page-locked host memory registered with CUDA (cudaHostAlloc)
};

/** Where slab memory comes from: a pair of functions, so that other modules can supply
    memory this one knows nothing of (the CUDA module: pinned memory from
    `cudaHostAlloc`, for copies to the GPU at the link's full rate).

    `allocate(bytes)` returns memory aligned to at least 256 bytes (DLPack's alignment),
    or throws; `deallocate(p, bytes)` frees it and must not throw. Both may be called from
    any thread. An allocator whose functions are empty is `host_slab_allocator()`. */
struct slab_allocator {
    std::function<void*(std::size_t)> allocate;
    std::function<void(void*, std::size_t)> deallocate;
    memory_kind kind = memory_kind::host;
};

/// Page-aligned host memory (large slabs in transparent huge pages), as the runtime's
/// buffers are made.
CONVEYOR_DECL slab_allocator host_slab_allocator();

namespace detail {
struct slab_pool_state;
struct slab_block;
} // namespace detail

/** One slab: a block of `size()` bytes taken from a `slab_pool`. Copies share it; the
    memory goes back to the pool (not to the system) when the last copy is dropped,
    on whatever thread.

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe (copies of one slab: safe).
*/
class slab {
public:
    slab() noexcept = default;

    CONVEYOR_DECL std::byte* data() const noexcept;
    CONVEYOR_DECL std::size_t size() const noexcept;
    CONVEYOR_DECL memory_kind kind() const noexcept;
    explicit operator bool() const noexcept { return block_ != nullptr; }

    /// The slab's shared ownership, for holders that know nothing of slabs (a DLPack
    /// deleter): the memory stays out of the pool while any of these lives.
    std::shared_ptr<const void> owner() const noexcept { return block_; }

    /** Takes this slab (all its copies) out of its pool's bound: the pool may hand out
        another in its place at once, while this one's memory lives on with its holders;
        when the last goes, the memory is kept for reuse if the pool has room for it, else
        freed. For batches handed to a consumer that may keep many (a Python loop keeping
        them in a list): the bound then counts the slabs inside the pipeline only, and the
        consumer's memory is its own. Idempotent. */
    CONVEYOR_DECL void detach() const noexcept;

private:
    friend class slab_pool;
    explicit slab(std::shared_ptr<detail::slab_block> b) noexcept : block_(std::move(b)) {}
    std::shared_ptr<detail::slab_block> block_;
};

/// A slab pool's counters at one moment.
struct slab_pool_stats {
    std::size_t slab_bytes = 0; ///< size of each slab
    std::size_t max_slabs = 0;  ///< the bound
    std::size_t allocated = 0;  ///< slabs allocated now (more than `max_slabs` only while detached ones live)
    std::size_t in_use = 0;     ///< slabs held now and counted against the bound (not detached)
    std::size_t peak = 0;       ///< the most held at once
    std::uint64_t acquires = 0; ///< slabs handed out
    std::uint64_t waits = 0;    ///< acquires that had to wait for a slab to come back
};

/** A bounded pool of fixed-size slabs, one batch each: slabs are allocated on first need,
    reused when their batch is dropped, and never more than `max_slabs` exist, so a slow
    consumer holds the producer back (it waits for a slab) instead of memory growing.

    Waiting is a coroutine suspension, never a blocked thread; the run's cancellation
    ends it. Copies of a pool share it; the memory is freed when the pool and every slab
    from it are gone.

    @par Thread Safety
    Safe: acquire and release from any thread.
*/
class slab_pool {
public:
    /// A pool of at most `max_slabs` slabs (at least 1) of `slab_bytes` each, from `alloc`.
    CONVEYOR_DECL slab_pool(std::size_t slab_bytes, std::size_t max_slabs, slab_allocator alloc = {});

    /** Waits until a slab is free (or may be allocated) and takes it.
        @par Completion Signature
        `slab`; throws `conveyor::error` (`errc::cancelled`) if the wait is cancelled. */
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<slab> async_acquire();

    /// A slab now if one is free or may be allocated; nullopt otherwise.
    CONVEYOR_DECL std::optional<slab> try_acquire();

    CONVEYOR_DECL std::size_t slab_bytes() const noexcept;
    CONVEYOR_DECL memory_kind kind() const noexcept;
    CONVEYOR_DECL slab_pool_stats stats() const;

private:
    std::shared_ptr<detail::slab_pool_state> state_;
};

// ---- batches --------------------------------------------------------------------------

/** N images collated into one contiguous tensor, with their labels, keys and other fields:
    what `decode_batches` hands on. Both tensors live in one slab from the stage's pool (the
    labels after the images), which goes back to the pool when the last copy of the slab
    (or an exported DLPack tensor) is dropped; the columns of the other fields
    (`decode_image_options::extra_fields`) hold memory of their own.

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe.
*/
struct image_batch {
    /// The images: shape {n, h, w, c} (nhwc) or {n, c, h, w} (nchw), contiguous.
    tensor images;
    /// The labels: int64, shape {n}; -1 where an item has none.
    tensor labels;
    /// The items' keys (sample or file keys), in batch order.
    std::vector<std::string> keys;
    /** Each item's place, in batch order, for resume (`conveyor::progress::consumed`): a
        shard sample's place in the epoch; a file or S3 object is its whole unit (`whole`),
        at its work position (`work`), with its position in the source's list (`shard`). */
    std::vector<conveyor::sample_id> ids;
    /// How `images` is laid out.
    tensor_layout layout = tensor_layout::nhwc;
    /// The memory both tensors live in.
    image::slab slab;
    /// The position of this batch in the run (0, 1, 2, ...).
    std::uint64_t index = 0;
    /// One column per `decode_image_options::extra_fields` entry, in that order, named as
    /// it is there (see `batch_column` for which values stack); empty when none is asked.
    std::vector<batch_column> columns;

    /// Images in the batch (`collate_options::size`, or fewer in a last, partial batch).
    std::size_t size() const noexcept { return keys.size(); }
    /// The column called `name` (as `extra_fields` names it), or null.
    const batch_column* column(std::string_view name) const noexcept
    {
        for (const auto& c : columns)
            if (c.name == name) return &c;
        return nullptr;
    }
};

/// The per-channel mean and standard deviation of ImageNet's RGB pixels (in [0, 1]), as
/// torchvision's models expect them normalized.
inline constexpr std::array<float, 3> imagenet_mean{0.485f, 0.456f, 0.406f};
inline constexpr std::array<float, 3> imagenet_std{0.229f, 0.224f, 0.225f};

/** How `decode_batches` collates decoded images into batch tensors (the CUDA module's
    `cuda::decode_batches` too). Not `conveyor::batch_options`, the core `batch(n)` stage's,
    which groups any items into vectors: these batches are tensors in pooled slabs. */
struct collate_options {
    /// Images per batch.
    std::size_t size = 64;
    /// nhwc (as decoded) or nchw (planes).
    tensor_layout layout = tensor_layout::nhwc;
    /// uint8 (pixels as decoded), float32 or float16 (normalized, see `mean` and `std`).
    dtype type = dtype::uint8;
    /** Float types: each channel c becomes `(x / 255 - mean[c]) / std[c]`, torchvision's
        `Normalize(mean, std)` after `ToTensor()`, computed in float as they do (a
        table per channel), then rounded to half for float16. A grey image uses entry 0.
        uint8 batches are not normalized. */
    std::array<float, 3> mean{0.0f, 0.0f, 0.0f};
    std::array<float, 3> std{1.0f, 1.0f, 1.0f};
    /// Deliver a last batch of fewer than `size` images (true) or drop it (false).
    bool partial = true;
    /** Batches waiting between this stage and the next. Fewer than the core `batch`
        stage's 4: each waiting batch holds a slab (a whole batch tensor, megabytes), and
        the slabs bound the stage's memory (see `slabs`). */
    std::size_t capacity = 2;
    /** At most this many slabs exist at once (batches being filled, waiting, held by the
        consumer): when all are out the stage waits for one to come back. 0: `capacity`
        + 4 (two being filled, two held by the consumer). Ignored when `pool` is given. */
    std::size_t slabs = 0;
    /// Where slab memory comes from (empty: `host_slab_allocator()`). Ignored when `pool` is given.
    slab_allocator allocator;
    /** A pool to take slabs from instead of the stage's own (to share one between stages
        or see its counters); its slabs must hold a batch (`batch_slab_bytes`). */
    std::shared_ptr<slab_pool> pool;
};

/// The bytes one slab needs for batches made with `d` and `b`: the images, then the labels
/// (at a 256-byte boundary).
CONVEYOR_DECL std::size_t batch_slab_bytes(const decode_options& d, const collate_options& b);

namespace detail {

/// What the stage computes once from its options: sizes, offsets and conversion tables.
struct batch_plan {
    std::uint32_t height = 0, width = 0, channels = 0;
    std::size_t item_bytes = 0;    // one image in the batch tensor
    std::size_t labels_offset = 0; // where the labels start in the slab
    std::size_t slab_bytes = 0;
    std::array<std::array<float, 256>, 3> to_float{};          // float32: value of each byte per channel
    std::array<std::array<std::uint16_t, 256>, 3> to_half{};   // float16: the same, rounded to half
};

CONVEYOR_DECL batch_plan make_batch_plan(const decode_options& d, const collate_options& b);

/** The batch of the first `count` images of `slab` (laid out as `plan` says: images, then
    labels at `plan.labels_offset`), with their `keys` (resized to `count`) and its
    position `index`: the tensors' shapes, strides and types as `o` asks. */
CONVEYOR_DECL image_batch batch_over_slab(image::slab slab, std::vector<std::string> keys, std::size_t count, std::uint64_t index,
                                          const collate_options& o, const batch_plan& plan);

/** Decodes `e` into `slot` (one image of the batch tensor): straight there with
    `decode_into` for uint8 nhwc, else into a per-thread scratch and converted from it. */
CONVEYOR_DECL void decode_into_slot(const decoder& dec, const decode_options& d, const collate_options& b,
                                    const batch_plan& plan, const encoded_image& e, std::uint64_t epoch,
                                    decode_stats* stats, std::byte* slot);

/// Converts one HWC uint8 image into `slot` as `b` asks (layout and type).
CONVEYOR_DECL void convert_image(const std::uint8_t* hwc, const collate_options& b, const batch_plan& plan, std::byte* slot);

} // namespace detail

/** The `decode_batches` stage; see `conveyor::image::decode_batches`.

    @par Thread Safety
    Distinct objects: safe. Shared objects: safe (immutable once built; the pool and the
    counters are thread-safe).
*/
class decode_batches_stage {
public:
    CONVEYOR_DECL decode_batches_stage(decode_image_options d, collate_options b);

    template <class T>
        requires(std::is_same_v<T, shard::sample> || std::is_same_v<T, blob>)
    stream<image_batch> operator()(const std::shared_ptr<run_context>& ctx, stream<T> in) const;

    /// The pool the stage takes slabs from (shared by all its runs).
    const std::shared_ptr<slab_pool>& pool() const noexcept { return pool_; }
    /// The decode counters (images decoded, warnings tolerated).
    const std::shared_ptr<decode_stats>& stats() const noexcept { return d_->stats; }
    const decode_image_options& decode() const noexcept { return *d_; }
    const collate_options& batch() const noexcept { return *b_; }

private:
    std::shared_ptr<const decode_image_options> d_;
    std::shared_ptr<const collate_options> b_;
    std::shared_ptr<const detail::batch_plan> plan_;
    std::shared_ptr<slab_pool> pool_;
};

/** Decodes images straight into batches: a stage on shard samples or file blobs (the
    image and label picked as `decode_image` picks them) giving `image_batch`es of
    `b.size` images of `d.decode.size` (which must be set: batches hold images of one size).

    Each image is decoded on the runtime's compute pool into its own place in the batch's
    slab: for uint8 nhwc with `decoder::decode_into` itself, with no copy after it; for the
    other layouts and types into a per-thread scratch image, then converted (normalized,
    transposed) into its place. Up to `d.concurrency` images (0: twice the compute threads)
    decode at once, across batch boundaries; batches come out in input order, the images
    of a batch in input order.

    Slabs come from a bounded pool (`b.slabs`, or `b.pool`): when none is free the stage
    waits, without holding a thread, until the consumer drops a batch.

    Other fields of each item (`d.extra_fields`: a caption, a JSON document, a class, an
    array) are decoded by the field decoders (`decode_field`, with `d.extra_decode`) on the
    same compute task as its image, kept with its slot, and made the batch's `columns` on
    the compute pool as the batch is handed on. An item without one of them is an error
    like a bad image (`errc::missing_field`, naming the fields it has), failed or skipped
    by `d.errors`.

    A bad image fails the run (`d.errors = on_error::fail`: the error names its key and
    path or shard), or is skipped (`on_error::skip`): counted in the run's stats, logged,
    and its place taken by the next good image, so batches stay full and the images keep
    their input order. Batches come out in input order; `b.capacity` of them wait for the
    consumer.

    @code
    auto pipe = conveyor::file::files(conveyor::file::walk("/data/train", {.labels = true}))
              | conveyor::image::decode_batches({.decode = {.size = {224, 224}, .crop = conveyor::image::crop_mode::center}},
                                                {.size = 256, .layout = conveyor::image::tensor_layout::nchw,
                                                 .type = conveyor::image::dtype::float32,
                                                 .mean = conveyor::image::imagenet_mean, .std = conveyor::image::imagenet_std});
    for (auto& b : pipe) train_step(b.images, b.labels);
    @endcode
*/
inline decode_batches_stage decode_batches(decode_image_options d, collate_options b = {})
{
    return decode_batches_stage(std::move(d), std::move(b));
}

} // namespace conveyor::image

#include <conveyor/image/impl/batch.hpp>

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/impl/batch.ipp>
#endif

#endif
