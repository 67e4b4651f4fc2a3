// conveyor/image/impl/decode.ipp — the decoder (see decode.hpp): TurboJPEG, libspng, resampling.
#ifndef CONVEYOR_IMAGE_IMPL_DECODE_IPP
#define CONVEYOR_IMAGE_IMPL_DECODE_IPP

#include <conveyor/image/decode.hpp>

#include <spng.h>

#include <csetjmp>
#include <cstdio> // before jpeglib.h, which uses FILE and size_t
#include <jpeglib.h>
#include <turbojpeg.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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

/* ---- headers ------------------------------------------------------------------------- */

/// What the decoder needs from a header, beyond image_info.
struct header {
    image_info info;
    unsigned mcu_width = 8;  ///< JPEG: the MCU's size in pixels (8 x the largest sampling factor)
    unsigned mcu_height = 8;
    unsigned png_color_type = 0;
    unsigned png_bit_depth = 8;
};

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

inline header read_header(std::span<const std::byte> bytes, std::string_view key, std::string_view where)
{
    const std::span<const std::uint8_t> b(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    if (b.empty()) throw image_error(errc::zero_size, key, where, "the input has no bytes");
    if (b.size() >= 2 && b[0] == 0xFF && b[1] == 0xD8) return read_jpeg_header(b, key, where);
    if (b.size() >= 8 && std::memcmp(b.data(), png_signature, 8) == 0) return read_png_header(b, key, where);
    if (b.size() < 8 && std::memcmp(b.data(), png_signature, b.size()) == 0)
        throw image_error(errc::truncated, key, where, "PNG: the data end inside the signature");
    throw image_error(errc::not_an_image, key, where,
                      "the first bytes are neither a JPEG (FF D8) nor a PNG signature (" + std::to_string(b.size()) + " bytes in all)");
}

/* ---- per-thread codec state ------------------------------------------------------------ */

/// Scratch memory that grows and is not zeroed (decoded pixels overwrite it whole).
struct scratch {
    std::unique_ptr<std::uint8_t[]> data;
    std::size_t capacity = 0;
    std::uint8_t* get(std::size_t n)
    {
        if (n > capacity) {
            data.reset(new std::uint8_t[n]);
            capacity = n;
        }
        return data.get();
    }
    // A huge image once must not pin its memory in every pool thread for good.
    void trim() noexcept
    {
        if (capacity > (std::size_t{64} << 20)) {
            data.reset();
            capacity = 0;
        }
    }
};

/// One TurboJPEG decompressor and transformer per thread (a handle is not thread-safe).
struct codec_state {
    tjhandle decompressor = nullptr;
    tjhandle transformer = nullptr;
    scratch pixels;   // a whole (scaled) decode, before crop and resize
    scratch convert;  // PNG colour conversion
    codec_state() = default;
    codec_state(const codec_state&) = delete;
    codec_state& operator=(const codec_state&) = delete;
    ~codec_state()
    {
        if (decompressor) tjDestroy(decompressor);
        if (transformer) tjDestroy(transformer);
    }
};

inline codec_state& thread_state()
{
    thread_local codec_state s;
    return s;
}

inline tjhandle decompressor(std::string_view key, std::string_view where)
{
    auto& s = thread_state();
    if (!s.decompressor) s.decompressor = tjInitDecompress();
    if (!s.decompressor) throw image_error(errc::unsupported, key, where, std::string("TurboJPEG: cannot create a decompressor: ") + tjGetErrorStr2(nullptr));
    return s.decompressor;
}

inline tjhandle transformer(std::string_view key, std::string_view where)
{
    auto& s = thread_state();
    if (!s.transformer) s.transformer = tjInitTransform();
    if (!s.transformer) throw image_error(errc::unsupported, key, where, std::string("TurboJPEG: cannot create a transformer: ") + tjGetErrorStr2(nullptr));
    return s.transformer;
}

/// The errc of a TurboJPEG failure, from its message (TurboJPEG 2.1 gives no finer code).
inline errc classify_tj(std::string_view msg) noexcept
{
    // "Premature end of JPEG file", and "Corrupt JPEG data: premature end of data segment"
    // (the scan data ran out before the image did).
    if (msg.find("remature end") != std::string_view::npos) return errc::truncated;
    if (msg.find("Unsupported") != std::string_view::npos || msg.find("precision") != std::string_view::npos ||
        msg.find("not supported") != std::string_view::npos)
        return errc::unsupported;
    if (msg.find("Maximum supported image dimension") != std::string_view::npos) return errc::too_large;
    return errc::corrupt;
}

/* A TurboJPEG call returned -1: an error, or (lenient mode, no TJFLAG_STOPONWARNING) a
   warning after which the output is complete as the codec recovered it. */
inline void check_tj(tjhandle h, const decode_options& opts, const decode_context& ctx, const char* what)
{
    const std::string msg = tjGetErrorStr2(h);
    if (!opts.strict && tjGetErrorCode(h) == TJERR_WARNING) {
        if (ctx.stats) ctx.stats->warnings.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    throw image_error(classify_tj(msg), ctx.key, ctx.where, std::string("TurboJPEG ") + what + ": " + msg);
}

/* ---- geometry ---------------------------------------------------------------------------- */

/// Everything about one decode that does not depend on the pixels.
struct plan {
    header hdr;
    crop_rect crop;        // in the image's pixels
    extent out;            // output size
    unsigned channels = 3;
    bool flip = false;
    bool resize = false;   // out differs from the crop's size
};

inline void check_options(const decode_options& o, const decode_context& ctx)
{
    auto bad = [&](std::string d) { return image_error(errc::bad_options, ctx.key, ctx.where, std::move(d)); };
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

inline plan make_plan(std::span<const std::byte> bytes, const decode_options& opts, const decode_context& ctx)
{
    check_options(opts, ctx);
    plan p;
    p.hdr = read_header(bytes, ctx.key, ctx.where);
    const auto& in = p.hdr.info;
    const std::uint64_t pixels = std::uint64_t{in.width} * in.height;
    if (pixels > opts.max_pixels)
        throw image_error(errc::too_large, ctx.key, ctx.where,
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

/// A region of a decoded (scaled) image, in its pixels, fractional.
struct region {
    double left, top, width, height;
};

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

inline resampler& thread_resampler()
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
inline void resample(const std::uint8_t* src, std::uint32_t w, std::uint32_t h, unsigned c, region r, std::uint8_t* dst,
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

inline void flip_rows(std::uint8_t* px, extent e, unsigned c) noexcept
{
    for (std::uint32_t y = 0; y < e.height; ++y) {
        std::uint8_t* row = px + std::size_t{y} * e.width * c;
        for (std::uint32_t a = 0, b = e.width - 1; a < b; ++a, --b)
            for (unsigned k = 0; k < c; ++k) std::swap(row[a * c + k], row[b * c + k]);
    }
}

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
   more than the pixels it saves: random-resized crops of 500x375 JPEGs to 224x224 decoded
   at 0.88x the unscaled rate with every factor allowed, 0.99x with these (conveyor-bench
   decode, 2 runs).*/
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
    tjhandle tj = decompressor(ctx.key, ctx.where);
    const std::uint32_t sw = scaled(w, f), sh = scaled(h, f);
    const int flags = opts.strict ? TJFLAG_STOPONWARNING : 0;
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

/* ---- JPEG, region only (libjpeg API) ------------------------------------------------------- */

/* libjpeg reports errors by calling error_exit, which must not return: it longjmps back
   to the setjmp in region_decode. Warnings come to emit_message(-1), which in strict mode
   longjmps too (as TurboJPEG's TJFLAG_STOPONWARNING does). */
struct jpeg_errors {
    jpeg_error_mgr pub;
    std::jmp_buf jump;
    bool strict = true;
    int warnings = 0;
    bool warning_stop = false;
    char message[JMSG_LENGTH_MAX] = {};
};

extern "C" inline void conveyor_jpeg_error_exit(j_common_ptr cinfo)
{
    auto* e = reinterpret_cast<jpeg_errors*>(cinfo->err);
    (*cinfo->err->format_message)(cinfo, e->message);
    std::longjmp(e->jump, 1);
}

extern "C" inline void conveyor_jpeg_emit_message(j_common_ptr cinfo, int level)
{
    if (level >= 0) return; // trace messages
    auto* e = reinterpret_cast<jpeg_errors*>(cinfo->err);
    ++e->warnings;
    if (e->strict) {
        (*cinfo->err->format_message)(cinfo, e->message);
        e->warning_stop = true;
        std::longjmp(e->jump, 1);
    }
}

extern "C" inline void conveyor_jpeg_output_message(j_common_ptr) {}

/// A libjpeg decompressor per thread, reused image after image (jpeg_abort_decompress).
struct jpeg_state {
    jpeg_decompress_struct cinfo{};
    jpeg_errors err;
    bool ready = false;
    jpeg_state() = default;
    jpeg_state(const jpeg_state&) = delete;
    jpeg_state& operator=(const jpeg_state&) = delete;
    ~jpeg_state()
    {
        if (ready) jpeg_destroy_decompress(&cinfo);
    }
};

inline jpeg_state& thread_jpeg()
{
    thread_local jpeg_state s;
    if (!s.ready) {
        s.cinfo.err = jpeg_std_error(&s.err.pub);
        s.err.pub.error_exit = conveyor_jpeg_error_exit;
        s.err.pub.emit_message = conveyor_jpeg_emit_message;
        s.err.pub.output_message = conveyor_jpeg_output_message;
        if (setjmp(s.err.jump) != 0) throw std::bad_alloc(); // jpeg_create_decompress ran out of memory
        jpeg_create_decompress(&s.cinfo);
        s.ready = true;
    }
    return s;
}

/// What region_decode produced: the rows and columns it decoded, in scaled pixels.
struct region_result {
    unsigned x = 0, y = 0, width = 0, height = 0; // of the scaled image
    int failed = 0;                                // 0, or 1 with the message in the error manager
};

/* Decodes rows [y0, y1) and columns covering [x0, x1) of `jpeg` scaled by 1/denom into the
   scratch buffer. Only plain data live in this frame: a longjmp out of libjpeg skips no
   destructor. */
inline region_result region_decode(jpeg_state& js, const std::uint8_t* data, std::size_t size, unsigned denom, J_COLOR_SPACE cs,
                                   unsigned channels, unsigned x0, unsigned x1, unsigned y0, unsigned y1, scratch& out,
                                   std::uint8_t** pixels)
{
    region_result r;
    auto& cinfo = js.cinfo;
    if (setjmp(js.err.jump) != 0) {
        jpeg_abort_decompress(&cinfo);
        r.failed = 1;
        return r;
    }
    jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
    jpeg_read_header(&cinfo, TRUE);
    cinfo.out_color_space = cs;
    cinfo.scale_num = 1;
    cinfo.scale_denom = denom;
    cinfo.dct_method = JDCT_ISLOW; // TurboJPEG's default, so both paths give the same pixels
    cinfo.do_fancy_upsampling = TRUE;
    jpeg_start_decompress(&cinfo);
    x1 = std::min<unsigned>(x1, cinfo.output_width);
    y1 = std::min<unsigned>(y1, cinfo.output_height);
    JDIMENSION xoff = x0, width = x1 - x0;
    if (width < cinfo.output_width) jpeg_crop_scanline(&cinfo, &xoff, &width); // widened to iMCU columns
    if (y0 > 0) jpeg_skip_scanlines(&cinfo, y0);
    const std::size_t row = std::size_t{width} * channels;
    std::uint8_t* px = out.get(row * (y1 - y0));
    *pixels = px;
    while (cinfo.output_scanline < y1) {
        JSAMPROW rows[1] = {px + std::size_t{cinfo.output_scanline - y0} * row};
        jpeg_read_scanlines(&cinfo, rows, 1);
    }
    jpeg_abort_decompress(&cinfo); // the rows below the crop are not needed
    r = {xoff, y0, width, y1 - y0, 0};
    return r;
}

inline void jpeg_decode_cropped(std::span<const std::uint8_t> b, const plan& p, const decode_options& opts, const decode_context& ctx,
                                tjscalingfactor f, std::uint8_t* dst)
{
    auto& js = thread_jpeg();
    js.err.strict = opts.strict;
    js.err.warnings = 0;
    js.err.warning_stop = false;
    const double s = double(f.num) / f.denom;
    // A margin around the crop: libjpeg's fancy (triangle) chroma upsampling reads one
    // chroma sample beyond each edge of what it decodes, which at a region's edge is
    // replicated, not read; with 4 pixels to spare the crop's own pixels are exact.
    constexpr unsigned margin = 4;
    const auto fx0 = static_cast<unsigned>(std::floor(p.crop.left * s)), fy0 = static_cast<unsigned>(std::floor(p.crop.top * s));
    const unsigned x0 = fx0 > margin ? fx0 - margin : 0, y0 = fy0 > margin ? fy0 - margin : 0;
    const auto x1 = static_cast<unsigned>(std::ceil((p.crop.left + p.crop.width) * s)) + margin;
    const auto y1 = static_cast<unsigned>(std::ceil((p.crop.top + p.crop.height) * s)) + margin;
    const J_COLOR_SPACE cs = opts.format == pixel_format::gray ? JCS_GRAYSCALE : opts.format == pixel_format::bgr ? JCS_EXT_BGR : JCS_EXT_RGB;
    auto& st = thread_state();
    std::uint8_t* px = nullptr;
    const auto r = region_decode(js, b.data(), b.size(), static_cast<unsigned>(f.denom), cs, p.channels, x0, x1, y0, y1, st.pixels, &px);
    if (r.failed) {
        const std::string msg = js.err.message;
        throw image_error(js.err.warning_stop ? (classify_tj(msg) == errc::truncated ? errc::truncated : errc::corrupt) : classify_tj(msg),
                          ctx.key, ctx.where, "libjpeg: " + msg);
    }
    if (js.err.warnings && ctx.stats) ctx.stats->warnings.fetch_add(1, std::memory_order_relaxed);
    resample(px, r.width, r.height, p.channels,
             {p.crop.left * s - r.x, p.crop.top * s - r.y, p.crop.width * s, p.crop.height * s}, dst, p.out, ctx);
    st.pixels.trim();
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

inline void jpeg_decode(std::span<const std::uint8_t> b, const plan& p, const decode_options& opts, const decode_context& ctx, std::uint8_t* dst)
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
    tjhandle tx = transformer(ctx.key, ctx.where);
    if (tjTransform(tx, b.data(), b.size(), 1, &cut.data, &cut.size, &t, opts.strict ? TJFLAG_STOPONWARNING : 0) != 0)
        check_tj(tx, opts, ctx, "crop");
    const region inner{crop.left - ax, crop.top - ay, crop.width, crop.height};
    const auto f = pick_factor(crop.width, crop.height, p.out, fit && opts.dct_scaling);
    jpeg_decode_region({cut.data, cut.size}, aw, ah, inner, f, p, opts, ctx, dst);
}

/* ---- PNG --------------------------------------------------------------------------------- */

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

inline void png_decode(std::span<const std::uint8_t> b, const plan& p, const decode_options& opts, const decode_context& ctx, std::uint8_t* dst)
{
    std::unique_ptr<spng_ctx, spng_deleter> c(spng_ctx_new(0));
    if (!c) throw image_error(errc::too_large, ctx.key, ctx.where, "libspng: cannot create a context");
    auto check = [&](int rc, const char* what) {
        if (rc != 0) throw image_error(classify_spng(rc), ctx.key, ctx.where, std::string("libspng ") + what + ": " + spng_strerror(rc));
    };
    const auto w = p.hdr.info.width, h = p.hdr.info.height;
    check(spng_set_image_limits(c.get(), std::max<std::uint32_t>(w, 1), std::max<std::uint32_t>(h, 1)), "limits");
    check(spng_set_chunk_limits(c.get(), std::size_t{64} << 20, std::size_t{64} << 20), "limits");
    check(spng_set_png_buffer(c.get(), b.data(), b.size()), "input");
    const bool gray_direct = opts.format == pixel_format::gray && p.hdr.png_color_type == 0 && p.hdr.png_bit_depth <= 8;
    const int fmt = gray_direct ? SPNG_FMT_G8 : SPNG_FMT_RGB8;
    const unsigned dc = gray_direct ? 1 : 3;
    std::size_t len = 0;
    check(spng_decoded_image_size(c.get(), fmt, &len), "header");
    if (len != std::size_t{w} * h * dc) throw image_error(errc::corrupt, ctx.key, ctx.where, "libspng: unexpected decoded size");
    auto& s = thread_state();
    const bool direct = !p.resize && p.crop.width == w && p.crop.height == h && dc == p.channels && opts.format != pixel_format::bgr;
    std::uint8_t* px = direct ? dst : s.pixels.get(len);
    check(spng_decode_image(c.get(), px, len, fmt, 0), "decode");
    // The chunks after the image data, to IEND: a PNG cut after its pixels is still cut.
    check(spng_decode_chunks(c.get()), "trailing chunks");
    if (direct) return;
    std::uint8_t* conv = px;
    if (opts.format == pixel_format::bgr) {
        for (std::size_t i = 0; i < len; i += 3) std::swap(px[i], px[i + 2]);
    } else if (opts.format == pixel_format::gray && !gray_direct) {
        // ITU-R BT.601 luma in 16-bit fixed point, rounded (PIL's "L").
        conv = s.convert.get(std::size_t{w} * h);
        for (std::size_t i = 0, o = 0; i < len; i += 3, ++o)
            conv[o] = static_cast<std::uint8_t>((px[i] * 19595u + px[i + 1] * 38470u + px[i + 2] * 7471u + 0x8000u) >> 16);
    }
    resample(conv, w, h, p.channels, {double(p.crop.left), double(p.crop.top), double(p.crop.width), double(p.crop.height)}, dst, p.out, ctx);
    s.pixels.trim();
    s.convert.trim();
}

inline void decode_planned(std::span<const std::byte> bytes, const plan& p, const decode_options& opts, const decode_context& ctx,
                           std::uint8_t* dst)
{
    const std::span<const std::uint8_t> b(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    if (p.hdr.info.kind == image_kind::jpeg) jpeg_decode(b, p, opts, ctx, dst);
    else png_decode(b, p, opts, ctx, dst);
    if (p.flip) flip_rows(dst, p.out, p.channels);
    if (ctx.stats) ctx.stats->decoded.fetch_add(1, std::memory_order_relaxed);
}

} // namespace detail

/* ---- randomness and crops ---------------------------------------------------------------- */

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

/* ---- decoder ---------------------------------------------------------------------------- */

CONVEYOR_DECL image_info decoder::info(std::span<const std::byte> bytes, const decode_context& ctx) const
{
    return detail::read_header(bytes, ctx.key, ctx.where).info;
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
        throw detail::image_error(errc::bad_options, ctx.key, ctx.where, "decode_into needs a fixed output size (decode_options::size)");
    const std::size_t need = std::size_t{opts.size.width} * opts.size.height * channels_of(opts.format);
    if (out.size() != need)
        throw detail::image_error(errc::bad_options, ctx.key, ctx.where,
                                  "decode_into: the output holds " + std::to_string(out.size()) + " bytes, " +
                                      std::to_string(opts.size.width) + "x" + std::to_string(opts.size.height) + "x" +
                                      std::to_string(channels_of(opts.format)) + " needs " + std::to_string(need));
    const auto p = detail::make_plan(bytes, opts, ctx);
    detail::decode_planned(bytes, p, opts, ctx, out.data());
}

} // namespace conveyor::image

#endif
