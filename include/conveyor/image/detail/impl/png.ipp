// conveyor/image/detail/impl/png.ipp — definitions for conveyor/image/detail/png.hpp.
#ifndef CONVEYOR_IMAGE_DETAIL_IMPL_PNG_IPP
#define CONVEYOR_IMAGE_DETAIL_IMPL_PNG_IPP

#include <conveyor/image/detail/png.hpp>
#include <conveyor/image/detail/codec_state.hpp>
#include <conveyor/image/detail/resample.hpp>

#include <spng.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>

namespace conveyor::image::detail {

struct spng_deleter {
    void operator()(spng_ctx* c) const noexcept { spng_ctx_free(c); }
};

inline errc classify_spng(int rc) noexcept
{
    switch (rc) {
    case SPNG_IO_EOF:
    case SPNG_EOF:
    case SPNG_EIDAT_TOO_SHORT: return errc::truncated;
    case SPNG_EUSER_WIDTH:
    case SPNG_EUSER_HEIGHT:
    case SPNG_ECHUNK_LIMITS: return errc::too_large;
    case SPNG_EWIDTH:
    case SPNG_EHEIGHT: return errc::corrupt;
    default: return errc::corrupt;
    }
}

CONVEYOR_DECL void png_decode(std::span<const std::uint8_t> b, const plan& p, const decode_options& opts, const decode_context& ctx, std::uint8_t* dst)
{
    std::unique_ptr<spng_ctx, spng_deleter> c(spng_ctx_new(0));
    if (!c) throw image_error(errc::too_large, ctx.key, ctx.origin, "libspng: cannot create a context");
    auto check = [&](int rc, const char* what) {
        if (rc != 0) throw image_error(classify_spng(rc), ctx.key, ctx.origin, std::string("libspng ") + what + ": " + spng_strerror(rc));
    };
    const auto w = p.hdr.info.width, h = p.hdr.info.height;
    check(spng_set_image_limits(c.get(), std::max<std::uint32_t>(w, 1), std::max<std::uint32_t>(h, 1)), "limits");
    // Ancillary chunks (text, ICC profiles, EXIF) are a few kilobytes; a crafted one may
    // declare or inflate to gigabytes. libpng's defaults: 8 MB a chunk; here 16 MiB for
    // all that the decoder keeps. The image data (IDAT) is not held and not limited here.
    check(spng_set_chunk_limits(c.get(), std::size_t{8} << 20, std::size_t{16} << 20), "limits");
    check(spng_set_png_buffer(c.get(), b.data(), b.size()), "input");
    const bool gray_direct = opts.format == pixel_format::gray && p.hdr.png_color_type == 0 && p.hdr.png_bit_depth <= 8;
    const int fmt = gray_direct ? SPNG_FMT_G8 : SPNG_FMT_RGB8;
    const unsigned dc = gray_direct ? 1 : 3;
    std::size_t len = 0;
    check(spng_decoded_image_size(c.get(), fmt, &len), "header");
    if (len != std::size_t{w} * h * dc) throw image_error(errc::corrupt, ctx.key, ctx.origin, "libspng: unexpected decoded size");
    auto& s = thread_state();
    const bool direct = !p.resize && p.crop.width == w && p.crop.height == h && dc == p.channels && opts.format != pixel_format::bgr;
    std::uint8_t* px = direct ? dst : s.pixels.get(len);
    check(spng_decode_image(c.get(), px, len, fmt, 0), "decode");
    // The chunks after the image data, to IEND: a PNG cut after its pixels is still cut.
    check(spng_decode_chunks(c.get()), "trailing chunks");
    if (direct) return;
    // BGR and grey in place (convert_pixels writes each pixel no later than it reads it).
    if (!gray_direct) convert_pixels(px, 3, std::size_t{w} * h, opts.format, px);
    resample(px, w, h, p.channels, {double(p.crop.left), double(p.crop.top), double(p.crop.width), double(p.crop.height)}, dst, p.out, ctx);
    s.pixels.trim();
}

} // namespace conveyor::image::detail

#endif
