// Tests of conveyor/image/error.hpp: every error code has its own message, and an image
// error names the sample key and the shard URL (user-info hidden).
#include <conveyor/image/error.hpp>

#include <doctest/doctest.h>

#include <set>
#include <string>

namespace image = conveyor::image;

TEST_CASE("every image error code has a message of its own, in the conveyor.image category")
{
    std::set<std::string> messages;
    int n = 0;
    for (int v = static_cast<int>(image::errc::not_an_image); v <= static_cast<int>(image::errc::field_decoder_failed); ++v, ++n) {
        const std::error_code ec = image::make_error_code(static_cast<image::errc>(v));
        CHECK(std::string(ec.category().name()) == "conveyor.image");
        CHECK(ec.message().find("unknown") == std::string::npos);
        messages.insert(ec.message());
    }
    CHECK(n == 11);
    CHECK(messages.size() == 11);
    CHECK(image::make_error_code(image::errc::not_an_image).message() == "not a JPEG, PNG, WebP or AVIF image");
    CHECK(image::make_error_code(image::errc::truncated).message() == "image data are truncated");
    CHECK(image::make_error_code(image::errc::corrupt).message() == "image data are corrupt");
    CHECK(image::make_error_code(image::errc::unsupported).message() == "unsupported kind of image");
    CHECK(image::make_error_code(image::errc::too_large).message() == "image is larger than a decoding limit (pixels, metadata or scans)");
    CHECK(image::make_error_code(image::errc::zero_size).message() == "image is empty");
    CHECK(image::make_error_code(image::errc::bad_options).message() == "invalid image decode options");
    CHECK(image::make_error_code(image::errc::missing_field).message() == "sample has no such field or key");
    CHECK(image::make_error_code(image::errc::bad_label).message() == "label is not an integer or not in the label map");
    CHECK(image::make_error_code(image::errc::bad_field).message() == "field is not what its decoder reads");
    CHECK(image::make_error_code(image::errc::field_decoder_failed).message() == "a user's field decoder failed");
    CHECK(image::make_error_code(static_cast<image::errc>(999)).message() == "unknown conveyor.image error");
    const std::error_code ec = image::errc::corrupt; // is_error_code_enum
    CHECK(ec == image::errc::corrupt);
}

TEST_CASE("an image error names the sample key, the shard URL without its user-info, and the detail")
{
    const auto e = image::detail::image_error(image::errc::truncated, "train/n01440764_10026",
                                              "https://user:secret@host/s-000001.tar", "TurboJPEG decode: Premature end of JPEG file");
    const std::string what = e.what();
    CHECK(what.find("secret") == std::string::npos);
    CHECK(what.find("host/s-000001.tar") != std::string::npos);
    CHECK(what.find("train/n01440764_10026") != std::string::npos);
    CHECK(what.find("Premature end of JPEG file") != std::string::npos);
    CHECK(e.key() == "train/n01440764_10026");
    CHECK(e.code() == image::errc::truncated);
}
