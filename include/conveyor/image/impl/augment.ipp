// conveyor/image/impl/augment.ipp — definitions for the per-sample randomness and crops
// declared in conveyor/image/decode.hpp: `sample_random`, `random_resized_crop`, `crop_for`,
// `flip_for`.
#ifndef CONVEYOR_IMAGE_IMPL_AUGMENT_IPP
#define CONVEYOR_IMAGE_IMPL_AUGMENT_IPP

#include <conveyor/image/decode.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace conveyor::image {

namespace detail {

inline std::uint64_t mix64(std::uint64_t z) noexcept
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/// Python's round(): half to even (the default floating-point rounding mode).
inline std::int64_t round_half_even(double x) noexcept
{
    return static_cast<std::int64_t>(std::nearbyint(x));
}

} // namespace detail

CONVEYOR_DECL sample_random::sample_random(std::uint64_t seed, std::uint64_t epoch, std::string_view key, std::uint64_t stream) noexcept
{
    std::uint64_t h = 0xcbf29ce484222325ULL; // FNV-1a of the key
    for (unsigned char ch : key) h = (h ^ ch) * 0x100000001b3ULL;
    state_ = detail::mix64(detail::mix64(detail::mix64(seed + 0x9e3779b97f4a7c15ULL) ^ epoch) ^ h) ^ (stream * 0xd1b54a32d192ed03ULL);
}

CONVEYOR_DECL std::uint64_t sample_random::next() noexcept
{
    return detail::mix64(state_ += 0x9e3779b97f4a7c15ULL);
}

CONVEYOR_DECL double sample_random::uniform(double lo, double hi) noexcept
{
    const double u = static_cast<double>(next() >> 11) * 0x1p-53; // [0, 1)
    return lo + u * (hi - lo);
}

CONVEYOR_DECL std::int64_t sample_random::integer(std::int64_t lo, std::int64_t hi) noexcept
{
    if (hi <= lo) return lo;
    __extension__ using u128 = unsigned __int128;
    const auto n = static_cast<std::uint64_t>(hi - lo);
    return lo + static_cast<std::int64_t>((static_cast<u128>(next()) * n) >> 64);
}

CONVEYOR_DECL crop_rect random_resized_crop(std::int64_t height, std::int64_t width, std::array<double, 2> scale,
                                            std::array<double, 2> ratio, sample_random& rng)
{
    const double area = double(height) * double(width);
    const double log_lo = std::log(ratio[0]), log_hi = std::log(ratio[1]);
    for (int attempt = 0; attempt < 10; ++attempt) {
        const double target_area = area * rng.uniform(scale[0], scale[1]);
        const double aspect = std::exp(rng.uniform(log_lo, log_hi));
        const std::int64_t w = detail::round_half_even(std::sqrt(target_area * aspect));
        const std::int64_t h = detail::round_half_even(std::sqrt(target_area / aspect));
        if (0 < w && w <= width && 0 < h && h <= height) {
            const std::int64_t i = rng.integer(0, height - h + 1);
            const std::int64_t j = rng.integer(0, width - w + 1);
            return {i, j, h, w};
        }
    }
    // Fallback: a centred crop of the whole image, its ratio clamped to the range.
    const double in_ratio = double(width) / double(height);
    std::int64_t w = width, h = height;
    if (in_ratio < std::min(ratio[0], ratio[1])) {
        w = width;
        h = detail::round_half_even(double(w) / std::min(ratio[0], ratio[1]));
    } else if (in_ratio > std::max(ratio[0], ratio[1])) {
        h = height;
        w = detail::round_half_even(double(h) * std::max(ratio[0], ratio[1]));
    }
    return {(height - h) / 2, (width - w) / 2, h, w};
}

CONVEYOR_DECL crop_rect crop_for(std::int64_t height, std::int64_t width, const decode_options& opts, const decode_context& ctx)
{
    switch (opts.crop) {
    case crop_mode::none: break;
    case crop_mode::center: {
        const double r = opts.size.empty() ? double(width) / double(height) : double(opts.size.width) / double(opts.size.height);
        double cw = double(width), ch = double(height);
        if (cw / ch > r) cw = ch * r;
        else ch = cw / r;
        const auto w = std::clamp<std::int64_t>(detail::round_half_even(cw * opts.center_fraction), 1, width);
        const auto h = std::clamp<std::int64_t>(detail::round_half_even(ch * opts.center_fraction), 1, height);
        // torchvision's CenterCrop: int(round((size - crop) / 2.0)).
        return {detail::round_half_even(double(height - h) / 2.0), detail::round_half_even(double(width - w) / 2.0), h, w};
    }
    case crop_mode::random_resized: {
        sample_random rng(opts.seed, ctx.epoch, ctx.key, 0);
        return random_resized_crop(height, width, opts.scale, opts.ratio, rng);
    }
    }
    return {0, 0, height, width};
}

CONVEYOR_DECL bool flip_for(const decode_options& opts, const decode_context& ctx)
{
    if (opts.flip <= 0) return false;
    if (opts.flip >= 1) return true;
    sample_random rng(opts.seed, ctx.epoch, ctx.key, 1);
    return rng.uniform(0, 1) < opts.flip;
}

} // namespace conveyor::image

#endif
