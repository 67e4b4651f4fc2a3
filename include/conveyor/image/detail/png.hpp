// conveyor/image/detail/png.hpp — decoding a planned PNG (libspng).
#ifndef CONVEYOR_IMAGE_DETAIL_PNG_HPP
#define CONVEYOR_IMAGE_DETAIL_PNG_HPP

#include <conveyor/detail/config.hpp>
#include <conveyor/image/decode.hpp>
#include <conveyor/image/detail/plan.hpp>

#include <cstdint>
#include <span>

namespace conveyor::image::detail {

/// Decodes `b` (a PNG) as `p` says into `dst` (p.out, p.channels).
CONVEYOR_DECL void png_decode(std::span<const std::uint8_t> b, const plan& p, const decode_options& opts, const decode_context& ctx,
                              std::uint8_t* dst);

} // namespace conveyor::image::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/detail/impl/png.ipp>
#endif

#endif
