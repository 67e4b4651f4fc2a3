// conveyor/image/detail/sniff.hpp — JPEG, PNG, WebP or AVIF by the first bytes, and what the
// decoder needs of their headers without decoding.
#ifndef CONVEYOR_IMAGE_DETAIL_SNIFF_HPP
#define CONVEYOR_IMAGE_DETAIL_SNIFF_HPP

#include <conveyor/detail/config.hpp>
#include <conveyor/image/decode.hpp>

#include <cstddef>
#include <cstdint>
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
    bool animated = false;   ///< WebP: an animation; AVIF: an image sequence (the first frame is decoded)
};

/// `b` starts as a WebP file does: "RIFF", a size, "WEBP".
CONVEYOR_DECL bool is_webp(std::span<const std::uint8_t> b) noexcept;
/// `b` starts with an ISO-BMFF `ftyp` box whose major or compatible brands hold `avif` or
/// `avis` (an AVIF image or image sequence). A box cut short is judged on what it holds.
CONVEYOR_DECL bool is_avif(std::span<const std::uint8_t> b) noexcept;

/// The header of `b` (a WebP: `is_webp(b)`), as libwebp's WebPGetFeatures reads it; throws
/// an `image::errc` error naming `key` and `where` for a bad header. Defined in
/// impl/webp.ipp (with the WebP decoder, detail/webp.hpp).
CONVEYOR_DECL header read_webp_header(std::span<const std::uint8_t> b, std::string_view key, std::string_view where);
/// The header of `b` (an AVIF: `is_avif(b)`), as libavif's avifDecoderParse reads its
/// boxes (no AV1 data is decoded); throws an `image::errc` error naming `key` and `where`.
/// Defined in impl/avif.ipp (with the AVIF decoder, detail/avif.hpp).
CONVEYOR_DECL header read_avif_header(std::span<const std::uint8_t> b, std::string_view key, std::string_view where);

/// The header of `bytes`, a JPEG, PNG, WebP or AVIF told apart by their first bytes (never
/// by a name); throws an `image::errc` error naming `key` and `where` for anything else or
/// a bad header, and `errc::unsupported` for a WebP or AVIF when this build lacks the codec.
CONVEYOR_DECL header read_header(std::span<const std::byte> bytes, std::string_view key, std::string_view where);

} // namespace conveyor::image::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/detail/impl/sniff.ipp>
#endif

#endif
