// conveyor/image/detail/jpeg.hpp — decoding a planned JPEG: TurboJPEG for whole images and cuts,
// the libjpeg API for decoding only the rows and columns of a crop.
#ifndef CONVEYOR_IMAGE_DETAIL_JPEG_HPP
#define CONVEYOR_IMAGE_DETAIL_JPEG_HPP

#include <conveyor/detail/config.hpp>
#include <conveyor/image/decode.hpp>
#include <conveyor/image/detail/plan.hpp>

#include <turbojpeg.h>

#include <cstdint>
#include <span>

namespace conveyor::image::detail {

/// Decodes `b` (a JPEG) as `p` says into `dst` (p.out, p.channels), by the crop method
/// `opts.jpeg_crop` names.
CONVEYOR_DECL void jpeg_decode(std::span<const std::uint8_t> b, const plan& p, const decode_options& opts, const decode_context& ctx,
                               std::uint8_t* dst);

/// Decodes only the part of `b` that `p`'s crop covers, scaled by `f`, through the libjpeg
/// API (jpeg_crop_scanline, jpeg_skip_scanlines), and resamples it into `dst`.
CONVEYOR_DECL void jpeg_decode_cropped(std::span<const std::uint8_t> b, const plan& p, const decode_options& opts,
                                       const decode_context& ctx, tjscalingfactor f, std::uint8_t* dst);

} // namespace conveyor::image::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/detail/impl/jpeg.ipp>
#include <conveyor/image/detail/impl/jpeg_region.ipp>
#endif

#endif
