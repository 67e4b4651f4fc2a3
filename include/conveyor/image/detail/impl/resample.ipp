// conveyor/image/detail/impl/resample.ipp — definitions for conveyor/image/detail/resample.hpp.
#ifndef CONVEYOR_IMAGE_DETAIL_IMPL_RESAMPLE_IPP
#define CONVEYOR_IMAGE_DETAIL_IMPL_RESAMPLE_IPP

#include <conveyor/image/detail/resample.hpp>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

namespace conveyor::image::detail {

/* Resampling: PIL's method, which torchvision's antialiased bilinear resize follows: a
   separable triangle filter whose support widens by the shrink factor (so shrinking
   averages every source pixel, no aliasing), weights in fixed point, each window clamped to the source region and renormalised (the region's edges act as image edges,
   as when torchvision crops first and resizes after). Written here because Debian's
   stb_image_resize 0.97 asserts (aborts the process) on some fractional regions. */
struct filter_bank {
    std::vector<std::uint32_t> first; // first source index of each output's window
    std::vector<std::uint32_t> count; // window length
    std::vector<std::int32_t> weights; // `stride` per output
    std::uint32_t stride = 0;
    // The weights as 16-bit pairs (tap 2k low, 2k+1 high; 0 past the window), `stride / 2 + 1`
    // per output: the operands of SSE2's multiply-add, ready made.
    std::vector<std::int32_t> pairs;
    std::uint32_t pair_stride = 0;
};

/// Weights in 14-bit fixed point, so that two taps fit the 16-bit lanes of SSE2's
/// multiply-add (PIL uses 22 bits; the results differ by at most a level, rarely).
inline constexpr int simd_bits = 14;

/// The windows of `out` outputs over source pixels [lo, hi) of a line of `size`, reading
/// the fractional span [x0, x1).
inline void make_bank(filter_bank& b, std::uint32_t out, double x0, double x1, std::uint32_t lo, std::uint32_t hi, int bits)
{
    const double scale = (x1 - x0) / out;
    const double filterscale = std::max(scale, 1.0);
    const double support = 1.0 * filterscale; // the triangle's support is 1
    b.stride = static_cast<std::uint32_t>(std::ceil(support)) * 2 + 1;
    b.first.resize(out);
    b.count.resize(out);
    b.weights.assign(std::size_t{out} * b.stride, 0);
    std::vector<double> w(b.stride);
    for (std::uint32_t i = 0; i < out; ++i) {
        const double center = x0 + (i + 0.5) * scale;
        auto a = static_cast<std::int64_t>(std::floor(center - support + 0.5));
        auto e = static_cast<std::int64_t>(std::floor(center + support + 0.5));
        a = std::clamp<std::int64_t>(a, lo, hi - 1);
        e = std::clamp<std::int64_t>(e, a + 1, hi);
        e = std::min<std::int64_t>(e, a + b.stride);
        double total = 0;
        const auto n = static_cast<std::uint32_t>(e - a);
        for (std::uint32_t k = 0; k < n; ++k) {
            const double t = (double(a + k) - center + 0.5) / filterscale;
            w[k] = std::max(0.0, 1.0 - std::abs(t));
            total += w[k];
        }
        if (total <= 0) { // a window that met no weight (a sliver of a pixel): nearest pixel
            std::fill(w.begin(), w.begin() + n, 0.0);
            w[std::min<std::uint32_t>(n - 1, static_cast<std::uint32_t>(std::clamp<std::int64_t>(std::int64_t(center) - a, 0, n - 1)))] = 1;
            total = 1;
        }
        b.first[i] = static_cast<std::uint32_t>(a);
        b.count[i] = n;
        for (std::uint32_t k = 0; k < n; ++k)
            b.weights[std::size_t{i} * b.stride + k] = static_cast<std::int32_t>(std::lround(w[k] / total * (1 << bits)));
    }
    b.pair_stride = b.stride / 2 + 1;
    b.pairs.assign(std::size_t{out} * b.pair_stride, 0);
    for (std::uint32_t i = 0; i < out; ++i)
        for (std::uint32_t k = 0; k < b.count[i]; k += 2) {
            const auto lo = static_cast<std::uint32_t>(b.weights[std::size_t{i} * b.stride + k]) & 0xFFFFu;
            const auto hi = k + 1 < b.count[i] ? static_cast<std::uint32_t>(b.weights[std::size_t{i} * b.stride + k + 1]) << 16 : 0u;
            b.pairs[std::size_t{i} * b.pair_stride + k / 2] = static_cast<std::int32_t>(lo | hi);
        }
}

/// Resampler state kept per thread (banks, the intermediate image, an accumulator row).
struct resampler {
    filter_bank h, v;
    std::vector<std::uint8_t> mid;
};

// Not inlined: in a shared object (the Python module) reaching a thread_local takes a call
// to __tls_get_addr, which the compiler, once this is inlined, repeats inside the resampling
// loops instead of keeping the address; returned from a call it is a plain pointer.
[[gnu::noinline]] inline resampler& thread_resampler()
{
    thread_local resampler r;
    return r;
}

/* One output row of the horizontal pass: `in` holds source pixels from column `base` on;
   `limit` is the end of the memory it may read. */
template <unsigned C>
inline void resample_row(const std::uint8_t* in, std::uint32_t base, const filter_bank& b, std::uint32_t out_w, std::uint8_t* o,
                         const std::uint8_t* limit)
{
    std::uint32_t i = 0;
#if defined(__SSE2__)
    if constexpr (C == 3) {
        // Two taps of all three channels per multiply-add: each pixel loaded as 4 bytes
        // (3 where that would read past `limit`, none past it), the pair interleaved into
        // 16-bit lanes.
        const __m128i zero = _mm_setzero_si128();
        auto load = [limit](const std::uint8_t* q) {
            std::int32_t v;
            if (q + 4 <= limit) std::memcpy(&v, q, 4);
            else if (q + 3 <= limit) v = std::int32_t{q[0]} | (std::int32_t{q[1]} << 8) | (std::int32_t{q[2]} << 16);
            else v = 0; // the partner of a lone last tap, past the end: its weight is 0
            return _mm_cvtsi32_si128(v);
        };
        for (; i < out_w; ++i) {
            const std::int32_t* pw = &b.pairs[std::size_t{i} * b.pair_stride];
            const std::uint8_t* p = in + std::size_t{b.first[i] - base} * 3;
            const std::uint32_t n = b.count[i];
            __m128i acc = _mm_set1_epi32(1 << (simd_bits - 1));
            for (std::uint32_t j = 0; j < n; j += 2) { // a lone last tap pairs with weight 0
                const __m128i x = _mm_unpacklo_epi8(_mm_unpacklo_epi8(load(p + 3 * j), load(p + 3 * j + 3)), zero);
                acc = _mm_add_epi32(acc, _mm_madd_epi16(x, _mm_set1_epi32(pw[j / 2])));
            }
            acc = _mm_srai_epi32(acc, simd_bits);
            const std::int32_t v = _mm_cvtsi128_si32(_mm_packus_epi16(_mm_packs_epi32(acc, zero), zero));
            // Four bytes where the next pixel will overwrite the fourth; three at the end.
            if (i + 1 < out_w) std::memcpy(o + i * 3, &v, 4);
            else std::memcpy(o + i * 3, &v, 3);
        }
        return;
    }
#endif
    (void)limit;
    for (; i < out_w; ++i) {
        const std::int32_t* wt = &b.weights[std::size_t{i} * b.stride];
        const std::uint8_t* p = in + std::size_t{b.first[i] - base} * C;
        const std::uint32_t n = b.count[i];
        std::int32_t acc[C];
        for (unsigned k = 0; k < C; ++k) acc[k] = std::int32_t{1} << (simd_bits - 1);
        for (std::uint32_t j = 0; j < n; ++j)
            for (unsigned k = 0; k < C; ++k) acc[k] += std::int32_t{p[j * C + k]} * wt[j];
        for (unsigned k = 0; k < C; ++k) {
            const std::int32_t v = acc[k] >> simd_bits;
            o[i * C + k] = static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

/* Output row `i` of the vertical pass: the weighted sum of source rows, `n` bytes each
   from byte `offset` of each row. With SSE2 (every x86-64), 16 bytes at a time, two rows
   per multiply-add; elsewhere, and for the tail, plain code. */
inline void vertical_row(const std::uint8_t* src, std::size_t stride, std::size_t offset, const filter_bank& b, std::uint32_t i,
                         std::size_t n, std::uint8_t* out)
{
    const std::int32_t* wt = &b.weights[std::size_t{i} * b.stride];
    const std::uint32_t taps = b.count[i];
    const std::uint8_t* first = src + std::size_t{b.first[i]} * stride + offset;
    std::size_t x = 0;
#if defined(__SSE2__)
    const __m128i zero = _mm_setzero_si128();
    const __m128i half = _mm_set1_epi32(1 << (simd_bits - 1));
    for (; x + 16 <= n; x += 16) {
        __m128i a0 = half, a1 = half, a2 = half, a3 = half;
        std::uint32_t j = 0;
        for (; j + 2 <= taps; j += 2) {
            const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(first + j * stride + x));
            const __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(first + (j + 1) * stride + x));
            const __m128i w = _mm_set1_epi32(static_cast<std::int32_t>((static_cast<std::uint32_t>(wt[j]) & 0xFFFFu) |
                                                                       (static_cast<std::uint32_t>(wt[j + 1]) << 16)));
            const __m128i lo = _mm_unpacklo_epi8(r0, r1), hi = _mm_unpackhi_epi8(r0, r1);
            a0 = _mm_add_epi32(a0, _mm_madd_epi16(_mm_unpacklo_epi8(lo, zero), w));
            a1 = _mm_add_epi32(a1, _mm_madd_epi16(_mm_unpackhi_epi8(lo, zero), w));
            a2 = _mm_add_epi32(a2, _mm_madd_epi16(_mm_unpacklo_epi8(hi, zero), w));
            a3 = _mm_add_epi32(a3, _mm_madd_epi16(_mm_unpackhi_epi8(hi, zero), w));
        }
        if (j < taps) {
            const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(first + j * stride + x));
            const __m128i w = _mm_set1_epi32(static_cast<std::int32_t>(static_cast<std::uint32_t>(wt[j]) & 0xFFFFu));
            const __m128i lo = _mm_unpacklo_epi8(r0, zero), hi = _mm_unpackhi_epi8(r0, zero);
            a0 = _mm_add_epi32(a0, _mm_madd_epi16(_mm_unpacklo_epi16(lo, zero), w));
            a1 = _mm_add_epi32(a1, _mm_madd_epi16(_mm_unpackhi_epi16(lo, zero), w));
            a2 = _mm_add_epi32(a2, _mm_madd_epi16(_mm_unpacklo_epi16(hi, zero), w));
            a3 = _mm_add_epi32(a3, _mm_madd_epi16(_mm_unpackhi_epi16(hi, zero), w));
        }
        a0 = _mm_srai_epi32(a0, simd_bits);
        a1 = _mm_srai_epi32(a1, simd_bits);
        a2 = _mm_srai_epi32(a2, simd_bits);
        a3 = _mm_srai_epi32(a3, simd_bits);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + x), _mm_packus_epi16(_mm_packs_epi32(a0, a1), _mm_packs_epi32(a2, a3)));
    }
#endif
    for (; x < n; ++x) {
        std::int32_t acc = std::int32_t{1} << (simd_bits - 1);
        for (std::uint32_t j = 0; j < taps; ++j) acc += std::int32_t{first[j * stride + x]} * wt[j];
        acc >>= simd_bits;
        out[x] = static_cast<std::uint8_t>(acc < 0 ? 0 : acc > 255 ? 255 : acc);
    }
}

/* Copies region `r` of `src` (w x h, c channels) to `dst` (out), resampled; an exact
   whole-pixel region of the output's size is copied as it is. The filter sees only the
   region's whole-pixel bounding box. The vertical pass goes first: it runs along whole
   rows, which the compiler vectorises, and leaves the horizontal pass (a gather per
   output pixel) only the output's rows. */
CONVEYOR_DECL void resample(const std::uint8_t* src, std::uint32_t w, std::uint32_t h, unsigned c, region r, std::uint8_t* dst,
                     extent out, const decode_context&)
{
    const double x0 = std::clamp(r.left, 0.0, double(w)), y0 = std::clamp(r.top, 0.0, double(h));
    const double x1 = std::clamp(r.left + r.width, x0, double(w)), y1 = std::clamp(r.top + r.height, y0, double(h));
    auto bx0 = static_cast<std::uint32_t>(std::floor(x0 + 1e-9)), by0 = static_cast<std::uint32_t>(std::floor(y0 + 1e-9));
    auto bx1 = static_cast<std::uint32_t>(std::ceil(x1 - 1e-9)), by1 = static_cast<std::uint32_t>(std::ceil(y1 - 1e-9));
    bx0 = std::min(bx0, w - 1);
    by0 = std::min(by0, h - 1);
    bx1 = std::clamp(bx1, bx0 + 1, w);
    by1 = std::clamp(by1, by0 + 1, h);
    const std::size_t stride = std::size_t{w} * c;
    const std::size_t orow = std::size_t{out.width} * c;
    const bool x_exact = std::abs(x0 - bx0) < 1e-9 && std::abs(x1 - bx1) < 1e-9 && bx1 - bx0 == out.width;
    const bool y_exact = std::abs(y0 - by0) < 1e-9 && std::abs(y1 - by1) < 1e-9 && by1 - by0 == out.height;
    if (x_exact && y_exact) {
        const std::uint8_t* box = src + std::size_t{by0} * stride + std::size_t{bx0} * c;
        for (std::uint32_t y = 0; y < out.height; ++y) std::memcpy(dst + y * orow, box + y * stride, orow);
        return;
    }
    auto& rs = thread_resampler();
    // Vertical: out.height rows of the box's bw columns (or the source rows themselves).
    const std::uint32_t bw = bx1 - bx0;
    const std::size_t mrow = std::size_t{bw} * c;
    const std::uint8_t* mid;
    std::size_t mid_stride;
    const std::uint8_t* mid_end = src + std::size_t{h} * stride;
    if (y_exact) {
        mid = src + std::size_t{by0} * stride + std::size_t{bx0} * c;
        mid_stride = stride;
    } else {
        make_bank(rs.v, out.height, std::max(y0, double(by0)), std::max(y1, y0 + 1e-6), by0, by1, simd_bits);
        rs.mid.resize(std::size_t{out.height} * mrow);
        for (std::uint32_t i = 0; i < out.height; ++i)
            vertical_row(src, stride, bx0 * c, rs.v, i, mrow, rs.mid.data() + std::size_t{i} * mrow);
        mid = rs.mid.data();
        mid_stride = mrow;
        mid_end = rs.mid.data() + rs.mid.size();
    }
    // Horizontal.
    if (x_exact) {
        for (std::uint32_t y = 0; y < out.height; ++y) std::memcpy(dst + y * orow, mid + y * mid_stride, orow);
    } else {
        make_bank(rs.h, out.width, std::max(x0, double(bx0)), std::max(x1, x0 + 1e-6), bx0, bx1, simd_bits);
        for (std::uint32_t y = 0; y < out.height; ++y) {
            const std::uint8_t* in = mid + y * mid_stride;
            if (c == 3) resample_row<3>(in, bx0, rs.h, out.width, dst + y * orow, mid_end);
            else resample_row<1>(in, bx0, rs.h, out.width, dst + y * orow, mid_end);
        }
    }
    if (rs.mid.capacity() > (std::size_t{64} << 20)) rs.mid = {};
}

CONVEYOR_DECL void convert_pixels(const std::uint8_t* src, unsigned src_channels, std::size_t n, pixel_format f, std::uint8_t* dst) noexcept
{
    const std::size_t sc = src_channels;
    switch (f) {
    case pixel_format::rgb:
        if (sc == 3) {
            if (dst != src) std::memmove(dst, src, n * 3);
            return;
        }
        for (std::size_t i = 0; i < n; ++i) {
            const std::uint8_t r = src[i * sc], g = src[i * sc + 1], b = src[i * sc + 2];
            dst[i * 3] = r, dst[i * 3 + 1] = g, dst[i * 3 + 2] = b;
        }
        return;
    case pixel_format::bgr:
        for (std::size_t i = 0; i < n; ++i) {
            const std::uint8_t r = src[i * sc], g = src[i * sc + 1], b = src[i * sc + 2];
            dst[i * 3] = b, dst[i * 3 + 1] = g, dst[i * 3 + 2] = r;
        }
        return;
    case pixel_format::gray:
        for (std::size_t i = 0; i < n; ++i)
            dst[i] = static_cast<std::uint8_t>((src[i * sc] * 19595u + src[i * sc + 1] * 38470u + src[i * sc + 2] * 7471u + 0x8000u) >> 16);
        return;
    }
}

CONVEYOR_DECL void flip_rows(std::uint8_t* px, extent e, unsigned c) noexcept
{
    for (std::uint32_t y = 0; y < e.height; ++y) {
        std::uint8_t* row = px + std::size_t{y} * e.width * c;
        for (std::uint32_t a = 0, b = e.width - 1; a < b; ++a, --b)
            for (unsigned k = 0; k < c; ++k) std::swap(row[a * c + k], row[b * c + k]);
    }
}

} // namespace conveyor::image::detail

#endif
