// conveyor/image/decode.hpp — JPEG, PNG, WebP and AVIF decoding with crops, DCT scaling, resize and flip.
#ifndef CONVEYOR_IMAGE_DECODE_HPP
#define CONVEYOR_IMAGE_DECODE_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/image/error.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace conveyor::image {

/// The channel order of decoded pixels.
enum class pixel_format {
    rgb,  ///< 3 channels: red, green, blue
    bgr,  ///< 3 channels: blue, green, red (OpenCV's order)
    gray, ///< 1 channel: luma (ITU-R BT.601, as JPEG's Y and PIL's "L")
};

/// Channels per pixel of `f`.
constexpr unsigned channels_of(pixel_format f) noexcept
{
    return f == pixel_format::gray ? 1u : 3u;
}

/** A decoded image: `height * width * channels` bytes of uint8 pixels, rows top to bottom,
    pixels interleaved (HWC), no padding between rows, in a pooled buffer.

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe.
*/
struct decoded_image {
    buffer pixels;                       ///< exactly `size_bytes()` bytes
    std::uint32_t height = 0;
    std::uint32_t width = 0;
    std::uint32_t channels = 0;
    pixel_format format = pixel_format::rgb;

    std::size_t size_bytes() const noexcept { return std::size_t{height} * width * channels; }
    /// The pixels, HWC.
    std::span<const std::uint8_t> data() const noexcept
    {
        return {reinterpret_cast<const std::uint8_t*>(pixels.data()), size_bytes()};
    }
    /// The pixel at row `y`, column `x`, channel `c`.
    std::uint8_t at(std::uint32_t y, std::uint32_t x, std::uint32_t c = 0) const noexcept
    {
        return data()[(std::size_t{y} * width + x) * channels + c];
    }
};

/// A width and a height in pixels.
struct extent {
    std::uint32_t width = 0;
    std::uint32_t height = 0;
    bool empty() const noexcept { return width == 0 || height == 0; }
    friend bool operator==(const extent&, const extent&) = default;
};

/// A rectangle of an image, torchvision's `(i, j, h, w)`: top row, left column, height, width.
struct crop_rect {
    std::int64_t top = 0;
    std::int64_t left = 0;
    std::int64_t height = 0;
    std::int64_t width = 0;
    friend bool operator==(const crop_rect&, const crop_rect&) = default;
};

/// Which part of the image is kept before the resize to the output size.
enum class crop_mode {
    /// The whole image (resized to `size` without keeping its aspect ratio, if a size is given).
    none,
    /// The centred region of the output's aspect ratio, `center_fraction` of the largest
    /// one that fits (0.875 with a square output: torchvision's Resize(256) + CenterCrop(224)).
    center,
    /// torchvision's RandomResizedCrop: a region of random area (`scale` of the image's)
    /// and aspect ratio (log-uniform in `ratio`), 10 tries, then a centred fallback.
    random_resized,
};

/** How a JPEG crop is taken when the crop is smaller than the image (each is measured by
    `conveyor-bench decode`: modes rrc-region, rrc-scaled, rrc-transform). */
enum class jpeg_crop_method {
    /// Decode only the rows and the MCU columns that hold the crop (libjpeg-turbo's
    /// jpeg_skip_scanlines and jpeg_crop_scanline, through its libjpeg API: TurboJPEG 2.1's
    /// own API has no partial decode). Rows above the crop are entropy-decoded only, rows
    /// below it not at all, columns beside it are not transformed or colour-converted.
    decode_region,
    /// Decode the whole image (DCT-scaled), then read the crop from it.
    decode_then_crop,
    /// Cut the MCU-aligned crop out of the compressed data first (TurboJPEG's lossless
    /// crop, `tjTransform` with `TJXOPT_CROP`, as FFCV does), then decode only that.
    transform_then_decode,
};

/// How `decoder` decodes and augments one image.
struct decode_options {
    /// Channel order of the output.
    pixel_format format = pixel_format::rgb;
    /// Output size. {0, 0}: the crop's own size (no resize).
    extent size{};
    /// Which region is kept (before the resize to `size`).
    crop_mode crop = crop_mode::none;
    /// random_resized: range of the crop's area as a fraction of the image's.
    std::array<double, 2> scale{0.08, 1.0};
    /// random_resized: range of the crop's aspect ratio (width / height).
    std::array<double, 2> ratio{3.0 / 4.0, 4.0 / 3.0};
    /// center: fraction of the largest centred region of the output's aspect ratio.
    double center_fraction = 0.875;
    /** Decode JPEGs at the smallest of TurboJPEG's DCT scaling factors (7/8, 3/4, ... 1/8)
        that leaves the crop at least `size` in both dimensions: far less work for large
        photos resized to 224. */
    bool dct_scaling = true;
    /// How JPEG crops are taken (decode_region: the fastest of the three).
    jpeg_crop_method jpeg_crop = jpeg_crop_method::decode_region;
    /// Probability of a horizontal flip.
    double flip = 0.0;
    /// Seed of the random crop and flip; with the epoch and the sample key it fixes them.
    std::uint64_t seed = 0;
    /** Codec warnings (a JPEG's premature end of data, extraneous bytes) are errors
        (true), or the image decodes as the codec recovered it and the warning is counted
        in `decode_stats::warnings` (false). PNG, WebP and AVIF have no warnings: a damaged
        or cut file is an error either way. */
    bool strict = true;
    /** Largest image accepted, in pixels (width x height of the header, before any
        scaling; an animation's canvas), checked before any pixel memory is taken: a
        decompression-bomb guard (for AVIF, libavif's and its AV1 decoder's frame limit too).
        The default is PIL's error threshold (2 x 89,478,485). */
    std::uint64_t max_pixels = 178'956'970;
};

/// Counters a decoder adds to (through `decode_context::stats`).
struct decode_stats {
    std::atomic<std::uint64_t> decoded{0};  ///< images decoded
    std::atomic<std::uint64_t> warnings{0}; ///< codec warnings tolerated (lenient mode)
};

/// Where the bytes being decoded come from: named in errors, and the key and epoch the
/// random crop and flip are drawn from.
struct decode_context {
    std::string_view key;          ///< the sample key (or file key)
    std::string_view origin;       ///< where the image came from: the shard URL or the file's path
    std::uint64_t epoch = 0;       ///< the run's epoch
    decode_stats* stats = nullptr; ///< counters to add to, or null
};

/// The kinds of encoded image the decoder reads.
enum class image_kind {
    jpeg, ///< TurboJPEG (libjpeg-turbo)
    png,  ///< libspng
    webp, ///< libwebp, where the build has it (CONVEYOR_WITH_WEBP)
    avif, ///< libavif, where the build has it (CONVEYOR_WITH_AVIF)
};

/// What an image's header says.
struct image_info {
    image_kind kind = image_kind::jpeg;
    std::uint32_t width = 0;  ///< an animation's canvas
    std::uint32_t height = 0;
    /// Components as stored, alpha included: JPEG 1 or 3; PNG 1 to 4; WebP 3 or 4; AVIF
    /// 1 (4:0:0) or 3, plus 1 with alpha.
    std::uint32_t components = 0;
};

/** The random numbers of one sample: a pure function of (seed, epoch, key, stream), with
    no state shared between samples or threads, so a crop is the same whichever thread
    decodes it and in whatever order. */
class sample_random {
public:
    CONVEYOR_DECL sample_random(std::uint64_t seed, std::uint64_t epoch, std::string_view key, std::uint64_t stream) noexcept;

    /// The next 64 random bits (SplitMix64).
    CONVEYOR_DECL std::uint64_t next() noexcept;
    /// Uniform in [lo, hi).
    CONVEYOR_DECL double uniform(double lo, double hi) noexcept;
    /// Uniform integer in [lo, hi), as torch.randint(lo, hi); `lo` when the range is empty.
    CONVEYOR_DECL std::int64_t integer(std::int64_t lo, std::int64_t hi) noexcept;

private:
    std::uint64_t state_;
};

/** torchvision's `RandomResizedCrop.get_params` for an image of `height` x `width`: up to
    10 tries of a target area uniform in `scale` times the image's and an aspect ratio
    log-uniform in `ratio`, with width and height rounded half to even (Python's round);
    the first that fits is placed uniformly; after 10 misses, a centred crop of the whole
    image clamped to the ratio range. */
CONVEYOR_DECL crop_rect random_resized_crop(std::int64_t height, std::int64_t width, std::array<double, 2> scale,
                                            std::array<double, 2> ratio, sample_random& rng);

/// The crop `opts` takes from an image of `height` x `width` for the sample of `ctx`.
CONVEYOR_DECL crop_rect crop_for(std::int64_t height, std::int64_t width, const decode_options& opts, const decode_context& ctx);

/// Whether `opts` flips the sample of `ctx`.
CONVEYOR_DECL bool flip_for(const decode_options& opts, const decode_context& ctx);

/** Decodes JPEG (TurboJPEG), PNG (libspng), WebP (libwebp) and AVIF (libavif) images, told
    apart by their first bytes, into uint8 HWC pixels: crop, DCT scaling, resize (PIL's
    antialiased bilinear filter, which torchvision's Resize uses) and flip in one call.

    The pixels are PIL's `Image.open(...).convert(mode)`: alpha is dropped (no compositing),
    16-bit PNG samples and 10- or 12-bit AVIF samples come down to 8 bits, an animated WebP
    or an AVIF image sequence gives its first frame (a WebP's on its canvas, as PIL
    composes it). Orientation metadata (EXIF, AVIF's irot and imir) is not applied, as PIL
    does not on open. A WebP crop is decoded alone (libwebp's cropping), its pixels those
    of the whole decode; libwebp's own scaling is not used, since its filter is not PIL's.

    Errors throw `conveyor::error` with an `image::errc` naming `ctx.key` and `ctx.origin`;
    the detail names the codec. A build without libwebp or libavif refuses those formats
    with `errc::unsupported`, saying so.

    @par Thread Safety
    Safe: every thread uses its own TurboJPEG handles and scratch memory (thread_local),
    so one decoder may serve a whole thread pool.
*/
class decoder {
public:
    /// A decoder whose `decode` takes pixel buffers from `pool`.
    explicit decoder(buffer_pool pool = buffer_pool{}) : pool_(std::move(pool)) {}

    /// What the header of `bytes` says; throws as `decode` does for a bad header.
    CONVEYOR_DECL image_info info(std::span<const std::byte> bytes, const decode_context& ctx = {}) const;

    /// The size `decode` will produce from `bytes` with `opts` (`opts.size` when set).
    CONVEYOR_DECL extent output_size(std::span<const std::byte> bytes, const decode_options& opts,
                                     const decode_context& ctx = {}) const;

    /// Decodes `bytes` into a new pooled image.
    CONVEYOR_DECL decoded_image decode(std::span<const std::byte> bytes, const decode_options& opts,
                                       const decode_context& ctx = {}) const;

    /** Decodes `bytes` straight into `out`, which must be exactly
        `opts.size.height * opts.size.width * channels_of(opts.format)` bytes (HWC):
        the path for writing into a batch slab without a second copy. `opts.size` must be
        set. On error `out` holds unspecified bytes. */
    CONVEYOR_DECL void decode_into(std::span<const std::byte> bytes, const decode_options& opts, const decode_context& ctx,
                                   std::span<std::uint8_t> out) const;

    /// The pool `decode` takes from.
    const buffer_pool& pool() const noexcept { return pool_; }

private:
    mutable buffer_pool pool_; // thread-safe; taking from it changes no observable state of the decoder
};

} // namespace conveyor::image

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/impl/augment.ipp>
#include <conveyor/image/impl/decode.ipp>
#endif

#endif
