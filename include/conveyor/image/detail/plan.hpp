// conveyor/image/detail/plan.hpp — what one decode will do, settled from the header and the options
// before any pixel is decoded.
#ifndef CONVEYOR_IMAGE_DETAIL_PLAN_HPP
#define CONVEYOR_IMAGE_DETAIL_PLAN_HPP

#include <conveyor/detail/config.hpp>
#include <conveyor/image/decode.hpp>
#include <conveyor/image/detail/sniff.hpp>

#include <cstddef>
#include <span>

namespace conveyor::image::detail {

/// Everything about one decode that does not depend on the pixels.
struct plan {
    header hdr;
    crop_rect crop;        // in the image's pixels
    extent out;            // output size
    unsigned channels = 3;
    bool flip = false;
    bool resize = false;   // out differs from the crop's size
};

/// Checks `opts`, reads the header of `bytes` and settles the crop, output size and flip.
CONVEYOR_DECL plan make_plan(std::span<const std::byte> bytes, const decode_options& opts, const decode_context& ctx);

} // namespace conveyor::image::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/detail/impl/plan.ipp>
#endif

#endif
