// conveyor/image/encode.hpp — JPEG encoding (TurboJPEG): synthetic datasets, contact sheets, tests.
#ifndef CONVEYOR_IMAGE_ENCODE_HPP
#define CONVEYOR_IMAGE_ENCODE_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/image/decode.hpp>

#include <cstdint>
#include <span>

namespace conveyor::image {

/// Settings of `encode_jpeg`.
struct jpeg_encode_options {
    /// libjpeg quality, 1 (smallest) to 100 (best).
    int quality = 90;
    /// Chroma subsampling 4:2:0 (what cameras and ImageNet's JPEGs mostly use); false: 4:4:4.
    bool subsample = true;
};

/** Encodes `pixels` (HWC uint8 in `format`, `width * height * channels_of(format)` bytes,
    rows without padding) as a baseline JPEG, into a buffer from `pool`. Throws
    `conveyor::error` (`errc::bad_options`) for a size that does not match or a quality out
    of range, and (`errc::corrupt`) naming TurboJPEG's message if it fails.

    @par Thread Safety
    Safe: each thread uses its own TurboJPEG handle. */
CONVEYOR_DECL buffer encode_jpeg(std::span<const std::uint8_t> pixels, std::uint32_t width, std::uint32_t height,
                                 pixel_format format, const jpeg_encode_options& o = {}, buffer_pool pool = buffer_pool{});

} // namespace conveyor::image

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/impl/encode.ipp>
#endif

#endif
