// conveyor/image/detail/resample.hpp — the resampler: a region of pixels to the output size, by PIL's
// antialiased bilinear filter; the horizontal flip; and the pixel format conversions.
#ifndef CONVEYOR_IMAGE_DETAIL_RESAMPLE_HPP
#define CONVEYOR_IMAGE_DETAIL_RESAMPLE_HPP

#include <conveyor/detail/config.hpp>
#include <conveyor/image/decode.hpp>

#include <cstddef>
#include <cstdint>

namespace conveyor::image::detail {

/// A region of a decoded (scaled) image, in its pixels, fractional.
struct region {
    double left, top, width, height;
};

/** Copies region `r` of `src` (w x h, c channels) to `dst` (out), resampled; an exact
    whole-pixel region of the output's size is copied as it is. */
CONVEYOR_DECL void resample(const std::uint8_t* src, std::uint32_t w, std::uint32_t h, unsigned c, region r, std::uint8_t* dst,
                            extent out, const decode_context& ctx);

/** Converts `n` pixels of `src`, RGB (`src_channels` 3) or RGBA (4: the alpha is dropped, as
    PIL's convert("RGB") does, with no compositing), to `f` in `dst`: BGR swaps red and blue,
    grey is ITU-R BT.601 luma in 16-bit fixed point, rounded (PIL's "L"). `dst` may be `src`
    (each pixel is read before it is written, and is written no later in memory). */
CONVEYOR_DECL void convert_pixels(const std::uint8_t* src, unsigned src_channels, std::size_t n, pixel_format f, std::uint8_t* dst) noexcept;

/// Mirrors each row of `px` (e, c channels) left to right.
CONVEYOR_DECL void flip_rows(std::uint8_t* px, extent e, unsigned c) noexcept;

} // namespace conveyor::image::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/detail/impl/resample.ipp>
#endif

#endif
