// Tests of conveyor/image/decode.hpp on WebP and AVIF: images made here with libwebp's and
// libavif's encoders, decoded against the libraries' own decodes (libwebp's WebPDecodeRGB;
// for AVIF, what Pillow's AVIF plugin calls: avifDecoderParse, avifDecoderNextImage,
// avifImageYUVToRGB to 8-bit RGB or RGBA), through every path: info, output_size, decode,
// decode_into, crops with and without resize, flips, every pixel format; animations and
// image sequences (the first frame); and bad input (cut, damaged, lying headers, the pixel
// limit). The comparison with PIL's own decode, crop and resize is tests/image/pil_compare.py.
#include "support.hpp"
#include "../support/common.hpp"

#include <conveyor/image/decode.hpp>

#include <doctest/doctest.h>

#if CONVEYOR_WITH_WEBP
#include <webp/decode.h>
#include <webp/encode.h>
#include <webp/mux.h>
#endif
#if CONVEYOR_WITH_AVIF
#include <avif/avif.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace image = conveyor::image;
using namespace conveyor_test_image;

namespace webp_avif_test {

/// A picture of `w` x `h` pixels with `channels` (3, or 4 with an alpha that varies, fully
/// transparent and opaque parts included).
inline std::vector<std::uint8_t> picture(std::uint32_t w, std::uint32_t h, unsigned channels)
{
    const auto rgb = block_picture(w, h);
    if (channels == 3) return rgb;
    std::vector<std::uint8_t> px(std::size_t{w} * h * 4);
    for (std::size_t i = 0; i < std::size_t{w} * h; ++i) {
        std::memcpy(&px[i * 4], &rgb[i * 3], 3);
        const std::uint32_t x = i % w, y = std::uint32_t(i / w);
        px[i * 4 + 3] = x < w / 4 ? 0 : x > 3 * w / 4 ? 255 : std::uint8_t((x * 7 + y * 3) & 0xFF);
    }
    return px;
}

inline std::vector<std::byte> bytes_of(const std::uint8_t* p, std::size_t n)
{
    const auto* b = reinterpret_cast<const std::byte*>(p);
    return {b, b + n};
}

/// An image as the reference decoder gives it, RGB, HWC.
struct reference {
    std::uint32_t width = 0, height = 0;
    std::vector<std::uint8_t> rgb;
    std::uint8_t at(std::uint32_t y, std::uint32_t x, unsigned c) const { return rgb[(std::size_t{y} * width + x) * 3 + c]; }
};

/// The largest difference between `img` (RGB) and region (top, left) of `ref`.
inline int max_difference(const image::decoded_image& img, const reference& ref, std::uint32_t top = 0, std::uint32_t left = 0)
{
    REQUIRE(img.channels == 3);
    REQUIRE(top + img.height <= ref.height);
    REQUIRE(left + img.width <= ref.width);
    int d = 0;
    for (std::uint32_t y = 0; y < img.height; ++y)
        for (std::uint32_t x = 0; x < img.width; ++x)
            for (unsigned c = 0; c < 3; ++c) d = std::max(d, std::abs(int(img.at(y, x, c)) - int(ref.at(top + y, left + x, c))));
    return d;
}

/// Mean absolute difference between `ref` and the source picture `src` (3 or 4 channels),
/// over the pixels that are not fully transparent (encoders may change the colour of those).
inline double mean_from_source(const reference& ref, const std::vector<std::uint8_t>& src, unsigned channels)
{
    double sum = 0;
    std::size_t n = 0;
    for (std::size_t i = 0; i < std::size_t{ref.width} * ref.height; ++i) {
        if (channels == 4 && src[i * 4 + 3] == 0) continue;
        for (unsigned c = 0; c < 3; ++c) sum += std::abs(int(ref.rgb[i * 3 + c]) - int(src[i * channels + c]));
        n += 3;
    }
    return n ? sum / double(n) : 0.0;
}

/// PIL's "L" of RGB.
inline std::uint8_t luma(const reference& r, std::uint32_t y, std::uint32_t x)
{
    return std::uint8_t((r.at(y, x, 0) * 19595u + r.at(y, x, 1) * 38470u + r.at(y, x, 2) * 7471u + 0x8000u) >> 16);
}

/// Checks every path of the decoder on `bytes` against `ref`, which the pixels of the whole
/// decode must equal exactly, as must a crop's (without resize) the same region of `ref`.
inline void check_against(const std::vector<std::byte>& bytes, const reference& ref, image::image_kind kind, const char* what)
{
    const std::string name = what;
    CAPTURE(name);
    const image::decoder dec;
    const image::decode_context ctx{.key = what, .origin = "test://codecs"};
    const auto info = dec.info(bytes, ctx);
    CHECK(info.kind == kind);
    CHECK(info.width == ref.width);
    CHECK(info.height == ref.height);
    const auto whole = dec.decode(bytes, {}, ctx);
    REQUIRE(whole.width == ref.width);
    REQUIRE(whole.height == ref.height);
    CHECK(max_difference(whole, ref) == 0);
    // BGR and grey.
    const auto bgr = dec.decode(bytes, {.format = image::pixel_format::bgr}, ctx);
    const auto gray = dec.decode(bytes, {.format = image::pixel_format::gray}, ctx);
    bool swapped = true, luma_ok = true;
    for (std::uint32_t y = 0; y < ref.height; ++y)
        for (std::uint32_t x = 0; x < ref.width; ++x) {
            swapped = swapped && bgr.at(y, x, 0) == ref.at(y, x, 2) && bgr.at(y, x, 1) == ref.at(y, x, 1) && bgr.at(y, x, 2) == ref.at(y, x, 0);
            luma_ok = luma_ok && gray.at(y, x) == luma(ref, y, x);
        }
    CHECK(swapped);
    CHECK(gray.channels == 1);
    CHECK(luma_ok);
    // Crops without resize: exactly the reference's region, at odd and even corners.
    for (int k = 0; k < 12; ++k) {
        const std::string key = std::string(what) + "/" + std::to_string(k);
        const image::decode_options o{.crop = image::crop_mode::random_resized, .scale = {0.05, 0.6}, .seed = 3};
        const image::decode_context c{.key = key};
        const auto r = image::crop_for(ref.height, ref.width, o, c);
        const auto img = dec.decode(bytes, o, c);
        CAPTURE(key);
        CHECK(img.width == r.width);
        CHECK(max_difference(img, ref, std::uint32_t(r.top), std::uint32_t(r.left)) == 0);
        // The same crop resized, flipped, into a batch slot: decode_into equals decode.
        image::decode_options ro = o;
        ro.size = {24, 20};
        ro.flip = 0.5;
        const auto resized = dec.decode(bytes, ro, c);
        std::vector<std::uint8_t> slot(24 * 20 * 3);
        dec.decode_into(bytes, ro, c, slot);
        CHECK(std::equal(slot.begin(), slot.end(), resized.data().begin(), resized.data().end()));
        CHECK(dec.output_size(bytes, ro, c) == image::extent{24, 20});
    }
    const auto flipped = dec.decode(bytes, {.flip = 1.0}, ctx);
    CHECK(flipped.at(0, 0, 0) == ref.at(0, ref.width - 1, 0));
}

/// The code of the conveyor::error that decoding `bytes` throws (empty: it decoded).
inline std::error_code error_of(const std::vector<std::byte>& bytes, image::decode_options o = {}, std::string* message = nullptr)
{
    try {
        (void)image::decoder{}.decode(bytes, o, {.key = "bad/sample", .origin = "/data/shard-7.tar"});
    } catch (const conveyor::error& e) {
        const std::string w = e.what();
        CHECK(w.find("bad/sample") != std::string::npos);
        CHECK(w.find("/data/shard-7.tar") != std::string::npos);
        if (message) *message = w;
        return e.code();
    }
    return {};
}

/// Every cut of `bytes` at `steps` places (and in the first 40 bytes at every byte) is
/// truncated, once it holds the 5 bytes that tell the format (4 of the RIFF signature for
/// WebP; a box size and the first letter of "ftyp" for AVIF).
inline void check_cuts(const std::vector<std::byte>& bytes, const char* what)
{
    const std::string name = what;
    CAPTURE(name);
    for (std::size_t n = 1; n < bytes.size(); n += (n < 40 ? 1 : std::max<std::size_t>(1, bytes.size() / 23))) {
        const std::vector<std::byte> cut(bytes.begin(), bytes.begin() + std::ptrdiff_t(n));
        std::string m;
        const auto ec = error_of(cut, {}, &m);
        CAPTURE(n);
        CAPTURE(m);
        if (n < 5) CHECK((ec == image::errc::truncated || ec == image::errc::not_an_image));
        else CHECK(ec == image::errc::truncated);
    }
}

/// Random damage: an image or an image error, never a crash or another exception.
inline void check_damage(const std::vector<std::byte>& original, std::uint64_t seed)
{
    const image::decoder dec;
    int decoded = 0, failed = 0;
    for (int round = 0; round < 120; ++round) {
        auto bytes = original;
        const int flips = 1 + int(mix(++seed) % 6);
        for (int f = 0; f < flips; ++f) {
            const auto at = 16 + mix(++seed) % (bytes.size() - 16);
            bytes[at] = std::byte(mix(++seed) & 0xFF);
        }
        if (round % 4 == 0) bytes.resize(16 + mix(++seed) % (bytes.size() - 16));
        const image::decode_options o{.format = static_cast<image::pixel_format>(round % 3), .size = {16, 16},
                                      .crop = static_cast<image::crop_mode>(round % 3), .max_pixels = 1 << 20};
        try {
            const auto img = dec.decode(bytes, o, {.key = "damaged"});
            CHECK(img.width == 16);
            ++decoded;
        } catch (const conveyor::error& e) {
            CHECK(std::string(e.code().category().name()) == "conveyor.image");
            ++failed;
        }
    }
    MESSAGE("damaged: " << decoded << " decoded, " << failed << " failed");
}

#if CONVEYOR_WITH_WEBP

inline std::vector<std::byte> make_webp(std::uint32_t w, std::uint32_t h, unsigned channels, bool lossless, float quality = 85)
{
    const auto px = picture(w, h, channels);
    std::uint8_t* out = nullptr;
    const int stride = int(w * channels);
    std::size_t n = 0;
    if (lossless) n = channels == 4 ? WebPEncodeLosslessRGBA(px.data(), int(w), int(h), stride, &out)
                                    : WebPEncodeLosslessRGB(px.data(), int(w), int(h), stride, &out);
    else n = channels == 4 ? WebPEncodeRGBA(px.data(), int(w), int(h), stride, quality, &out)
                           : WebPEncodeRGB(px.data(), int(w), int(h), stride, quality, &out);
    REQUIRE(n > 0);
    auto b = bytes_of(out, n);
    WebPFree(out);
    return b;
}

/// libwebp's own decode: WebPDecodeRGB.
inline reference webp_reference(const std::vector<std::byte>& bytes)
{
    reference r;
    int w = 0, h = 0;
    std::uint8_t* px = WebPDecodeRGB(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(), &w, &h);
    REQUIRE(px != nullptr);
    r.width = std::uint32_t(w);
    r.height = std::uint32_t(h);
    r.rgb.assign(px, px + std::size_t(w) * h * 3);
    WebPFree(px);
    return r;
}

/// An animation on a `cw` x `ch` canvas: a first frame of `fw` x `fh` at (fx, fy) (even
/// offsets, as WebP requires), lossless, then a whole-canvas frame of other pixels.
inline std::vector<std::byte> make_animation(int cw, int ch, int fx, int fy, int fw, int fh)
{
    WebPMux* mux = WebPMuxNew();
    REQUIRE(mux != nullptr);
    REQUIRE(WebPMuxSetCanvasSize(mux, cw, ch) == WEBP_MUX_OK);
    const WebPMuxAnimParams params{0xFF000000u, 0};
    REQUIRE(WebPMuxSetAnimationParams(mux, &params) == WEBP_MUX_OK);
    std::vector<std::vector<std::byte>> keep;
    keep.push_back(make_webp(std::uint32_t(fw), std::uint32_t(fh), 3, true));
    keep.push_back(make_webp(std::uint32_t(cw), std::uint32_t(ch), 4, false, 50));
    const int at[2][2] = {{fx, fy}, {0, 0}};
    for (int i = 0; i < 2; ++i) {
        WebPMuxFrameInfo f{};
        f.bitstream.bytes = reinterpret_cast<const std::uint8_t*>(keep[std::size_t(i)].data());
        f.bitstream.size = keep[std::size_t(i)].size();
        f.x_offset = at[i][0];
        f.y_offset = at[i][1];
        f.duration = 100;
        f.id = WEBP_CHUNK_ANMF;
        f.dispose_method = WEBP_MUX_DISPOSE_NONE;
        f.blend_method = WEBP_MUX_NO_BLEND;
        REQUIRE(WebPMuxPushFrame(mux, &f, 1) == WEBP_MUX_OK);
    }
    WebPData out;
    WebPDataInit(&out);
    REQUIRE(WebPMuxAssemble(mux, &out) == WEBP_MUX_OK);
    auto b = bytes_of(out.bytes, out.size);
    WebPDataClear(&out);
    WebPMuxDelete(mux);
    return b;
}

#endif

#if CONVEYOR_WITH_AVIF

struct avif_spec {
    std::uint32_t width = 96, height = 64;
    std::uint32_t depth = 8;
    avifPixelFormat yuv = AVIF_PIXEL_FORMAT_YUV420;
    bool alpha = false;
    bool premultiplied = false;
    int quantizer = 10;
    int frames = 1;
};

/// `s` encoded by libavif (libaom), fastest speed; frame i > 0 shows the picture shifted.
inline std::vector<std::byte> make_avif(const avif_spec& s)
{
    avifEncoder* e = avifEncoderCreate();
    REQUIRE(e != nullptr);
    e->speed = AVIF_SPEED_FASTEST;
    e->maxThreads = 1;
    e->minQuantizer = e->maxQuantizer = s.quantizer;
    e->minQuantizerAlpha = e->maxQuantizerAlpha = s.quantizer;
    std::vector<avifImage*> images;
    const unsigned ch = s.alpha ? 4 : 3;
    for (int f = 0; f < s.frames; ++f) {
        avifImage* im = avifImageCreate(s.width, s.height, s.depth, s.yuv);
        REQUIRE(im != nullptr);
        im->alphaPremultiplied = s.premultiplied ? AVIF_TRUE : AVIF_FALSE;
        auto px = picture(s.width + std::uint32_t(f) * 16, s.height, ch);
        avifRGBImage rgb;
        avifRGBImageSetDefaults(&rgb, im);
        rgb.depth = 8;
        rgb.format = s.alpha ? AVIF_RGB_FORMAT_RGBA : AVIF_RGB_FORMAT_RGB;
        rgb.pixels = px.data() + std::size_t(f) * 16 * ch;
        rgb.rowBytes = (s.width + std::uint32_t(f) * 16) * ch;
        REQUIRE(avifImageRGBToYUV(im, &rgb) == AVIF_RESULT_OK);
        images.push_back(im);
    }
    avifRWData out = AVIF_DATA_EMPTY;
    if (s.frames == 1) {
        REQUIRE(avifEncoderWrite(e, images[0], &out) == AVIF_RESULT_OK);
    } else {
        for (auto* im : images) REQUIRE(avifEncoderAddImage(e, im, 1, AVIF_ADD_IMAGE_FLAG_NONE) == AVIF_RESULT_OK);
        REQUIRE(avifEncoderFinish(e, &out) == AVIF_RESULT_OK);
    }
    auto b = bytes_of(out.data, out.size);
    avifRWDataFree(&out);
    for (auto* im : images) avifImageDestroy(im);
    avifEncoderDestroy(e);
    return b;
}

/// Frame `frame` as Pillow's AVIF plugin reads it: its decoder settings, avifImageYUVToRGB
/// to 8 bits, RGBA when there is alpha (then dropped by convert("RGB")), RGB otherwise.
inline reference avif_reference(const std::vector<std::byte>& bytes, std::uint32_t frame = 0, bool as_pillow = true)
{
    avifDecoder* d = avifDecoderCreate();
    REQUIRE(d != nullptr);
    d->strictFlags &= ~static_cast<avifStrictFlags>(AVIF_STRICT_CLAP_VALID | AVIF_STRICT_PIXI_REQUIRED);
    REQUIRE(avifDecoderSetIOMemory(d, reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()) == AVIF_RESULT_OK);
    REQUIRE(avifDecoderParse(d) == AVIF_RESULT_OK);
    REQUIRE(avifDecoderNthImage(d, frame) == AVIF_RESULT_OK);
    avifRGBImage rgb;
    avifRGBImageSetDefaults(&rgb, d->image);
    rgb.depth = 8;
    const bool alpha = as_pillow && d->alphaPresent;
    rgb.format = alpha ? AVIF_RGB_FORMAT_RGBA : AVIF_RGB_FORMAT_RGB;
    avifRGBImageAllocatePixels(&rgb);
    REQUIRE(avifImageYUVToRGB(d->image, &rgb) == AVIF_RESULT_OK);
    reference r;
    r.width = rgb.width;
    r.height = rgb.height;
    r.rgb.resize(std::size_t{r.width} * r.height * 3);
    const unsigned c = alpha ? 4 : 3;
    for (std::uint32_t y = 0; y < r.height; ++y)
        for (std::uint32_t x = 0; x < r.width; ++x)
            std::memcpy(&r.rgb[(std::size_t{y} * r.width + x) * 3], rgb.pixels + std::size_t{y} * rgb.rowBytes + x * c, 3);
    avifRGBImageFreePixels(&rgb);
    avifDecoderDestroy(d);
    return r;
}

/// Calls `edit(width_at, height_at)` on each `ispe` property of `avif` (4 bytes each, big-endian).
template <class F>
void patch_ispe(std::vector<std::byte>& avif, F edit)
{
    int found = 0;
    for (std::size_t i = 0; i + 16 <= avif.size(); ++i)
        if (std::memcmp(&avif[i], "ispe", 4) == 0) {
            edit(&avif[i + 8], &avif[i + 12]); // after the type: version and flags, then width, height
            ++found;
        }
    REQUIRE(found > 0);
}

inline void put_be32(std::byte* p, std::uint32_t v)
{
    for (int s = 0; s < 4; ++s) p[s] = std::byte((v >> (24 - 8 * s)) & 0xFF);
}

#endif

} // namespace webp_avif_test

using namespace webp_avif_test;

TEST_CASE("WebP and AVIF are told apart from other files by their bytes")
{
    const image::decoder dec;
    auto code = [&](std::string text) -> std::error_code {
        const auto b = bytes_of(reinterpret_cast<const std::uint8_t*>(text.data()), text.size());
        try {
            (void)dec.info(b);
        } catch (const conveyor::error& e) {
            return e.code();
        }
        return {};
    };
    // A RIFF file of another form (WAVE), an ISO-BMFF file of another brand (HEIC), a RIFF
    // header cut short.
    CHECK(code(std::string("RIFF\x24\0\0\0WAVEfmt ", 16) + std::string(20, '\0')) == image::errc::not_an_image);
    std::string message;
    try {
        const std::string heic = std::string("\0\0\0\x18" "ftypheic\0\0\0\0mif1heic", 24) + std::string(64, '\0');
        (void)dec.info(bytes_of(reinterpret_cast<const std::uint8_t*>(heic.data()), heic.size()));
    } catch (const conveyor::error& e) {
        CHECK(e.code() == image::errc::not_an_image);
        message = e.what();
    }
    CHECK(message.find("brand 'heic'") != std::string::npos);
    CHECK(code("RIFF\x10\0") == image::errc::truncated);
    // The brand may be a compatible one, not the major: AVIF is tried (and its boxes are
    // then found missing), not refused as another format.
    const std::string compat = std::string("\0\0\0\x1c" "ftypmif1\0\0\0\0mif1miafavif", 28);
    const auto ec = code(compat);
#if CONVEYOR_WITH_AVIF
    CHECK((ec == image::errc::truncated || ec == image::errc::corrupt));
#else
    CHECK(ec == image::errc::unsupported);
#endif
}

#if CONVEYOR_WITH_WEBP

TEST_CASE("WebP, lossy and lossless, with and without alpha, decodes as libwebp does through every path")
{
    struct kind {
        const char* name;
        std::uint32_t w, h;
        unsigned channels;
        bool lossless;
    };
    const kind kinds[] = {
        {"lossy", 160, 120, 3, false},     {"lossy, odd size", 97, 61, 3, false}, {"lossy with alpha", 120, 90, 4, false},
        {"lossless", 100, 75, 3, true},    {"lossless with alpha", 64, 129, 4, true}, {"tall lossy", 33, 200, 3, false},
    };
    for (const auto& k : kinds) {
        const auto bytes = make_webp(k.w, k.h, k.channels, k.lossless);
        const auto ref = webp_reference(bytes);
        check_against(bytes, ref, image::image_kind::webp, k.name);
        const auto info = image::decoder{}.info(bytes);
        CHECK(info.components == k.channels);
        // The reference is near the source (a swapped or shifted decode is far from it).
        const double from_source = mean_from_source(ref, picture(k.w, k.h, k.channels), k.channels);
        MESSAGE(std::string(k.name) << ": mean distance from the source picture " << from_source);
        CHECK(from_source <= (k.lossless ? 0.0 : 6.0));
    }
}

TEST_CASE("an animated WebP gives its first frame on the canvas, as PIL composes it")
{
    // Canvas 64x48; the first frame 32x24 at (8, 6), lossless; the second covers the canvas.
    const auto anim = make_animation(64, 48, 8, 6, 32, 24);
    const image::decoder dec;
    const auto info = dec.info(anim);
    CHECK(info.kind == image::image_kind::webp);
    CHECK(info.width == 64);
    CHECK(info.height == 48);
    const auto img = dec.decode(anim, {});
    REQUIRE(img.width == 64);
    const auto frame = picture(32, 24, 3);
    bool inside = true, outside = true;
    for (std::uint32_t y = 0; y < 48; ++y)
        for (std::uint32_t x = 0; x < 64; ++x)
            for (unsigned c = 0; c < 3; ++c) {
                const bool in = x >= 8 && x < 40 && y >= 6 && y < 30;
                if (in) inside = inside && img.at(y, x, c) == frame[((y - 6) * 32 + (x - 8)) * 3 + c];
                else outside = outside && img.at(y, x, c) == 0; // transparent black, its alpha dropped
            }
    CHECK(inside);
    CHECK(outside);
    // Crops, resizes, grey and decode_into go the same way.
    const auto crop = dec.decode(anim, {.crop = image::crop_mode::center, .center_fraction = 0.5});
    CHECK(crop.width == 32);
    std::vector<std::uint8_t> slot(10 * 10);
    dec.decode_into(anim, {.format = image::pixel_format::gray, .size = {10, 10}}, {}, slot);
    CHECK(slot[0] == 0);
    // A canvas that claims 20,000 x 20,000 pixels passes the limit: refused before decoding.
    auto big = anim;
    REQUIRE(std::memcmp(&big[12], "VP8X", 4) == 0);
    for (int at : {24, 27}) { // canvas width - 1 and height - 1, 24-bit little-endian
        const std::uint32_t v = 20000 - 1;
        for (int b = 0; b < 3; ++b) big[std::size_t(at + b)] = std::byte((v >> (8 * b)) & 0xFF);
    }
    std::string m;
    CHECK(error_of(big, {}, &m) == image::errc::too_large);
    CHECK(m.find("max_pixels") != std::string::npos);
}

TEST_CASE("bad WebP input is an error of the right kind, naming the decoder, never a crash")
{
    for (bool lossless : {false, true}) {
        const auto good = make_webp(120, 90, 4, lossless);
        check_cuts(good, lossless ? "lossless WebP" : "lossy WebP");
        check_damage(good, lossless ? 11 : 12);
    }
    std::string m;
    // A VP8 frame without its start code.
    auto bad = make_webp(64, 48, 3, false);
    REQUIRE(std::memcmp(&bad[12], "VP8 ", 4) == 0);
    bad[23] = std::byte{0x00};
    CHECK(error_of(bad, {}, &m) == image::errc::corrupt);
    CHECK(m.find("libwebp") != std::string::npos);
    // Headers claiming 16,383 x 16,383 pixels (lossy) and 16,384 x 16,384 (lossless): over
    // the limit, refused before any pixel memory is taken.
    auto lossy = make_webp(64, 48, 3, false);
    for (int at : {26, 28}) {
        lossy[std::size_t(at)] = std::byte{0xFF};
        lossy[std::size_t(at + 1)] = std::byte{0x3F};
    }
    const auto grew = conveyor_test::resident_growth([&] { CHECK(error_of(lossy, {}, &m) == image::errc::too_large); });
    conveyor_test::check_resident_growth(grew, 16u << 20, "a lossy WebP claiming 16383x16383");
    CHECK(m.find("max_pixels") != std::string::npos);
    auto vp8l = make_webp(64, 48, 3, true);
    REQUIRE(std::memcmp(&vp8l[12], "VP8L", 4) == 0);
    // After the signature byte: 14 bits of width - 1, 14 of height - 1, little-endian.
    vp8l[21] = vp8l[22] = vp8l[23] = std::byte{0xFF};
    vp8l[24] = std::byte(std::uint8_t(vp8l[24]) | 0x0F);
    CHECK(error_of(vp8l) == image::errc::too_large);
    // A smaller lie, within the limit, is found out by libwebp: the data end too soon.
    auto lie = make_webp(64, 48, 3, false);
    lie[26] = std::byte{0xE8}, lie[27] = std::byte{0x03}; // 1000
    lie[28] = std::byte{0xE8}, lie[29] = std::byte{0x03};
    CHECK(error_of(lie, {.size = {8, 8}}, &m) == image::errc::truncated);
}

#endif

#if CONVEYOR_WITH_AVIF

TEST_CASE("AVIF of every depth and chroma subsampling, with and without alpha, decodes as libavif converts it for Pillow")
{
    struct kind {
        const char* name;
        avif_spec spec;
        double source_tolerance;
    };
    const kind kinds[] = {
        {"8-bit 4:2:0", {}, 12.0},
        {"8-bit 4:4:4", {.yuv = AVIF_PIXEL_FORMAT_YUV444}, 6.0},
        {"8-bit 4:2:2, odd size", {.width = 75, .height = 41, .yuv = AVIF_PIXEL_FORMAT_YUV422}, 12.0},
        {"10-bit 4:2:0", {.depth = 10}, 12.0},
        {"12-bit 4:4:4", {.depth = 12, .yuv = AVIF_PIXEL_FORMAT_YUV444}, 6.0},
        {"8-bit 4:2:0 with alpha", {.alpha = true}, 12.0},
        {"10-bit 4:4:4 with premultiplied alpha", {.depth = 10, .yuv = AVIF_PIXEL_FORMAT_YUV444, .alpha = true, .premultiplied = true}, -1},
        {"tall 4:2:0", {.width = 40, .height = 150}, 12.0},
    };
    for (const auto& k : kinds) {
        const auto bytes = make_avif(k.spec);
        const auto ref = avif_reference(bytes);
        check_against(bytes, ref, image::image_kind::avif, k.name);
        const auto info = image::decoder{}.info(bytes);
        CHECK(info.components == (k.spec.alpha ? 4u : 3u));
        if (k.source_tolerance >= 0) {
            const double d = mean_from_source(ref, picture(k.spec.width, k.spec.height, k.spec.alpha ? 4 : 3), k.spec.alpha ? 4 : 3);
            MESSAGE(std::string(k.name) << ": mean distance from the source picture " << d);
            CHECK(d <= k.source_tolerance);
        }
        if (k.spec.premultiplied) {
            // Pillow asks for RGBA, which libavif un-premultiplies; RGB alone would not be.
            const auto plain_rgb = avif_reference(bytes, 0, false);
            CHECK(plain_rgb.rgb != ref.rgb);
        }
    }
    // Monochrome (4:0:0): one component; RGB has three equal channels.
    const auto mono = make_avif({.yuv = AVIF_PIXEL_FORMAT_YUV400});
    CHECK(image::decoder{}.info(mono).components == 1);
    const auto ref = avif_reference(mono);
    check_against(mono, ref, image::image_kind::avif, "4:0:0");
    const auto img = image::decoder{}.decode(mono, {});
    CHECK(img.at(10, 20, 0) == img.at(10, 20, 2));
}

TEST_CASE("an AVIF image sequence gives its first frame")
{
    const auto seq = make_avif({.frames = 2});
    const auto first = avif_reference(seq, 0), second = avif_reference(seq, 1);
    REQUIRE(first.rgb != second.rgb);
    const auto img = image::decoder{}.decode(seq, {});
    CHECK(max_difference(img, first) == 0);
    CHECK(image::decoder{}.info(seq).kind == image::image_kind::avif);
}

TEST_CASE("bad AVIF input is an error of the right kind, naming the decoder, never a crash")
{
    const auto good = make_avif({.width = 120, .height = 90, .alpha = true});
    check_cuts(good, "AVIF");
    check_damage(good, 21);
    std::string m;
    // An ispe of 16,000 x 16,000 pixels: within libavif's limits, over max_pixels; of
    // 40,000 x 40,000: over libavif's own (32,768 a side); of zero rows.
    auto big = good;
    patch_ispe(big, [](std::byte* w, std::byte* h) { put_be32(w, 16000), put_be32(h, 16000); });
    const auto grew = conveyor_test::resident_growth([&] { CHECK(error_of(big, {}, &m) == image::errc::too_large); });
    conveyor_test::check_resident_growth(grew, 16u << 20, "an AVIF claiming 16000x16000");
    CHECK(m.find("max_pixels") != std::string::npos);
    auto huge = good;
    patch_ispe(huge, [](std::byte* w, std::byte* h) { put_be32(w, 40000), put_be32(h, 40000); });
    CHECK(error_of(huge, {}, &m) == image::errc::too_large);
    CHECK(m.find("libavif") != std::string::npos);
    auto empty = good;
    patch_ispe(empty, [](std::byte*, std::byte* h) { put_be32(h, 0); });
    CHECK(error_of(empty) == image::errc::zero_size);
    // An ispe larger than the AV1 frame, within the limit: libavif scales the frame to it
    // (ISO/IEC 23008-12: ispe is the image's size), and so does the decoder.
    auto larger = good;
    patch_ispe(larger, [](std::byte* w, std::byte* h) { put_be32(w, 300), put_be32(h, 200); });
    const auto scaled = image::decoder{}.decode(larger, {});
    CHECK(scaled.width == 300);
    CHECK(max_difference(scaled, avif_reference(larger)) == 0);
    // Damaged AV1 data (the end of the file is the mdat box's).
    auto av1 = good;
    for (std::size_t i = av1.size() - 200; i < av1.size(); ++i) av1[i] = std::byte(mix(i) & 0xFF);
    const auto ec = error_of(av1, {}, &m);
    CAPTURE(m);
    CHECK((ec == image::errc::corrupt || !ec));
}

#endif
