// conveyor/image/detail/impl/avif.ipp — definitions for conveyor/image/detail/avif.hpp.
#ifndef CONVEYOR_IMAGE_DETAIL_IMPL_AVIF_IPP
#define CONVEYOR_IMAGE_DETAIL_IMPL_AVIF_IPP

#include <conveyor/image/detail/avif.hpp>
#include <conveyor/image/error.hpp>

#if CONVEYOR_WITH_AVIF
#include <conveyor/image/detail/codec_state.hpp>
#include <conveyor/image/detail/resample.hpp>

#include <avif/avif.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#endif

#include <string>

namespace conveyor::image::detail {

#if CONVEYOR_WITH_AVIF

/// Whether a top-level box of `b` (ISO-BMFF: a 32-bit size, the type; size 1: a 64-bit size
/// follows; 0: to the end) claims more bytes than `b` holds: the file was cut.
inline bool bmff_cut(std::span<const std::uint8_t> b) noexcept
{
    std::uint64_t at = 0;
    while (at < b.size()) {
        if (b.size() - at < 8) return true;
        const std::uint8_t* p = b.data() + at;
        std::uint64_t size = (std::uint64_t{p[0]} << 24) | (std::uint64_t{p[1]} << 16) | (std::uint64_t{p[2]} << 8) | p[3];
        if (size == 0) return false;
        if (size == 1) {
            if (b.size() - at < 16) return true;
            size = 0;
            for (int i = 8; i < 16; ++i) size = (size << 8) | p[i];
            if (size < 16) return false; // malformed, not cut
        } else if (size < 8) {
            return false;
        }
        if (size > b.size() - at) return true;
        at += size;
    }
    return false;
}

inline errc classify_avif(avifResult r, std::string_view diag, std::span<const std::uint8_t> b) noexcept
{
    switch (r) {
    case AVIF_RESULT_TRUNCATED_DATA: return errc::truncated;
    case AVIF_RESULT_NOT_IMPLEMENTED:
    case AVIF_RESULT_NO_CODEC_AVAILABLE:
    case AVIF_RESULT_UNSUPPORTED_DEPTH: return errc::unsupported;
    case AVIF_RESULT_OUT_OF_MEMORY: return errc::too_large;
    default: break;
    }
    // libavif says what was wrong with a box only in its diagnostics.
    if (diag.find("too large") != std::string_view::npos && diag.find("dimensions") != std::string_view::npos) return errc::too_large;
    if (diag.find("invalid size") != std::string_view::npos) return errc::zero_size;
    return bmff_cut(b) ? errc::truncated : errc::corrupt;
}

struct avif_decoder_deleter {
    void operator()(avifDecoder* d) const noexcept { avifDecoderDestroy(d); }
};
using avif_decoder_ptr = std::unique_ptr<avifDecoder, avif_decoder_deleter>;

inline void check_avif(avifResult r, const avifDecoder* d, std::span<const std::uint8_t> b, std::string_view key, std::string_view where,
                       const char* what)
{
    if (r == AVIF_RESULT_OK) return;
    const std::string_view diag = d ? std::string_view(d->diag.error) : std::string_view();
    std::string detail = std::string("libavif ") + what + ": " + avifResultToString(r);
    if (!diag.empty()) detail += " (" + std::string(diag) + ")";
    throw image_error(classify_avif(r, diag, b), key, where, std::move(detail));
}

/* A decoder over `b` with its boxes parsed (no AV1 data decoded yet). The settings are
   Pillow's: one thread (the caller's pool runs many decodes at once), and the strict checks
   on a clean aperture and on the pixel information property off, as browsers and Pillow
   read files that older encoders wrote. `pixel_limit` is libavif's (and dav1d's) largest
   frame, at most its default. */
inline avif_decoder_ptr avif_parse(std::span<const std::uint8_t> b, std::string_view key, std::string_view where, std::uint64_t pixel_limit)
{
    avif_decoder_ptr d(avifDecoderCreate());
    if (!d) throw image_error(errc::too_large, key, where, "libavif: cannot create a decoder");
    d->maxThreads = 1;
    d->strictFlags &= ~static_cast<avifStrictFlags>(AVIF_STRICT_CLAP_VALID | AVIF_STRICT_PIXI_REQUIRED);
    d->ignoreExif = AVIF_TRUE;
    d->ignoreXMP = AVIF_TRUE;
    d->imageSizeLimit = static_cast<std::uint32_t>(std::clamp<std::uint64_t>(pixel_limit, 1, AVIF_DEFAULT_IMAGE_SIZE_LIMIT));
    check_avif(avifDecoderSetIOMemory(d.get(), b.data(), b.size()), d.get(), b, key, where, "input");
    check_avif(avifDecoderParse(d.get()), d.get(), b, key, where, "header");
    return d;
}

CONVEYOR_DECL header read_avif_header(std::span<const std::uint8_t> b, std::string_view key, std::string_view where)
{
    const auto d = avif_parse(b, key, where, AVIF_DEFAULT_IMAGE_SIZE_LIMIT);
    const avifImage* img = d->image;
    if (img->width == 0 || img->height == 0)
        throw image_error(errc::zero_size, key, where,
                          "AVIF: the header gives " + std::to_string(img->width) + "x" + std::to_string(img->height) + " pixels");
    header h;
    const unsigned colour = img->yuvFormat == AVIF_PIXEL_FORMAT_YUV400 ? 1u : 3u;
    h.info = {image_kind::avif, img->width, img->height, colour + (d->alphaPresent ? 1u : 0u)};
    h.animated = d->imageCount > 1;
    return h;
}

CONVEYOR_DECL void avif_decode(std::span<const std::uint8_t> b, const plan& p, const decode_options& opts, const decode_context& ctx,
                               std::uint8_t* dst)
{
    const std::uint32_t w = p.hdr.info.width, h = p.hdr.info.height;
    const auto d = avif_parse(b, ctx.key, ctx.origin, opts.max_pixels);
    check_avif(avifDecoderNextImage(d.get()), d.get(), b, ctx.key, ctx.origin, "decode");
    const avifImage* img = d->image;
    if (img->width != w || img->height != h)
        throw image_error(errc::corrupt, ctx.key, ctx.origin,
                          "libavif decode: the image is " + std::to_string(img->width) + "x" + std::to_string(img->height) +
                              " where the header gives " + std::to_string(w) + "x" + std::to_string(h));
    // As Pillow: RGBA when there is alpha (libavif un-premultiplies premultiplied colour
    // for it), RGB otherwise; then the alpha is dropped, as convert("RGB") does.
    const bool alpha = d->alphaPresent != 0;
    const unsigned dc = alpha ? 4 : 3;
    const bool direct = !alpha && !p.resize && p.crop.width == w && p.crop.height == h && opts.format != pixel_format::gray;
    auto& s = thread_state();
    const std::size_t n = std::size_t{w} * h;
    std::uint8_t* px = direct ? dst : s.pixels.get(n * dc);
    avifRGBImage rgb;
    avifRGBImageSetDefaults(&rgb, img);
    rgb.depth = 8;
    rgb.format = opts.format == pixel_format::bgr ? (alpha ? AVIF_RGB_FORMAT_BGRA : AVIF_RGB_FORMAT_BGR)
                                                  : (alpha ? AVIF_RGB_FORMAT_RGBA : AVIF_RGB_FORMAT_RGB);
    rgb.pixels = px;
    rgb.rowBytes = w * dc;
    check_avif(avifImageYUVToRGB(img, &rgb), d.get(), b, ctx.key, ctx.origin, "YUV to RGB");
    if (direct) return;
    // BGR(A) came out of libavif already: only the alpha (and for grey, the colour) goes.
    if (alpha || opts.format == pixel_format::gray)
        convert_pixels(px, dc, n, opts.format == pixel_format::gray ? pixel_format::gray : pixel_format::rgb, px);
    resample(px, w, h, p.channels, {double(p.crop.left), double(p.crop.top), double(p.crop.width), double(p.crop.height)}, dst, p.out, ctx);
    s.pixels.trim();
}

#else // no libavif

CONVEYOR_DECL header read_avif_header(std::span<const std::uint8_t>, std::string_view key, std::string_view where)
{
    throw image_error(errc::unsupported, key, where,
                      "AVIF: this build of conveyor has no AVIF decoder (configured without libavif: CONVEYOR_WITH_AVIF; "
                      "Debian: libavif-dev, libdav1d-dev)");
}

CONVEYOR_DECL void avif_decode(std::span<const std::uint8_t> b, const plan&, const decode_options&, const decode_context& ctx, std::uint8_t*)
{
    (void)read_avif_header(b, ctx.key, ctx.origin);
}

#endif

} // namespace conveyor::image::detail

#endif
