// conveyor/image/detail/impl/webp.ipp — definitions for conveyor/image/detail/webp.hpp.
#ifndef CONVEYOR_IMAGE_DETAIL_IMPL_WEBP_IPP
#define CONVEYOR_IMAGE_DETAIL_IMPL_WEBP_IPP

#include <conveyor/image/detail/webp.hpp>
#include <conveyor/image/error.hpp>

#if CONVEYOR_WITH_WEBP
#include <conveyor/image/detail/codec_state.hpp>
#include <conveyor/image/detail/resample.hpp>

#include <webp/decode.h>
#include <webp/demux.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#endif

#include <string>

namespace conveyor::image::detail {

#if CONVEYOR_WITH_WEBP

/// Whether the RIFF container of `b` claims more bytes than `b` holds: the file was cut.
inline bool webp_cut(std::span<const std::uint8_t> b) noexcept
{
    if (b.size() < 8) return true;
    const std::uint64_t riff = std::uint64_t{b[4]} | (std::uint64_t{b[5]} << 8) | (std::uint64_t{b[6]} << 16) | (std::uint64_t{b[7]} << 24);
    return riff + 8 > b.size();
}

inline errc classify_webp(VP8StatusCode st, std::span<const std::uint8_t> b) noexcept
{
    switch (st) {
    case VP8_STATUS_NOT_ENOUGH_DATA:
    case VP8_STATUS_SUSPENDED: return errc::truncated;
    case VP8_STATUS_UNSUPPORTED_FEATURE: return errc::unsupported;
    case VP8_STATUS_OUT_OF_MEMORY: return errc::too_large;
    default: return webp_cut(b) ? errc::truncated : errc::corrupt;
    }
}

inline const char* webp_status_text(VP8StatusCode st) noexcept
{
    switch (st) {
    case VP8_STATUS_OK: return "ok";
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "the data end before the image does (suspended)";
    case VP8_STATUS_USER_ABORT: return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "the data end before the image does (not enough data)";
    }
    return "unknown status";
}

inline conveyor::error webp_error(VP8StatusCode st, std::span<const std::uint8_t> b, std::string_view key, std::string_view where,
                                  const char* what)
{
    return image_error(classify_webp(st, b), key, where, std::string("libwebp ") + what + ": " + webp_status_text(st));
}

CONVEYOR_DECL header read_webp_header(std::span<const std::uint8_t> b, std::string_view key, std::string_view where)
{
    WebPBitstreamFeatures f;
    const VP8StatusCode st = WebPGetFeatures(b.data(), b.size(), &f);
    if (st != VP8_STATUS_OK) throw webp_error(st, b, key, where, "header");
    if (f.width <= 0 || f.height <= 0)
        throw image_error(errc::zero_size, key, where,
                          "WebP: the header gives " + std::to_string(f.width) + "x" + std::to_string(f.height) + " pixels");
    header h;
    h.info = {image_kind::webp, static_cast<std::uint32_t>(f.width), static_cast<std::uint32_t>(f.height), f.has_alpha ? 4u : 3u};
    h.animated = f.has_animation != 0;
    return h;
}

struct webp_anim_deleter {
    void operator()(WebPAnimDecoder* d) const noexcept { WebPAnimDecoderDelete(d); }
};

/* The first frame of an animation on its canvas, RGBA, as PIL reads it (PIL opens every
   WebP through WebPAnimDecoder): the canvas starts transparent black and the frame is drawn
   into its rectangle. Returns the canvas (w x h x 4), which the decoder `d` owns. */
inline const std::uint8_t* webp_first_frame(std::span<const std::uint8_t> b, const plan& p, const decode_context& ctx,
                                            std::unique_ptr<WebPAnimDecoder, webp_anim_deleter>& d)
{
    auto fail = [&](const char* what) {
        return image_error(webp_cut(b) ? errc::truncated : errc::corrupt, ctx.key, ctx.origin,
                           std::string("libwebp animation: ") + what + (webp_cut(b) ? " (the data end before the file does)" : ""));
    };
    WebPAnimDecoderOptions o;
    if (!WebPAnimDecoderOptionsInit(&o)) throw image_error(errc::unsupported, ctx.key, ctx.origin, "libwebp: demuxer version mismatch");
    o.color_mode = MODE_RGBA;
    o.use_threads = 0;
    const WebPData data{b.data(), b.size()};
    d.reset(WebPAnimDecoderNew(&data, &o));
    if (!d) throw fail("cannot read the frames");
    WebPAnimInfo info;
    if (!WebPAnimDecoderGetInfo(d.get(), &info)) throw fail("cannot read the canvas");
    if (info.canvas_width != p.hdr.info.width || info.canvas_height != p.hdr.info.height)
        throw image_error(errc::corrupt, ctx.key, ctx.origin,
                          "libwebp animation: a canvas of " + std::to_string(info.canvas_width) + "x" + std::to_string(info.canvas_height) +
                              " where the header gives " + std::to_string(p.hdr.info.width) + "x" + std::to_string(p.hdr.info.height));
    std::uint8_t* canvas = nullptr;
    int timestamp = 0;
    if (!WebPAnimDecoderGetNext(d.get(), &canvas, &timestamp) || !canvas) throw fail("cannot decode the first frame");
    return canvas;
}

CONVEYOR_DECL void webp_decode(std::span<const std::uint8_t> b, const plan& p, const decode_options& opts, const decode_context& ctx,
                               std::uint8_t* dst)
{
    const std::uint32_t w = p.hdr.info.width, h = p.hdr.info.height;
    const bool whole = p.crop.left == 0 && p.crop.top == 0 && p.crop.width == w && p.crop.height == h;
    auto& s = thread_state();
    if (p.hdr.animated) {
        std::unique_ptr<WebPAnimDecoder, webp_anim_deleter> d;
        const std::uint8_t* canvas = webp_first_frame(b, p, ctx, d);
        const std::size_t n = std::size_t{w} * h;
        if (whole && !p.resize) {
            convert_pixels(canvas, 4, n, opts.format, dst);
            return;
        }
        std::uint8_t* px = s.pixels.get(n * p.channels);
        convert_pixels(canvas, 4, n, opts.format, px);
        resample(px, w, h, p.channels, {double(p.crop.left), double(p.crop.top), double(p.crop.width), double(p.crop.height)}, dst, p.out, ctx);
        s.pixels.trim();
        return;
    }
    // The rectangle decoded: the whole image, or the crop with a margin of 2 pixels and its
    // corner on even coordinates. libwebp treats a crop's edges as the image's (its fancy
    // chroma upsampling mirrors there) and places the chroma of an odd corner half a pixel
    // off; inside the margin every pixel is the whole decode's. Rows below the rectangle are
    // not decoded, nor pixels beside it converted from YUV.
    constexpr std::int64_t margin = 2;
    std::int64_t rl = 0, rt = 0, rr = w, rb = h;
    if (!whole) {
        rl = std::max<std::int64_t>(p.crop.left - margin, 0) & ~std::int64_t{1};
        rt = std::max<std::int64_t>(p.crop.top - margin, 0) & ~std::int64_t{1};
        rr = std::min<std::int64_t>(p.crop.left + p.crop.width + margin, w);
        rb = std::min<std::int64_t>(p.crop.top + p.crop.height + margin, h);
    }
    const auto rw = static_cast<std::uint32_t>(rr - rl), rh = static_cast<std::uint32_t>(rb - rt);
    const bool direct = whole && !p.resize && opts.format != pixel_format::gray;
    const std::size_t size = std::size_t{rw} * rh * 3;
    std::uint8_t* px = direct ? dst : s.pixels.get(size);

    WebPDecoderConfig config;
    if (!WebPInitDecoderConfig(&config)) throw image_error(errc::unsupported, ctx.key, ctx.origin, "libwebp: decoder version mismatch");
    if (!whole) {
        config.options.use_cropping = 1;
        config.options.crop_left = static_cast<int>(rl);
        config.options.crop_top = static_cast<int>(rt);
        config.options.crop_width = static_cast<int>(rw);
        config.options.crop_height = static_cast<int>(rh);
    }
    config.output.colorspace = opts.format == pixel_format::bgr ? MODE_BGR : MODE_RGB;
    config.output.is_external_memory = 1;
    config.output.u.RGBA.rgba = px;
    config.output.u.RGBA.stride = static_cast<int>(rw * 3);
    config.output.u.RGBA.size = size;
    const VP8StatusCode st = WebPDecode(b.data(), b.size(), &config);
    WebPFreeDecBuffer(&config.output); // nothing to free in external memory; for form's sake
    if (st != VP8_STATUS_OK) throw webp_error(st, b, ctx.key, ctx.origin, "decode");
    if (config.output.width != static_cast<int>(rw) || config.output.height != static_cast<int>(rh))
        throw image_error(errc::corrupt, ctx.key, ctx.origin, "libwebp decode: the image is not the size its header gives");
    if (direct) return;
    if (opts.format == pixel_format::gray) convert_pixels(px, 3, std::size_t{rw} * rh, pixel_format::gray, px);
    resample(px, rw, rh, p.channels,
             {double(p.crop.left - rl), double(p.crop.top - rt), double(p.crop.width), double(p.crop.height)}, dst, p.out, ctx);
    s.pixels.trim();
}

#else // no libwebp

CONVEYOR_DECL header read_webp_header(std::span<const std::uint8_t>, std::string_view key, std::string_view where)
{
    throw image_error(errc::unsupported, key, where,
                      "WebP: this build of conveyor has no WebP decoder (configured without libwebp: CONVEYOR_WITH_WEBP; "
                      "Debian: libwebp-dev)");
}

CONVEYOR_DECL void webp_decode(std::span<const std::uint8_t> b, const plan&, const decode_options&, const decode_context& ctx, std::uint8_t*)
{
    (void)read_webp_header(b, ctx.key, ctx.origin);
}

#endif

} // namespace conveyor::image::detail

#endif
