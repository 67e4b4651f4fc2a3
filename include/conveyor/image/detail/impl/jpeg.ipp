// conveyor/image/detail/impl/jpeg.ipp — definitions for detail/jpeg.hpp: the TurboJPEG paths
// (whole decodes, DCT scaling, lossless cuts). The libjpeg region path is jpeg_region.ipp.
#ifndef CONVEYOR_IMAGE_DETAIL_IMPL_JPEG_IPP
#define CONVEYOR_IMAGE_DETAIL_IMPL_JPEG_IPP

#include <conveyor/image/detail/jpeg.hpp>
#include <conveyor/image/detail/codec_state.hpp>
#include <conveyor/image/detail/resample.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace conveyor::image::detail {

/* ---- JPEG -------------------------------------------------------------------------------- */

inline int tj_format(pixel_format f) noexcept
{
    switch (f) {
    case pixel_format::rgb: return TJPF_RGB;
    case pixel_format::bgr: return TJPF_BGR;
    case pixel_format::gray: return TJPF_GRAY;
    }
    return TJPF_RGB;
}

/* TurboJPEG's scaling factors 1, 1/2, 1/4, 1/8, largest first. Only these have SIMD
   inverse DCTs in libjpeg-turbo; the others (7/8, 3/4, 5/8, 3/8) run scalar code that costs
   more than the pixels it saves (conveyor-bench decode compares them). */
inline std::span<const tjscalingfactor> shrink_factors()
{
    static const auto factors = [] {
        std::vector<tjscalingfactor> v;
        int n = 0;
        const tjscalingfactor* all = tjGetScalingFactors(&n);
        for (int i = 0; all && i < n; ++i)
            if (all[i].num == 1) v.push_back(all[i]);
        std::sort(v.begin(), v.end(), [](auto a, auto b) { return a.num * b.denom > b.num * a.denom; });
        if (v.empty()) v.push_back({1, 1});
        return v;
    }();
    return factors;
}

inline std::uint32_t scaled(std::uint32_t d, tjscalingfactor f) noexcept
{
    return static_cast<std::uint32_t>((std::uint64_t{d} * f.num + f.denom - 1) / f.denom); // TJSCALED
}

/// The smallest factor leaving a crop of `cw` x `ch` at least `out` (the first if not `allowed`).
inline tjscalingfactor pick_factor(double cw, double ch, extent out, bool allowed)
{
    tjscalingfactor best{1, 1};
    if (!allowed) return best;
    for (auto f : shrink_factors()) {
        const double s = double(f.num) / f.denom;
        if (cw * s + 1e-9 >= out.width && ch * s + 1e-9 >= out.height) best = f;
        else break;
    }
    return best;
}

/* Decodes the whole of `jpeg` (w x h) at factor `f`, then takes `crop` (in the unscaled
   pixels of this JPEG) to `out` in `dst`. */
inline void jpeg_decode_region(std::span<const std::uint8_t> jpeg, std::uint32_t w, std::uint32_t h, region crop, tjscalingfactor f,
                               const plan& p, const decode_options& opts, const decode_context& ctx, std::uint8_t* dst)
{
    tjhandle tj = decompressor(ctx.key, ctx.origin);
    const std::uint32_t sw = scaled(w, f), sh = scaled(h, f);
    const int flags = TJFLAG_LIMITSCANS | (opts.strict ? TJFLAG_STOPONWARNING : 0);
    const bool whole = crop.left == 0 && crop.top == 0 && crop.width == w && crop.height == h;
    if (whole && sw == p.out.width && sh == p.out.height) {
        if (tjDecompress2(tj, jpeg.data(), jpeg.size(), dst, int(sw), int(sw * p.channels), int(sh), tj_format(opts.format), flags) != 0)
            check_tj(tj, opts, ctx, "decode");
        return;
    }
    auto& s = thread_state();
    std::uint8_t* tmp = s.pixels.get(std::size_t{sw} * sh * p.channels);
    if (tjDecompress2(tj, jpeg.data(), jpeg.size(), tmp, int(sw), int(sw * p.channels), int(sh), tj_format(opts.format), flags) != 0)
        check_tj(tj, opts, ctx, "decode");
    // Each 8x8 block becomes num x num pixels (num/denom of a pixel each), the last,
    // partial one included: the factor maps coordinates exactly, sw / w does not.
    const double fx = double(f.num) / f.denom;
    resample(tmp, sw, sh, p.channels, {crop.left * fx, crop.top * fx, crop.width * fx, crop.height * fx}, dst, p.out, ctx);
    s.pixels.trim();
}

/// Frees what tjTransform allocated.
struct tj_buffer {
    unsigned char* data = nullptr;
    unsigned long size = 0;
    ~tj_buffer()
    {
        if (data) tjFree(data);
    }
};

CONVEYOR_DECL void jpeg_decode(std::span<const std::uint8_t> b, const plan& p, const decode_options& opts, const decode_context& ctx, std::uint8_t* dst)
{
    const auto w = p.hdr.info.width, h = p.hdr.info.height;
    const region crop{double(p.crop.left), double(p.crop.top), double(p.crop.width), double(p.crop.height)};
    const bool whole = p.crop.left == 0 && p.crop.top == 0 && p.crop.width == w && p.crop.height == h;
    const bool fit = !opts.size.empty();
    if (!whole && opts.jpeg_crop == jpeg_crop_method::decode_region) {
        jpeg_decode_cropped(b, p, opts, ctx, pick_factor(crop.width, crop.height, p.out, fit && opts.dct_scaling), dst);
        return;
    }
    if (whole || opts.jpeg_crop == jpeg_crop_method::decode_then_crop) {
        const auto f = pick_factor(crop.width, crop.height, p.out, fit && opts.dct_scaling);
        jpeg_decode_region(b, w, h, crop, f, p, opts, ctx, dst);
        return;
    }
    // The MCU-aligned region holding the crop, cut losslessly out of the compressed data.
    // With a margin of 4 pixels, for the reason given in jpeg_decode_cropped.
    constexpr std::uint32_t margin = 4;
    const auto cl = std::uint32_t(p.crop.left), ct = std::uint32_t(p.crop.top);
    const auto ax = (cl > margin ? cl - margin : 0) / p.hdr.mcu_width * p.hdr.mcu_width;
    const auto ay = (ct > margin ? ct - margin : 0) / p.hdr.mcu_height * p.hdr.mcu_height;
    const auto aw = std::min(std::uint32_t(p.crop.left + p.crop.width) + margin, w) - ax;
    const auto ah = std::min(std::uint32_t(p.crop.top + p.crop.height) + margin, h) - ay;
    tjtransform t{};
    t.r = {int(ax), int(ay), int(aw), int(ah)};
    t.op = TJXOP_NONE;
    t.options = TJXOPT_CROP;
    tj_buffer cut;
    tjhandle tx = transformer(ctx.key, ctx.origin);
    if (tjTransform(tx, b.data(), b.size(), 1, &cut.data, &cut.size, &t, TJFLAG_LIMITSCANS | (opts.strict ? TJFLAG_STOPONWARNING : 0)) != 0)
        check_tj(tx, opts, ctx, "crop");
    const region inner{crop.left - ax, crop.top - ay, crop.width, crop.height};
    const auto f = pick_factor(crop.width, crop.height, p.out, fit && opts.dct_scaling);
    jpeg_decode_region({cut.data, cut.size}, aw, ah, inner, f, p, opts, ctx, dst);
}

} // namespace conveyor::image::detail

#endif
