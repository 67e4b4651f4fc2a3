// conveyor/image/detail/impl/plan.ipp — definitions for conveyor/image/detail/plan.hpp.
#ifndef CONVEYOR_IMAGE_DETAIL_IMPL_PLAN_IPP
#define CONVEYOR_IMAGE_DETAIL_IMPL_PLAN_IPP

#include <conveyor/image/detail/plan.hpp>
#include <conveyor/image/error.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

namespace conveyor::image::detail {

inline void check_options(const decode_options& o, const decode_context& ctx)
{
    auto bad = [&](std::string d) { return image_error(errc::bad_options, ctx.key, ctx.origin, std::move(d)); };
    if (o.crop == crop_mode::random_resized) {
        if (!(o.scale[0] > 0 && o.scale[0] <= o.scale[1] && o.scale[1] <= 1))
            throw bad("random-resized crop: the scale range must satisfy 0 < min <= max <= 1");
        if (!(o.ratio[0] > 0 && o.ratio[0] <= o.ratio[1] && std::isfinite(o.ratio[1])))
            throw bad("random-resized crop: the ratio range must satisfy 0 < min <= max");
    }
    if (o.crop == crop_mode::center && !(o.center_fraction > 0 && o.center_fraction <= 1))
        throw bad("center crop: center_fraction must be in (0, 1]");
    if (!(o.flip >= 0 && o.flip <= 1)) throw bad("flip probability must be in [0, 1]");
    if ((o.size.width == 0) != (o.size.height == 0)) throw bad("output size: give both width and height, or neither");
}

CONVEYOR_DECL plan make_plan(std::span<const std::byte> bytes, const decode_options& opts, const decode_context& ctx)
{
    check_options(opts, ctx);
    plan p;
    p.hdr = read_header(bytes, ctx.key, ctx.origin);
    const auto& in = p.hdr.info;
    const std::uint64_t pixels = std::uint64_t{in.width} * in.height;
    if (pixels > opts.max_pixels)
        throw image_error(errc::too_large, ctx.key, ctx.origin,
                          "the header gives " + std::to_string(in.width) + "x" + std::to_string(in.height) + " = " +
                              std::to_string(pixels) + " pixels, above the limit of " + std::to_string(opts.max_pixels) +
                              " (decode_options::max_pixels)");
    p.crop = crop_for(in.height, in.width, opts, ctx);
    p.out = opts.size.empty() ? extent{static_cast<std::uint32_t>(p.crop.width), static_cast<std::uint32_t>(p.crop.height)} : opts.size;
    p.channels = channels_of(opts.format);
    p.flip = flip_for(opts, ctx);
    p.resize = p.out.width != p.crop.width || p.out.height != p.crop.height;
    return p;
}

} // namespace conveyor::image::detail

#endif
