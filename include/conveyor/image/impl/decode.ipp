// conveyor/image/impl/decode.ipp — the decoder (see decode.hpp): a planned decode handed to the
// JPEG, PNG, WebP or AVIF path, then flipped. The parts are in image/detail/: sniff (headers),
// plan, codec_state, jpeg (TurboJPEG and libjpeg regions), png (libspng), webp (libwebp),
// avif (libavif), resample.
#ifndef CONVEYOR_IMAGE_IMPL_DECODE_IPP
#define CONVEYOR_IMAGE_IMPL_DECODE_IPP

#include <conveyor/image/decode.hpp>
#include <conveyor/image/detail/avif.hpp>
#include <conveyor/image/detail/jpeg.hpp>
#include <conveyor/image/detail/plan.hpp>
#include <conveyor/image/detail/png.hpp>
#include <conveyor/image/detail/resample.hpp>
#include <conveyor/image/detail/sniff.hpp>
#include <conveyor/image/detail/webp.hpp>

#include <atomic>
#include <cstdint>
#include <string>

namespace conveyor::image {

namespace detail {

inline void decode_planned(std::span<const std::byte> bytes, const plan& p, const decode_options& opts, const decode_context& ctx,
                           std::uint8_t* dst)
{
    const std::span<const std::uint8_t> b(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    switch (p.hdr.info.kind) {
    case image_kind::jpeg: jpeg_decode(b, p, opts, ctx, dst); break;
    case image_kind::png: png_decode(b, p, opts, ctx, dst); break;
    case image_kind::webp: webp_decode(b, p, opts, ctx, dst); break;
    case image_kind::avif: avif_decode(b, p, opts, ctx, dst); break;
    }
    if (p.flip) flip_rows(dst, p.out, p.channels);
    if (ctx.stats) ctx.stats->decoded.fetch_add(1, std::memory_order_relaxed);
}

} // namespace detail

CONVEYOR_DECL image_info decoder::info(std::span<const std::byte> bytes, const decode_context& ctx) const
{
    return detail::read_header(bytes, ctx.key, ctx.origin).info;
}

CONVEYOR_DECL extent decoder::output_size(std::span<const std::byte> bytes, const decode_options& opts, const decode_context& ctx) const
{
    return detail::make_plan(bytes, opts, ctx).out;
}

CONVEYOR_DECL decoded_image decoder::decode(std::span<const std::byte> bytes, const decode_options& opts, const decode_context& ctx) const
{
    const auto p = detail::make_plan(bytes, opts, ctx);
    decoded_image img;
    img.height = p.out.height;
    img.width = p.out.width;
    img.channels = p.channels;
    img.format = opts.format;
    img.pixels = pool_.acquire(img.size_bytes());
    detail::decode_planned(bytes, p, opts, ctx, reinterpret_cast<std::uint8_t*>(img.pixels.data()));
    return img;
}

CONVEYOR_DECL void decoder::decode_into(std::span<const std::byte> bytes, const decode_options& opts, const decode_context& ctx,
                                        std::span<std::uint8_t> out) const
{
    if (opts.size.empty())
        throw detail::image_error(errc::bad_options, ctx.key, ctx.origin, "decode_into needs a fixed output size (decode_options::size)");
    const std::size_t need = std::size_t{opts.size.width} * opts.size.height * channels_of(opts.format);
    if (out.size() != need)
        throw detail::image_error(errc::bad_options, ctx.key, ctx.origin,
                                  "decode_into: the output holds " + std::to_string(out.size()) + " bytes, " +
                                      std::to_string(opts.size.width) + "x" + std::to_string(opts.size.height) + "x" +
                                      std::to_string(channels_of(opts.format)) + " needs " + std::to_string(need));
    const auto p = detail::make_plan(bytes, opts, ctx);
    detail::decode_planned(bytes, p, opts, ctx, out.data());
}

} // namespace conveyor::image

#endif
