// conveyor/image/detail/webp.hpp — decoding a planned WebP (libwebp; its
// demuxer for the first frame of an animation). Without libwebp (CONVEYOR_WITH_WEBP unset)
// a WebP is still told by its bytes and refused with errc::unsupported.
#ifndef CONVEYOR_IMAGE_DETAIL_WEBP_HPP
#define CONVEYOR_IMAGE_DETAIL_WEBP_HPP

#include <conveyor/detail/config.hpp>
#include <conveyor/image/decode.hpp>
#include <conveyor/image/detail/plan.hpp>

#include <cstdint>
#include <span>

namespace conveyor::image::detail {

/** Decodes `b` (a WebP) as `p` says into `dst` (p.out, p.channels). A crop smaller than the
    image is decoded alone (libwebp's cropping, its corner on even pixels and with a margin,
    so that its pixels are those of the whole decode), then resampled. An animation gives
    its first frame on the canvas, as libwebp's WebPAnimDecoder (and so PIL) composes it.
    Alpha is dropped. */
CONVEYOR_DECL void webp_decode(std::span<const std::uint8_t> b, const plan& p, const decode_options& opts, const decode_context& ctx,
                               std::uint8_t* dst);

} // namespace conveyor::image::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/detail/impl/webp.ipp>
#endif

#endif
