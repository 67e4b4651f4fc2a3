// conveyor/image/detail/sniff.hpp — JPEG or PNG by the first bytes, and what the decoder
// needs of their headers without decoding.
#ifndef CONVEYOR_IMAGE_DETAIL_SNIFF_HPP
#define CONVEYOR_IMAGE_DETAIL_SNIFF_HPP

#include <conveyor/detail/config.hpp>
#include <conveyor/image/decode.hpp>

#include <cstddef>
#include <span>
#include <string_view>

namespace conveyor::image::detail {

/// What the decoder needs from a header, beyond image_info.
struct header {
    image_info info;
    unsigned mcu_width = 8;  ///< JPEG: the MCU's size in pixels (8 x the largest sampling factor)
    unsigned mcu_height = 8;
    unsigned png_color_type = 0;
    unsigned png_bit_depth = 8;
};

/// The header of `bytes`, a JPEG or a PNG told apart by their first bytes; throws an
/// `image::errc` error naming `key` and `where` for anything else or a bad header.
CONVEYOR_DECL header read_header(std::span<const std::byte> bytes, std::string_view key, std::string_view where);

} // namespace conveyor::image::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/detail/impl/sniff.ipp>
#endif

#endif
