// conveyor/image/detail/impl/sniff.ipp — definitions for conveyor/image/detail/sniff.hpp.
#ifndef CONVEYOR_IMAGE_DETAIL_IMPL_SNIFF_IPP
#define CONVEYOR_IMAGE_DETAIL_IMPL_SNIFF_IPP

#include <conveyor/image/detail/sniff.hpp>
#include <conveyor/image/error.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

namespace conveyor::image::detail {

inline bool is_sof(unsigned m) noexcept
{
    return (m >= 0xC0 && m <= 0xCF) && m != 0xC4 && m != 0xC8 && m != 0xCC;
}

/* Walks the JPEG markers to the frame header (SOFn) and reads its size, precision and
   components. TurboJPEG's tjDecompressHeader3 would do, but it refuses sampling factors
   outside its list (4:1:0) that tjDecompress2 decodes well, and reads no MCU size. */
inline header read_jpeg_header(std::span<const std::uint8_t> b, std::string_view key, std::string_view where)
{
    auto fail = [&](errc e, std::string d) { return image_error(e, key, where, "JPEG: " + std::move(d)); };
    std::size_t p = 2;
    for (;;) {
        if (p >= b.size()) throw fail(errc::truncated, "the data end before the frame header (SOF)");
        if (b[p] != 0xFF) throw fail(errc::corrupt, "no marker at byte " + std::to_string(p) + " before the frame header");
        while (p < b.size() && b[p] == 0xFF) ++p; // fill bytes
        if (p >= b.size()) throw fail(errc::truncated, "the data end before the frame header (SOF)");
        const unsigned m = b[p++];
        if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue; // markers without a length
        if (m == 0xD8) throw fail(errc::corrupt, "a second start-of-image marker before the frame header");
        if (m == 0xD9 || m == 0xDA) throw fail(errc::corrupt, "no frame header (SOF) before the image data");
        if (p + 2 > b.size()) throw fail(errc::truncated, "the data end inside a marker");
        const std::size_t len = (std::size_t{b[p]} << 8) | b[p + 1];
        if (len < 2) throw fail(errc::corrupt, "a marker segment of length " + std::to_string(len));
        if (p + len > b.size()) throw fail(errc::truncated, "the data end inside a marker segment");
        if (!is_sof(m)) {
            p += len;
            continue;
        }
        if (len < 8) throw fail(errc::corrupt, "the frame header is too short");
        const unsigned precision = b[p + 2];
        const std::uint32_t height = (std::uint32_t{b[p + 3]} << 8) | b[p + 4];
        const std::uint32_t width = (std::uint32_t{b[p + 5]} << 8) | b[p + 6];
        const unsigned comps = b[p + 7];
        if (m == 0xC3 || m == 0xCB || (m >= 0xC5 && m <= 0xC7) || m >= 0xCD)
            throw fail(errc::unsupported, "lossless or hierarchical JPEG (SOF" + std::to_string(m - 0xC0) + ") is not supported");
        if (precision != 8) throw fail(errc::unsupported, std::to_string(precision) + "-bit samples are not supported (8-bit only)");
        if (comps == 4) throw fail(errc::unsupported, "CMYK/YCCK JPEG (4 components) is not supported");
        if (comps != 1 && comps != 3) throw fail(errc::unsupported, std::to_string(comps) + " colour components are not supported");
        if (len < 8 + 3 * std::size_t{comps}) throw fail(errc::corrupt, "the frame header is too short for its components");
        header h;
        h.info = {image_kind::jpeg, width, height, comps};
        unsigned hmax = 1, vmax = 1;
        for (unsigned c = 0; c < comps; ++c) {
            const unsigned s = b[p + 9 + 3 * c];
            hmax = std::max(hmax, s >> 4);
            vmax = std::max(vmax, s & 15u);
        }
        // A single-component scan has 8x8 MCUs whatever the sampling factor says.
        h.mcu_width = comps == 1 ? 8 : 8 * hmax;
        h.mcu_height = comps == 1 ? 8 : 8 * vmax;
        if (width == 0 || height == 0)
            throw fail(errc::zero_size, "the frame header gives " + std::to_string(width) + "x" + std::to_string(height) + " pixels");
        return h;
    }
}

inline constexpr std::uint8_t png_signature[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};

inline header read_png_header(std::span<const std::uint8_t> b, std::string_view key, std::string_view where)
{
    auto fail = [&](errc e, std::string d) { return image_error(e, key, where, "PNG: " + std::move(d)); };
    if (b.size() < 33) throw fail(errc::truncated, "the data end inside the header (IHDR)");
    if (std::memcmp(b.data() + 12, "IHDR", 4) != 0) throw fail(errc::corrupt, "the first chunk is not IHDR");
    auto be32 = [&](std::size_t at) {
        return (std::uint32_t{b[at]} << 24) | (std::uint32_t{b[at + 1]} << 16) | (std::uint32_t{b[at + 2]} << 8) | b[at + 3];
    };
    header h;
    h.info.kind = image_kind::png;
    h.info.width = be32(16);
    h.info.height = be32(20);
    h.png_bit_depth = b[24];
    h.png_color_type = b[25];
    switch (h.png_color_type) {
    case 0: h.info.components = 1; break;
    case 2: h.info.components = 3; break;
    case 3: h.info.components = 3; break;
    case 4: h.info.components = 2; break;
    case 6: h.info.components = 4; break;
    default: throw fail(errc::corrupt, "colour type " + std::to_string(h.png_color_type) + " does not exist");
    }
    if (h.info.width == 0 || h.info.height == 0)
        throw fail(errc::zero_size, "the header gives " + std::to_string(h.info.width) + "x" + std::to_string(h.info.height) + " pixels");
    return h;
}

CONVEYOR_DECL bool is_webp(std::span<const std::uint8_t> b) noexcept
{
    return b.size() >= 12 && std::memcmp(b.data(), "RIFF", 4) == 0 && std::memcmp(b.data() + 8, "WEBP", 4) == 0;
}

/// The brands of the `ftyp` box `b` starts with (the major one first), up to the end of the
/// box or of `b`, each passed to `f` until it returns true; false when `b` has no `ftyp` box.
template <class F>
bool any_ftyp_brand(std::span<const std::uint8_t> b, F f) noexcept
{
    if (b.size() < 12 || std::memcmp(b.data() + 4, "ftyp", 4) != 0) return false;
    std::uint64_t size = (std::uint64_t{b[0]} << 24) | (std::uint64_t{b[1]} << 16) | (std::uint64_t{b[2]} << 8) | b[3];
    std::size_t at = 8;
    if (size == 1) { // a 64-bit size follows the type
        if (b.size() < 20) return false;
        size = 0;
        for (int i = 8; i < 16; ++i) size = (size << 8) | b[std::size_t(i)];
        at = 16;
    } else if (size == 0) { // the box runs to the end of the file
        size = b.size();
    }
    if (size < at + 8) return false;
    const std::size_t end = static_cast<std::size_t>(std::min<std::uint64_t>(size, b.size()));
    if (at + 4 <= end && f(b.data() + at)) return true; // the major brand; then the minor version
    for (std::size_t p = at + 8; p + 4 <= end; p += 4)
        if (f(b.data() + p)) return true;
    return false;
}

CONVEYOR_DECL bool is_avif(std::span<const std::uint8_t> b) noexcept
{
    return any_ftyp_brand(b, [](const std::uint8_t* brand) {
        return std::memcmp(brand, "avif", 4) == 0 || std::memcmp(brand, "avis", 4) == 0;
    });
}

CONVEYOR_DECL header read_header(std::span<const std::byte> bytes, std::string_view key, std::string_view where)
{
    const std::span<const std::uint8_t> b(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    if (b.empty()) throw image_error(errc::zero_size, key, where, "the input has no bytes");
    if (b.size() >= 2 && b[0] == 0xFF && b[1] == 0xD8) return read_jpeg_header(b, key, where);
    if (b.size() >= 8 && std::memcmp(b.data(), png_signature, 8) == 0) return read_png_header(b, key, where);
    if (is_webp(b)) return read_webp_header(b, key, where);
    if (is_avif(b)) return read_avif_header(b, key, where);
    if (b.size() < 8 && std::memcmp(b.data(), png_signature, b.size()) == 0)
        throw image_error(errc::truncated, key, where, "PNG: the data end inside the signature");
    if (b.size() < 12 && std::memcmp(b.data(), "RIFF", std::min<std::size_t>(b.size(), 4)) == 0)
        throw image_error(errc::truncated, key, where, "WebP: the data end inside the RIFF header");
    if (b.size() > 4 && b.size() < 16 && std::memcmp(b.data() + 4, "ftyp", std::min<std::size_t>(b.size() - 4, 4)) == 0)
        throw image_error(errc::truncated, key, where, "AVIF: the data end inside the file type box (ftyp)");
    std::string brand;
    any_ftyp_brand(b, [&](const std::uint8_t* p) {
        brand.assign(reinterpret_cast<const char*>(p), 4); // conveyor::error escapes what is not printable
        return true;
    });
    if (!brand.empty())
        throw image_error(errc::not_an_image, key, where,
                          "an ISO-BMFF file of brand '" + brand + "' with neither 'avif' nor 'avis' among its brands (not an AVIF)");
    throw image_error(errc::not_an_image, key, where,
                      "the first bytes are those of none of JPEG (FF D8), PNG, WebP (RIFF....WEBP) and AVIF (an ftyp box of brand "
                      "avif or avis) (" + std::to_string(b.size()) + " bytes in all)");
}

} // namespace conveyor::image::detail

#endif
