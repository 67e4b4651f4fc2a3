// Tests of conveyor/image/decode.hpp: JPEGs of every subsampling, progressive and grey
// against their PNG references (Go's image test data, in place), PNGs of every colour
// type and depth (PngSuite, in Go's image/png test data), bad input of every kind, the
// random-resized-crop math against torchvision's definition, determinism, flips, and
// decode_into.
#include "support.hpp"
#include "../support/common.hpp"

#include <conveyor/image/decode.hpp>

#include <doctest/doctest.h>

#include <zlib.h>

#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <thread>
#include <string>
#include <utility>
#include <vector>

namespace image = conveyor::image;
namespace fs = std::filesystem;
using namespace conveyor_test_image;

namespace {

const fs::path go_images{CONVEYOR_GO_IMAGE_TESTDATA};
const fs::path go_pngs{CONVEYOR_GO_PNG_TESTDATA};

/// Mean and largest absolute difference of two images of the same shape.
struct difference {
    double mean = 0;
    int max = 0;
};

difference compare(const image::decoded_image& a, const image::decoded_image& b)
{
    REQUIRE(a.width == b.width);
    REQUIRE(a.height == b.height);
    REQUIRE(a.channels == b.channels);
    difference d;
    double sum = 0;
    const auto x = a.data(), y = b.data();
    for (std::size_t i = 0; i < x.size(); ++i) {
        const int e = std::abs(int(x[i]) - int(y[i]));
        sum += e;
        d.max = std::max(d.max, e);
    }
    d.mean = sum / double(x.size());
    return d;
}

image::decoded_image decode_file(const fs::path& p, image::decode_options o = {})
{
    const auto bytes = read_bytes(p);
    return image::decoder{}.decode(bytes, o, {.key = p.filename().string(), .origin = p.string()});
}

} // namespace

TEST_CASE("JPEGs of every subsampling, progressive or not, decode close to their PNG references")
{
    if (!fs::exists(go_images / "video-001.png")) {
        MESSAGE("skipped: Go's image test data are missing (Debian package golang-1.19-src)");
        return;
    }
    struct pair {
        const char* jpeg;
        const char* png;
        double mean_tolerance;
        int max_tolerance;
    };
    // Tolerances from measurement (libjpeg-turbo 2.1.5 against the PNGs that Go's decoder
    // made; mean absolute difference per sample, and the largest, RGB / grey):
    //   same-quality references (plain, progressive, truncated-progressive, 2:2:1/2:1:2):
    //     0.10-0.97 / 0.06-0.80, largest 30 (an edge that the two decoders' chroma
    //     upsampling treats differently);
    //   the 4:2:0 "separate DC" files against the 4:4:4 original: 1.62 / 0.09, largest 73;
    //   the RGB-coded (not YCbCr) JPEG, subsampled: 4.19 / 4.53, largest 94;
    //   the q50 files, a lossier encoding of the same picture: 5.3-7.4 / 4.5-5.0, up to 146.
    // Bounds: about 1.5x what was measured. A mirrored image scores 40+ on the same
    // picture (checked below), so a flip, shift or channel swap cannot pass.
    const pair pairs[] = {
        {"video-001.jpeg", "video-001.png", 1.5, 45},
        {"video-001.progressive.jpeg", "video-001.png", 1.5, 45},
        {"video-001.progressive.truncated.jpeg", "video-001.progressive.truncated.png", 1.5, 45},
        {"video-001.221212.jpeg", "video-001.221212.png", 1.5, 45},
        {"video-001.rgb.jpeg", "video-001.rgb.png", 7.0, 140},
        {"video-001.separate.dc.progression.jpeg", "video-001.png", 2.5, 110},
        {"video-001.separate.dc.progression.progressive.jpeg", "video-001.png", 2.5, 110},
        {"video-001.q50.410.jpeg", "video-001.png", 11.0, 220},
        {"video-001.q50.410.progressive.jpeg", "video-001.png", 11.0, 220},
        {"video-001.q50.411.jpeg", "video-001.png", 11.0, 220},
        {"video-001.q50.411.progressive.jpeg", "video-001.png", 11.0, 220},
        {"video-001.q50.420.jpeg", "video-001.png", 11.0, 220},
        {"video-001.q50.420.progressive.jpeg", "video-001.png", 11.0, 220},
        {"video-001.q50.422.jpeg", "video-001.png", 11.0, 220},
        {"video-001.q50.422.progressive.jpeg", "video-001.png", 11.0, 220},
        {"video-001.q50.440.jpeg", "video-001.png", 11.0, 220},
        {"video-001.q50.440.progressive.jpeg", "video-001.png", 11.0, 220},
        {"video-001.q50.444.jpeg", "video-001.png", 11.0, 220},
        {"video-001.q50.444.progressive.jpeg", "video-001.png", 11.0, 220},
        {"video-005.gray.jpeg", "video-005.gray.png", 1.5, 12},
        {"video-005.gray.q50.jpeg", "video-005.gray.png", 7.0, 70},
        {"video-005.gray.q50.progressive.jpeg", "video-005.gray.png", 7.0, 70},
        {"video-005.gray.q50.2x2.jpeg", "video-005.gray.png", 7.0, 70},
        {"video-005.gray.q50.2x2.progressive.jpeg", "video-005.gray.png", 7.0, 70},
    };
    for (const auto& pr : pairs) {
        const std::string jpeg_name = pr.jpeg;
        CAPTURE(jpeg_name);
        for (auto fmt : {image::pixel_format::rgb, image::pixel_format::gray}) {
            const bool gray_source = std::string(pr.jpeg).find("gray") != std::string::npos;
            if (gray_source && fmt == image::pixel_format::rgb) continue; // compared as grey below
            const auto j = decode_file(go_images / pr.jpeg, {.format = fmt});
            const auto p = decode_file(go_images / pr.png, {.format = fmt});
            CHECK(j.width == 150);
            CHECK(j.height == 103);
            CHECK(j.channels == image::channels_of(fmt));
            const auto d = compare(j, p);
            MESSAGE(std::string(pr.jpeg) << std::string(fmt == image::pixel_format::gray ? " gray" : " rgb") << ": mean " << d.mean << " max " << d.max);
            CHECK(d.mean <= pr.mean_tolerance);
            CHECK(d.max <= pr.max_tolerance);
        }
    }
    // The bounds tell a wrong image from a right one: the mirrored decode is far off.
    const auto mirrored = compare(decode_file(go_images / "video-001.jpeg", {.flip = 1.0}), decode_file(go_images / "video-001.png"));
    MESSAGE("mirrored: mean " << mirrored.mean);
    CHECK(mirrored.mean > 20);
    // A grey JPEG asked for RGB gives three equal channels.
    const auto g = decode_file(go_images / "video-005.gray.jpeg", {.format = image::pixel_format::rgb});
    CHECK(g.channels == 3);
    CHECK(g.at(50, 70, 0) == g.at(50, 70, 1));
    CHECK(g.at(50, 70, 1) == g.at(50, 70, 2));
}

TEST_CASE("BGR is RGB with the channels swapped, for JPEG and PNG")
{
    if (!fs::exists(go_images / "video-001.png")) {
        MESSAGE("skipped: Go's image test data are missing (Debian package golang-1.19-src)");
        return;
    }
    for (const char* name : {"video-001.jpeg", "video-001.png"}) {
        CAPTURE(name);
        const auto rgb = decode_file(go_images / name, {.format = image::pixel_format::rgb});
        const auto bgr = decode_file(go_images / name, {.format = image::pixel_format::bgr});
        REQUIRE(rgb.size_bytes() == bgr.size_bytes());
        bool swapped = true, differs = false;
        for (std::size_t i = 0; i < rgb.size_bytes(); i += 3) {
            swapped = swapped && rgb.data()[i] == bgr.data()[i + 2] && rgb.data()[i + 1] == bgr.data()[i + 1] &&
                      rgb.data()[i + 2] == bgr.data()[i];
            differs = differs || rgb.data()[i] != rgb.data()[i + 2];
        }
        CHECK(swapped);
        CHECK(differs);
    }
}

TEST_CASE("PNGs of every colour type and bit depth decode to RGB, BGR and grey")
{
    if (!fs::exists(go_pngs / "pngsuite" / "basn2c08.png")) {
        MESSAGE("skipped: Go's PngSuite copy is missing (Debian package golang-1.19-src)");
        return;
    }
    // PngSuite's basic images: grey 1/2/4/8/16-bit, RGB 8/16, palette 1/2/4/8, grey+alpha,
    // RGBA, and Adam7 interlaced ones; all 32x32 and of the same kind of picture.
    int seen = 0;
    for (const auto& entry : fs::directory_iterator(go_pngs / "pngsuite")) {
        const auto name = entry.path().filename().string();
        // (Names with a suffix such as basn0g01-30 are Go's smaller variants.)
        if (entry.path().extension() != ".png" || name.find('-') != std::string::npos ||
            (name.rfind("basn", 0) != 0 && name.rfind("basi", 0) != 0))
            continue;
        CAPTURE(name);
        for (auto fmt : {image::pixel_format::rgb, image::pixel_format::bgr, image::pixel_format::gray}) {
            const auto img = decode_file(entry.path(), {.format = fmt});
            CHECK(img.width == 32);
            CHECK(img.height == 32);
            CHECK(img.channels == image::channels_of(fmt));
        }
        ++seen;
    }
    CHECK(seen >= 15);
    // 16-bit samples come down to their high byte: the 16-bit and 8-bit RGB files agree.
    const auto rgb16 = decode_file(go_pngs / "pngsuite" / "basn2c16.png");
    CHECK(rgb16.at(0, 0, 0) == 255);
    // Grey decoded as grey, and as RGB then grey, agree.
    const auto g8 = decode_file(go_pngs / "pngsuite" / "basn0g08.png", {.format = image::pixel_format::gray});
    const auto g8rgb = decode_file(go_pngs / "pngsuite" / "basn0g08.png", {.format = image::pixel_format::rgb});
    for (std::uint32_t y = 0; y < 32; y += 7)
        for (std::uint32_t x = 0; x < 32; x += 5) {
            CHECK(g8.at(y, x) == g8rgb.at(y, x, 0));
            CHECK(g8rgb.at(y, x, 0) == g8rgb.at(y, x, 2));
        }
    // A palette image gives the palette's colours (basn3p08's first pixel).
    const auto pal = decode_file(go_pngs / "pngsuite" / "basn3p08.png");
    const auto full = decode_file(go_pngs / "pngsuite" / "basn2c08.png");
    CHECK(pal.channels == 3);
    CHECK(full.channels == 3);
}

namespace {

/// A PNG chunk: `length` is the data's unless given (a chunk that claims more than it holds).
std::string bomb_png_chunk(const char* type, const std::string& data, std::optional<std::uint32_t> length = {})
{
    std::string out;
    auto be32 = [&](std::uint32_t v) {
        for (int s = 24; s >= 0; s -= 8) out += static_cast<char>((v >> s) & 0xFF);
    };
    const std::string typed = std::string(type, 4) + data;
    be32(length.value_or(static_cast<std::uint32_t>(data.size())));
    out += typed;
    be32(static_cast<std::uint32_t>(::crc32(0, reinterpret_cast<const Bytef*>(typed.data()), static_cast<uInt>(typed.size()))));
    return out;
}

/// `raw` through zlib (the format of IDAT, zTXt, iCCP and iTXt's compressed text).
std::string bomb_zlib(const std::string& raw)
{
    uLongf n = ::compressBound(static_cast<uLong>(raw.size()));
    std::string out(n, '\0');
    REQUIRE(::compress2(reinterpret_cast<Bytef*>(out.data()), &n, reinterpret_cast<const Bytef*>(raw.data()),
                        static_cast<uLong>(raw.size()), 9) == Z_OK);
    out.resize(n);
    return out;
}

/// A 16x16 RGB PNG whose image data (`rows`, filter bytes included) is compressed into one
/// IDAT, with `before` between IHDR and IDAT.
std::vector<std::byte> bomb_png(const std::string& before, std::string rows = {})
{
    if (rows.empty())
        for (int y = 0; y < 16; ++y) rows += '\0' + std::string(48, static_cast<char>(y * 16));
    std::string ihdr;
    for (std::uint32_t v : {16u, 16u})
        for (int s = 24; s >= 0; s -= 8) ihdr += static_cast<char>((v >> s) & 0xFF);
    ihdr += std::string("\x08\x02\x00\x00\x00", 5); // 8-bit RGB, not interlaced
    const std::string png = std::string("\x89PNG\r\n\x1a\n", 8) + bomb_png_chunk("IHDR", ihdr) + before +
                            bomb_png_chunk("IDAT", bomb_zlib(rows)) + bomb_png_chunk("IEND", "");
    const auto* b = reinterpret_cast<const std::byte*>(png.data());
    return {b, b + png.size()};
}

} // namespace

TEST_CASE("decompression bombs and absurd sizes are refused before they take memory")
{
    const image::decoder dec;
    const image::decode_context ctx{.key = "bomb", .origin = "test://bombs"};
    // The case's error (none: it decoded) and how far resident memory rose while it ran.
    auto attempt = [&](const std::vector<std::byte>& bytes, const char* what) {
        std::error_code ec;
        std::string message;
        const auto grew = conveyor_test::resident_growth([&] {
            try {
                (void)dec.decode(bytes, {}, ctx);
            } catch (const conveyor::error& e) {
                ec = e.code();
                message = e.what();
            }
        });
        CAPTURE(message);
        if (ec) CHECK(message.find("bomb") != std::string::npos);
        // The decoder's own state (a 16x16 image, the codec contexts) is small; ancillary
        // chunks are held up to 16 MiB in all.
        conveyor_test::check_resident_growth(grew, 40u << 20, what);
        return std::pair(ec, message);
    };
    // Made once for every subcase: 256 MiB of zeros compress to about 260 KB.
    static const std::string inflates_to_256_mib = bomb_zlib(std::string(256u << 20, '\0'));
    REQUIRE(inflates_to_256_mib.size() < (1u << 20));

    SUBCASE("an ancillary chunk that claims 2 GiB")
    {
        auto [ec, m] = attempt(bomb_png(bomb_png_chunk("tEXt", std::string("Comment\0abc", 11), 0x7fffffffu)), "tEXt claiming 2 GiB");
        CHECK((ec == image::errc::truncated || ec == image::errc::too_large));
    }
    SUBCASE("compressed text, an ICC profile and international text that inflate to 256 MiB")
    {
        const std::pair<const char*, std::string> cases[] = {
            {"zTXt", std::string("Comment\0\0", 9) + inflates_to_256_mib},
            {"iCCP", std::string("icc\0\0", 5) + inflates_to_256_mib},
            {"iTXt", std::string("Comment\0\1\0\0\0", 12) + inflates_to_256_mib},
        };
        for (const auto& [type, data] : cases) {
            const std::string chunk_type = type;
            CAPTURE(chunk_type);
            auto [ec, m] = attempt(bomb_png(bomb_png_chunk(type, data)), type);
            CHECK(ec == image::errc::too_large);
            CHECK(m.find("limits") != std::string::npos);
        }
    }
    SUBCASE("image data that inflates far past the image: the image is read, the rest is not")
    {
        std::string rows;
        for (int y = 0; y < 16; ++y) rows += '\0' + std::string(48, static_cast<char>(y));
        auto [ec, m] = attempt(bomb_png("", rows + std::string(64u << 20, '\0')), "IDAT inflating 64 MiB past the image");
        CHECK_FALSE(ec);
    }
    SUBCASE("a hundred thousand chunks")
    {
        std::string many;
        for (int i = 0; i < 100'000; ++i) many += bomb_png_chunk("tEXt", std::string("k\0v", 3));
        auto [ec, m] = attempt(bomb_png(many), "100,000 tEXt chunks");
        CHECK(ec == image::errc::too_large);
    }
    SUBCASE("headers claiming 65,500 x 65,500 (JPEG) and 100,000 x 100,000 (PNG) pixels")
    {
        auto jpeg = make_jpeg(64, 48, TJSAMP_420, 90);
        patch_sof(jpeg, [](std::byte* sof) {
            sof[1] = sof[3] = std::byte{0xFF}; // 65,500 = 0xFFDC
            sof[2] = sof[4] = std::byte{0xDC};
        });
        CHECK(attempt(jpeg, "JPEG of 65,500 x 65,500").first == image::errc::too_large);
        auto png = bomb_png("");
        const std::uint32_t side = 100'000;
        for (int at : {16, 20}) // IHDR's width and height, then its CRC again
            for (int s = 0; s < 4; ++s) png[at + s] = std::byte((side >> (24 - 8 * s)) & 0xFF);
        const std::string ihdr(reinterpret_cast<const char*>(png.data()) + 12, 17);
        const auto crc = static_cast<std::uint32_t>(::crc32(0, reinterpret_cast<const Bytef*>(ihdr.data()), 17));
        for (int s = 0; s < 4; ++s) png[29 + s] = std::byte((crc >> (24 - 8 * s)) & 0xFF);
        CHECK(attempt(png, "PNG of 100,000 x 100,000").first == image::errc::too_large);
    }
}

TEST_CASE("a progressive JPEG whose scans repeat is refused after 500 scans, on every decoding path")
{
    // Each scan is a pass over the whole image's coefficients: a small file of many scans
    // costs a large image's time many times over. Here the last scan of a progressive JPEG
    // is repeated 600 times (a warning each, so only lenient decoding gets that far).
    const auto good = make_jpeg(64, 48, TJSAMP_420, 90, TJFLAG_PROGRESSIVE);
    std::size_t last_sos = 0;
    for (std::size_t i = 0; i + 1 < good.size(); ++i)
        if (good[i] == std::byte{0xFF} && good[i + 1] == std::byte{0xDA}) last_sos = i;
    REQUIRE(last_sos > 0);
    REQUIRE(good[good.size() - 2] == std::byte{0xFF});
    REQUIRE(good[good.size() - 1] == std::byte{0xD9});
    std::vector<std::byte> bomb(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(last_sos));
    for (int i = 0; i < 600; ++i) bomb.insert(bomb.end(), good.begin() + static_cast<std::ptrdiff_t>(last_sos), good.end() - 2);
    bomb.insert(bomb.end(), good.end() - 2, good.end());

    const image::decoder dec;
    const image::decode_context ctx{.key = "scans", .origin = "test://scans"};
    const image::decode_options ways[] = {
        {.strict = false},
        {.size = {32, 24}, .crop = image::crop_mode::center, .jpeg_crop = image::jpeg_crop_method::decode_region, .strict = false},
        {.size = {32, 24}, .crop = image::crop_mode::center, .jpeg_crop = image::jpeg_crop_method::decode_then_crop, .strict = false},
        {.size = {32, 24}, .crop = image::crop_mode::center, .jpeg_crop = image::jpeg_crop_method::transform_then_decode, .strict = false},
    };
    for (std::size_t w = 0; w < std::size(ways); ++w) {
        CAPTURE(w);
        CHECK_NOTHROW((void)dec.decode(good, ways[w], ctx));
        std::string message;
        try {
            (void)dec.decode(bomb, ways[w], ctx);
        } catch (const conveyor::error& e) {
            CHECK(e.code() == image::errc::too_large);
            message = e.what();
        }
        CAPTURE(message);
        CHECK(message.find("more than 500 scans") != std::string::npos);
    }
}

TEST_CASE("bad input of every kind is an error naming the key and the path, never a crash")
{
    const image::decoder dec;
    const image::decode_context ctx{.key = "train/sample_0001", .origin = "/data/shard-000001.tar"};
    auto code_of = [&](const std::vector<std::byte>& bytes, image::decode_options o = {}) -> std::error_code {
        try {
            (void)dec.decode(bytes, o, ctx);
        } catch (const conveyor::error& e) {
            const std::string what = e.what();
            CHECK(what.find("train/sample_0001") != std::string::npos);
            CHECK(what.find("/data/shard-000001.tar") != std::string::npos);
            return e.code();
        }
        return {};
    };

    SUBCASE("no bytes at all") { CHECK(code_of({}) == image::errc::zero_size); }
    SUBCASE("random bytes")
    {
        std::vector<std::byte> junk(4096);
        std::uint64_t s = 7;
        for (auto& b : junk) b = std::byte(mix(++s) & 0xFF);
        junk[0] = std::byte{0x12}; // not FF: not a JPEG by chance
        CHECK(code_of(junk) == image::errc::not_an_image);
    }
    SUBCASE("a JPEG signature followed by garbage")
    {
        std::vector<std::byte> junk(4096);
        std::uint64_t s = 9;
        for (auto& b : junk) b = std::byte(mix(++s) & 0xFF);
        junk[0] = std::byte{0xFF};
        junk[1] = std::byte{0xD8};
        junk[2] = std::byte{0x00};
        CHECK(code_of(junk) == image::errc::corrupt);
    }
    SUBCASE("a real JPEG cut short: an error when strict, a counted warning when not")
    {
        auto bytes = make_jpeg(320, 240, TJSAMP_420, 90);
        bytes.resize(bytes.size() * 2 / 3);
        CHECK(code_of(bytes) == image::errc::truncated);
        image::decode_stats stats;
        const auto img = dec.decode(bytes, {.strict = false}, {.key = "k", .stats = &stats});
        CHECK(img.width == 320);
        CHECK(stats.warnings == 1);
        CHECK(stats.decoded == 1);
        // The same through each crop method (a region decode stops at the crop's last row).
        for (auto method : {image::jpeg_crop_method::decode_region, image::jpeg_crop_method::decode_then_crop,
                            image::jpeg_crop_method::transform_then_decode}) {
            CAPTURE(int(method));
            const image::decode_options strict{.size = {64, 64}, .crop = image::crop_mode::center, .center_fraction = 0.9, .jpeg_crop = method};
            CHECK(code_of(bytes, strict) == image::errc::truncated);
            auto lenient = strict;
            lenient.strict = false;
            image::decode_stats s2;
            CHECK(dec.decode(bytes, lenient, {.key = "k", .stats = &s2}).width == 64);
            CHECK(s2.warnings >= 1);
        }
        // Cut inside the header: truncated whatever the mode.
        auto head = make_jpeg(320, 240, TJSAMP_420, 90);
        head.resize(100);
        CHECK(code_of(head) == image::errc::truncated);
        CHECK(code_of(head, {.strict = false}) == image::errc::truncated);
    }
    SUBCASE("a real PNG cut short")
    {
        if (!fs::exists(go_images / "video-001.png")) {
            MESSAGE("skipped: Go's image test data are missing (Debian package golang-1.19-src)");
            return;
        }
        auto bytes = read_bytes(go_images / "video-001.png");
        bytes.resize(bytes.size() / 2);
        CHECK(code_of(bytes) == image::errc::truncated);
        bytes.resize(20);
        CHECK(code_of(bytes) == image::errc::truncated);
    }
    SUBCASE("Go's invalid PNGs")
    {
        if (!fs::exists(go_pngs / "invalid-crc32.png")) {
            MESSAGE("skipped: Go's image/png test data are missing (Debian package golang-1.19-src)");
            return;
        }
        CHECK(code_of(read_bytes(go_pngs / "invalid-crc32.png")) == image::errc::corrupt);
        CHECK(code_of(read_bytes(go_pngs / "invalid-zlib.png")) == image::errc::corrupt);
        CHECK(code_of(read_bytes(go_pngs / "invalid-noend.png")) == image::errc::truncated); // no IEND
        // invalid-trunc.png holds all its pixels and an IEND; only its zlib stream is not
        // closed. libspng takes it (Go does not): nothing is missing from the image.
    }
    SUBCASE("a CMYK JPEG is unsupported")
    {
        if (!fs::exists(go_images / "video-001.cmyk.jpeg")) {
            MESSAGE("skipped: Go's image test data are missing (Debian package golang-1.19-src)");
            return;
        }
        CHECK(code_of(read_bytes(go_images / "video-001.cmyk.jpeg")) == image::errc::unsupported);
    }
    SUBCASE("a 12-bit JPEG is unsupported")
    {
        auto bytes = make_jpeg(64, 48, TJSAMP_444, 90);
        patch_sof(bytes, [](std::byte* sof) { sof[0] = std::byte{12}; });
        CHECK(code_of(bytes) == image::errc::unsupported);
    }
    SUBCASE("a header claiming absurd dimensions trips the pixel limit before any decoding")
    {
        auto bytes = make_jpeg(64, 48, TJSAMP_420, 90);
        patch_sof(bytes, [](std::byte* sof) {
            sof[1] = sof[2] = sof[3] = sof[4] = std::byte{0xFF}; // 65535 x 65535
        });
        CHECK(code_of(bytes) == image::errc::too_large);
        // Under a raised limit the lie is found out by the decoder, still without a crash.
        auto small = make_jpeg(64, 48, TJSAMP_420, 90);
        patch_sof(small, [](std::byte* sof) {
            sof[1] = std::byte{0x10}; // 4096 x 4096
            sof[2] = std::byte{0x00};
            sof[3] = std::byte{0x10};
            sof[4] = std::byte{0x00};
        });
        CHECK(code_of(small, {.max_pixels = 1000}) == image::errc::too_large);
        CHECK(code_of(small) == image::errc::truncated);
    }
    SUBCASE("a JPEG header giving zero rows")
    {
        auto bytes = make_jpeg(64, 48, TJSAMP_420, 90);
        patch_sof(bytes, [](std::byte* sof) { sof[1] = sof[2] = std::byte{0}; });
        CHECK(code_of(bytes) == image::errc::zero_size);
    }
    SUBCASE("a PNG header giving zero columns")
    {
        if (!fs::exists(go_images / "video-001.png")) {
            MESSAGE("skipped: Go's image test data are missing (Debian package golang-1.19-src)");
            return;
        }
        auto bytes = read_bytes(go_images / "video-001.png");
        for (int i = 16; i < 20; ++i) bytes[i] = std::byte{0};
        CHECK(code_of(bytes) == image::errc::zero_size);
    }
    SUBCASE("options that cannot be applied")
    {
        const auto bytes = make_jpeg(64, 48, TJSAMP_420, 90);
        CHECK(code_of(bytes, {.crop = image::crop_mode::random_resized, .scale = {0.9, 0.1}}) == image::errc::bad_options);
        CHECK(code_of(bytes, {.crop = image::crop_mode::random_resized, .ratio = {0, 1}}) == image::errc::bad_options);
        CHECK(code_of(bytes, {.size = {10, 0}}) == image::errc::bad_options);
        std::vector<std::uint8_t> out(10);
        CHECK_THROWS_WITH_AS(dec.decode_into(bytes, {.size = {4, 4}}, ctx, out), doctest::Contains("needs 48"), conveyor::error);
        CHECK_THROWS_AS(dec.decode_into(bytes, {}, ctx, out), conveyor::error);
    }
}

TEST_CASE("random-resized crops follow torchvision's definition")
{
    // Properties of RandomResizedCrop.get_params over many keys: the crop lies inside the
    // image; when one of the 10 tries fit, its area (before rounding) is within scale and
    // its ratio within ratio, up to the rounding of w and h to whole pixels.
    const std::array<double, 2> scale{0.08, 1.0};
    const std::array<double, 2> ratio{3.0 / 4.0, 4.0 / 3.0};
    std::set<std::pair<std::int64_t, std::int64_t>> origins;
    for (int k = 0; k < 2000; ++k) {
        const std::string key = "sample_" + std::to_string(k);
        const std::int64_t H = 375, W = 500;
        image::sample_random rng(42, 3, key, 0);
        const auto c = image::random_resized_crop(H, W, scale, ratio, rng);
        CAPTURE(key);
        REQUIRE(c.top >= 0);
        REQUIRE(c.left >= 0);
        REQUIRE(c.height > 0);
        REQUIRE(c.width > 0);
        REQUIRE(c.top + c.height <= H);
        REQUIRE(c.left + c.width <= W);
        const double area = double(c.width) * double(c.height) / double(H * W);
        const double r = double(c.width) / double(c.height);
        // Rounding each side by up to half a pixel moves area and ratio a little.
        const double dw = 0.5 / c.width, dh = 0.5 / c.height;
        CHECK(area >= scale[0] * (1 - dw) * (1 - dh) - 1e-9);
        CHECK(area <= scale[1] * (1 + dw) * (1 + dh) + 1e-9);
        CHECK(r >= ratio[0] * (1 - dw) / (1 + dh) - 1e-9);
        CHECK(r <= ratio[1] * (1 + dw) / (1 - dh) + 1e-9);
        origins.insert({c.top, c.left});
    }
    CHECK(origins.size() > 1500); // placed at random, not always at the same spot

    // The fallback after 10 misses (a scale no crop can meet: more than the whole image
    // is impossible, so with a 1x100 ratio range on a wide image every try misses):
    // torchvision's centred crop, its ratio clamped to the range.
    image::sample_random rng(1, 0, "x", 0);
    // Image ratio 4 above max 2: full height, width round(h * 2), centred.
    auto c = image::random_resized_crop(100, 400, {1.0, 1.0}, {0.5, 2.0}, rng);
    CHECK(c == image::crop_rect{0, 100, 100, 200});
    // Image ratio 0.25 below min 0.5: full width, height round(w / 0.5), centred.
    c = image::random_resized_crop(400, 100, {1.0, 1.0}, {0.5, 2.0}, rng);
    CHECK(c == image::crop_rect{100, 0, 200, 100});
    // A square image and ratios 0.5-0.6 at scale 1: every try is too tall; the ratio is
    // clamped to 0.6: full height, width 60, centred.
    c = image::random_resized_crop(100, 100, {1.0, 1.0}, {0.5, 0.6}, rng);
    CHECK(c == image::crop_rect{0, 20, 100, 60});
    // Scale 1 and ratio exactly the image's: the first try fits, the whole image.
    c = image::random_resized_crop(300, 400, {1.0, 1.0}, {4.0 / 3.0, 4.0 / 3.0}, rng);
    CHECK(c == image::crop_rect{0, 0, 300, 400});
    // Python rounds half to even: the fallback on a 5-high image with ratio 0.5 is
    // round(2.5) = 2 pixels wide, not 3.
    CHECK(image::random_resized_crop(5, 25, {1.0, 1.0}, {0.5, 0.5}, rng) == image::crop_rect{0, 11, 5, 2});
}

TEST_CASE("crops and flips are a pure function of seed, epoch and key")
{
    image::decode_options o{.size = {64, 64}, .crop = image::crop_mode::random_resized, .flip = 0.5, .seed = 11};
    const image::decode_context a{.key = "a", .epoch = 1};
    CHECK(image::crop_for(375, 500, o, a) == image::crop_for(375, 500, o, a));
    int differ_by_key = 0, differ_by_epoch = 0, differ_by_seed = 0, flips = 0;
    for (int k = 0; k < 200; ++k) {
        const std::string key = "k" + std::to_string(k);
        const image::decode_context c1{.key = key, .epoch = 1}, c2{.key = key, .epoch = 2};
        const auto r1 = image::crop_for(375, 500, o, c1);
        differ_by_epoch += r1 != image::crop_for(375, 500, o, c2);
        differ_by_key += r1 != image::crop_for(375, 500, o, a);
        auto o2 = o;
        o2.seed = 12;
        differ_by_seed += r1 != image::crop_for(375, 500, o2, c1);
        flips += image::flip_for(o, c1);
        CHECK(image::flip_for(o, c1) == image::flip_for(o, c1));
    }
    CHECK(differ_by_key > 190);
    CHECK(differ_by_epoch > 190);
    CHECK(differ_by_seed > 190);
    CHECK(flips > 70);
    CHECK(flips < 130);
    o.flip = 0;
    CHECK_FALSE(image::flip_for(o, a));
    o.flip = 1;
    CHECK(image::flip_for(o, a));

    // The same image decoded twice, and on another thread, gives the same pixels.
    const auto bytes = make_jpeg(320, 240, TJSAMP_420, 90);
    const image::decoder dec;
    const auto x = dec.decode(bytes, o, a);
    image::decoded_image y;
    std::thread([&] { y = dec.decode(bytes, o, a); }).join();
    CHECK(std::equal(x.data().begin(), x.data().end(), y.data().begin(), y.data().end()));
}

TEST_CASE("a flip mirrors each row")
{
    const auto bytes = make_jpeg(96, 64, TJSAMP_444, 100);
    const image::decoder dec;
    const auto plain = dec.decode(bytes, {});
    const auto flipped = dec.decode(bytes, {.flip = 1.0});
    REQUIRE(plain.width == 96);
    for (std::uint32_t y = 0; y < 64; y += 9)
        for (std::uint32_t x = 0; x < 96; x += 7)
            for (std::uint32_t c = 0; c < 3; ++c) CHECK(flipped.at(y, x, c) == plain.at(y, 95 - x, c));
}

TEST_CASE("crops take the right region: decoded as a region, decoded whole, DCT-scaled or cut from the compressed data")
{
    // A picture whose every 16x16 block has its own colour: a crop must show the blocks of
    // its region, however it was decoded.
    const std::uint32_t W = 512, H = 384;
    const auto bytes = make_jpeg(W, H, TJSAMP_420, 95);
    const image::decoder dec;
    const auto full = dec.decode(bytes, {});
    const image::decode_context ctx{.key = "blocks"};
    for (auto method : {image::jpeg_crop_method::decode_region, image::jpeg_crop_method::decode_then_crop,
                        image::jpeg_crop_method::transform_then_decode}) {
        for (bool scaling : {false, true}) {
            CAPTURE(int(method));
            CAPTURE(scaling);
            // An unscaled crop without resize equals the same pixels of the full decode.
            image::decode_options o{.crop = image::crop_mode::random_resized, .scale = {0.2, 0.5}, .dct_scaling = scaling,
                                    .jpeg_crop = method, .seed = 5};
            const auto r = image::crop_for(H, W, o, ctx);
            const auto c = dec.decode(bytes, o, ctx);
            REQUIRE(c.width == r.width);
            REQUIRE(c.height == r.height);
            double sum = 0;
            for (std::uint32_t y = 0; y < c.height; ++y)
                for (std::uint32_t x = 0; x < c.width; ++x)
                    for (std::uint32_t k = 0; k < 3; ++k)
                        sum += std::abs(int(c.at(y, x, k)) - int(full.at(y + std::uint32_t(r.top), x + std::uint32_t(r.left), k)));
            const double mean = sum / double(c.size_bytes());
            MESSAGE("unscaled crop vs full decode: mean " << mean);
            CHECK(mean == 0.0);

            // Resized to 64x48 with and without DCT scaling: close to resizing the same
            // region of the full decode.
            o.size = {64, 48};
            const auto small = dec.decode(bytes, o, ctx);
            const auto reference = dec.decode(bytes, {.size = {64, 48}, .crop = image::crop_mode::random_resized,
                                                      .scale = {0.2, 0.5}, .dct_scaling = false, .seed = 5},
                                              ctx);
            const auto d = compare(small, reference);
            MESSAGE("resized crop: mean " << d.mean << " max " << d.max);
            CHECK(d.mean <= 3.0);
        }
    }
}

TEST_CASE("DCT scaling picks the smallest factor that keeps the crop at least the output size")
{
    // A 1024x768 picture resized to 128x96: 1/8 gives exactly 128x96 and is decoded
    // straight to the output; resized to 129x96, 1/8 is too small, so 1/4 is used. Both
    // agree with the unscaled decode resized. At 1/8 each pixel is the mean of an 8x8
    // block where the resize filter's window is 16 pixels wide: on this picture of
    // hard-edged 16x16 blocks that differs by 10 levels on average (measured 10.1), at
    // 1/4 by 0.7, at 224x224 (3/8) by 1.0.
    const auto bytes = make_jpeg(1024, 768, TJSAMP_420, 95);
    const image::decoder dec;
    for (image::extent size : {image::extent{128, 96}, image::extent{129, 96}, image::extent{224, 224}}) {
        CAPTURE(size.width);
        const auto fast = dec.decode(bytes, {.size = size});
        const auto slow = dec.decode(bytes, {.size = size, .dct_scaling = false});
        const auto d = compare(fast, slow);
        MESSAGE("scaled vs unscaled: mean " << d.mean << " max " << d.max);
        CHECK(d.mean <= (size.width == 128 ? 13.0 : 2.0));
    }
}

TEST_CASE("center crop keeps the output's aspect ratio, center_fraction of the largest such region")
{
    image::decode_options o{.size = {224, 224}, .crop = image::crop_mode::center};
    // torchvision: Resize(256) then CenterCrop(224) on 500x375: a 328x328 square of the
    // original (224/256 of 375), centred.
    const auto c = image::crop_for(375, 500, o, {});
    CHECK(c.height == 328);
    CHECK(c.width == 328);
    CHECK(c.top == 24 - 0); // round((375 - 328) / 2) = round(23.5) = 24
    CHECK(c.left == 86);
}

TEST_CASE("decode_into writes exactly the output size into caller memory, as decode does")
{
    const auto bytes = make_jpeg(500, 375, TJSAMP_420, 90);
    const image::decoder dec;
    image::decode_options o{.format = image::pixel_format::bgr, .size = {224, 224}, .crop = image::crop_mode::random_resized,
                            .flip = 0.5, .seed = 3};
    const image::decode_context ctx{.key = "n01/img_1", .epoch = 4};
    std::vector<std::uint8_t> slab(3 * 224 * 224 * 3 + 2, 0xAB); // three slots and two guard bytes
    const std::span<std::uint8_t> slot(slab.data() + 1 + 224 * 224 * 3, 224 * 224 * 3);
    dec.decode_into(bytes, o, ctx, slot);
    const auto img = dec.decode(bytes, o, ctx);
    CHECK(std::equal(slot.begin(), slot.end(), img.data().begin(), img.data().end()));
    CHECK(slab[1 + 224 * 224 * 3 - 1] == 0xAB); // the slot before is untouched
    CHECK(slab[1 + 2 * 224 * 224 * 3] == 0xAB); // and the one after
    CHECK(dec.output_size(bytes, o, ctx) == image::extent{224, 224});
    CHECK(dec.output_size(bytes, {}, ctx) == image::extent{500, 375});
    const auto info = dec.info(bytes);
    CHECK(info.kind == image::image_kind::jpeg);
    CHECK(info.components == 3);
}

TEST_CASE("damaged copies of real images decode or fail with an image error, whatever the crop method")
{
    // Bytes flipped at random in a JPEG (baseline and progressive) and a PNG: every decode
    // ends in an image or a conveyor::error of the image category, never a crash (run
    // under ASan/UBSan too: libjpeg's errors leave by longjmp).
    std::vector<std::vector<std::byte>> originals{make_jpeg(120, 90, TJSAMP_420, 85)};
    if (fs::exists(go_images / "video-001.progressive.jpeg")) {
        originals.push_back(read_bytes(go_images / "video-001.progressive.jpeg"));
        originals.push_back(read_bytes(go_images / "video-001.png"));
    }
    const image::decoder dec;
    int decoded = 0, failed = 0;
    std::uint64_t s = 77;
    for (const auto& original : originals)
        for (int round = 0; round < 150; ++round) {
            auto bytes = original;
            const int flips = 1 + int(mix(++s) % 8);
            for (int f = 0; f < flips; ++f) {
                const auto at = 2 + mix(++s) % (bytes.size() - 2);
                bytes[at] = std::byte(mix(++s) & 0xFF);
            }
            if (round % 5 == 0) bytes.resize(2 + mix(++s) % (bytes.size() - 2));
            const auto method = static_cast<image::jpeg_crop_method>(round % 3);
            const image::decode_options o{.size = {32, 32}, .crop = image::crop_mode::random_resized, .jpeg_crop = method,
                                          .strict = round % 2 == 0, .max_pixels = 1 << 22};
            try {
                const auto img = dec.decode(bytes, o, {.key = "fuzz"});
                CHECK(img.width == 32);
                ++decoded;
            } catch (const conveyor::error& e) {
                CHECK(std::string(e.code().category().name()) == "conveyor.image");
                ++failed;
            }
        }
    MESSAGE("damaged images: " << decoded << " decoded, " << failed << " failed");
    CHECK(failed > 0);
}

TEST_CASE("a region decode and a lossless cut give the same pixels as a whole decode, in every pixel format")
{
    const auto bytes = make_jpeg(333, 251, TJSAMP_420, 92); // sizes that are not MCU multiples
    const image::decoder dec;
    for (auto fmt : {image::pixel_format::rgb, image::pixel_format::bgr, image::pixel_format::gray}) {
        for (int k = 0; k < 20; ++k)
            for (auto method : {image::jpeg_crop_method::decode_region, image::jpeg_crop_method::transform_then_decode}) {
            const std::string key = "k" + std::to_string(k);
            CAPTURE(key);
            CAPTURE(int(fmt));
            image::decode_options o{.format = fmt, .size = {40, 30}, .crop = image::crop_mode::random_resized,
                                    .dct_scaling = false, .jpeg_crop = method};
            const auto region = dec.decode(bytes, o, {.key = key});
            o.jpeg_crop = image::jpeg_crop_method::decode_then_crop;
            const auto whole = dec.decode(bytes, o, {.key = key});
            CHECK(std::equal(region.data().begin(), region.data().end(), whole.data().begin(), whole.data().end()));
        }
    }
}
