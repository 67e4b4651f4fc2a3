// conveyor/image/detail/avif.hpp — decoding a planned AVIF (libavif, with
// the AV1 decoder it was built with: dav1d on Debian). Without libavif (CONVEYOR_WITH_AVIF
// unset) an AVIF is still told by its bytes and refused with errc::unsupported.
#ifndef CONVEYOR_IMAGE_DETAIL_AVIF_HPP
#define CONVEYOR_IMAGE_DETAIL_AVIF_HPP

#include <conveyor/detail/config.hpp>
#include <conveyor/image/decode.hpp>
#include <conveyor/image/detail/plan.hpp>

#include <cstdint>
#include <span>

namespace conveyor::image::detail {

/** Decodes `b` (an AVIF) as `p` says into `dst` (p.out, p.channels): the primary item, or
    the first frame of an image sequence; converted to 8-bit RGB by libavif's
    avifImageYUVToRGB with its default settings (what Pillow's AVIF plugin calls), alpha
    dropped. */
CONVEYOR_DECL void avif_decode(std::span<const std::uint8_t> b, const plan& p, const decode_options& opts, const decode_context& ctx,
                               std::uint8_t* dst);

} // namespace conveyor::image::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/detail/impl/avif.ipp>
#endif

#endif
