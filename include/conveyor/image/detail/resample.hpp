// conveyor/image/detail/resample.hpp — the resampler: a region of pixels to the output size, by PIL's
// antialiased bilinear filter; and the horizontal flip.
#ifndef CONVEYOR_IMAGE_DETAIL_RESAMPLE_HPP
#define CONVEYOR_IMAGE_DETAIL_RESAMPLE_HPP

#include <conveyor/detail/config.hpp>
#include <conveyor/image/decode.hpp>

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

/// Mirrors each row of `px` (e, c channels) left to right.
CONVEYOR_DECL void flip_rows(std::uint8_t* px, extent e, unsigned c) noexcept;

} // namespace conveyor::image::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/detail/impl/resample.ipp>
#endif

#endif
