// The image decoder as a build without libwebp and libavif has it: this program is compiled
// header-only with CONVEYOR_WITH_WEBP and CONVEYOR_WITH_AVIF undefined (tests/image/CMakeLists.txt).
// WebP and AVIF are still told by their bytes, and refused saying what the build lacks.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "support.hpp"

#include <conveyor/image/decode.hpp>

#include <doctest/doctest.h>

#include <string>
#include <vector>

#if CONVEYOR_WITH_WEBP || CONVEYOR_WITH_AVIF
#error "this test is built without the WebP and AVIF decoders"
#endif

namespace image = conveyor::image;

TEST_CASE("a build without libwebp and libavif refuses WebP and AVIF with errc::unsupported, saying why")
{
    auto refusal = [](const std::string& text) {
        const auto* p = reinterpret_cast<const std::byte*>(text.data());
        const std::vector<std::byte> bytes(p, p + text.size());
        std::string what;
        try {
            (void)image::decoder{}.decode(bytes, {}, {.key = "k", .origin = "o.tar"});
        } catch (const conveyor::error& e) {
            CHECK(e.code() == image::errc::unsupported);
            what = e.what();
        }
        return what;
    };
    const auto webp = refusal(std::string("RIFF\x30\0\0\0WEBPVP8 ", 16) + std::string(40, '\0'));
    CHECK(webp.find("no WebP decoder") != std::string::npos);
    CHECK(webp.find("CONVEYOR_WITH_WEBP") != std::string::npos);
    const auto avif = refusal(std::string("\0\0\0\x1c" "ftypavif\0\0\0\0avifmif1miaf", 28) + std::string(40, '\0'));
    CHECK(avif.find("no AVIF decoder") != std::string::npos);
    CHECK(avif.find("CONVEYOR_WITH_AVIF") != std::string::npos);
    // JPEG is unaffected.
    const auto jpeg = conveyor_test_image::make_jpeg(32, 24, TJSAMP_420, 90);
    CHECK(image::decoder{}.decode(jpeg, {}).width == 32);
}
