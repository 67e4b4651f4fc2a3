// Tests of conveyor/image/encode.hpp and conveyor/image/synthetic.hpp.
#include <conveyor/core/error.hpp>
#include <conveyor/file/index.hpp>
#include <conveyor/image/decode.hpp>
#include <conveyor/image/encode.hpp>
#include <conveyor/image/error.hpp>
#include <conveyor/image/synthetic.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

namespace cv = conveyor;
namespace ci = conveyor::image;
namespace fs = std::filesystem;

namespace {

struct temp_folder {
    fs::path path;
    temp_folder()
    {
        char tmpl[] = "/tmp/conveyor-synthetic-XXXXXX";
        path = ::mkdtemp(tmpl);
    }
    ~temp_folder() { fs::remove_all(path); }
};

double mean_abs_difference(const std::vector<std::uint8_t>& a, std::span<const std::uint8_t> b)
{
    REQUIRE(a.size() == b.size());
    double sum = 0;
    for (std::size_t i = 0; i < a.size(); ++i) sum += std::abs(int(a[i]) - int(b[i]));
    return sum / static_cast<double>(a.size());
}

} // namespace

TEST_CASE("encode_jpeg makes a JPEG that decodes back to the picture, within JPEG's loss")
{
    ci::synthetic_images o{.width = 160, .height = 120};
    const auto px = ci::draw_synthetic_image(o, 3, 7);
    REQUIRE(px.size() == 160u * 120 * 3);
    for (const int q : {50, 95}) {
        const cv::buffer jpg = ci::encode_jpeg(px, 160, 120, ci::pixel_format::rgb, {.quality = q});
        REQUIRE(jpg.size() > 2);
        CHECK(std::to_integer<int>(jpg.data()[0]) == 0xFF);
        CHECK(std::to_integer<int>(jpg.data()[1]) == 0xD8);
        const auto img = ci::decoder{}.decode(jpg.span(), {}, {.key = "x"});
        REQUIRE(img.width == 160);
        REQUIRE(img.height == 120);
        // Grainy synthetic pictures: quality 95 keeps them within a few levels on average.
        const double d = mean_abs_difference(px, img.data());
        INFO("quality " << q << ": mean abs difference " << d);
        CHECK(d < (q == 95 ? 4.0 : 12.0));
    }
}

TEST_CASE("encode_jpeg refuses pixels that do not match the size, and a bad quality")
{
    std::vector<std::uint8_t> px(10 * 10 * 3);
    const auto code_of = [](auto f) {
        try {
            f();
        } catch (const cv::error& e) {
            return e.code();
        }
        return std::error_code{};
    };
    CHECK(code_of([&] { (void)ci::encode_jpeg(px, 10, 11, ci::pixel_format::rgb); }) == ci::errc::bad_options);
    CHECK(code_of([&] { (void)ci::encode_jpeg(px, 10, 10, ci::pixel_format::rgb, {.quality = 0}); }) == ci::errc::bad_options);
    CHECK(code_of([&] { (void)ci::encode_jpeg(std::span(px).first(100), 10, 10, ci::pixel_format::gray); }) == std::error_code{});
}

TEST_CASE("synthetic images are a pure function of seed, class and number, and classes look different")
{
    ci::synthetic_images o{.width = 96, .height = 72, .seed = 5};
    CHECK(ci::draw_synthetic_image(o, 2, 4) == ci::draw_synthetic_image(o, 2, 4));
    CHECK(ci::draw_synthetic_image(o, 2, 4) != ci::draw_synthetic_image(o, 2, 5));
    ci::synthetic_images other = o;
    other.seed = 6;
    CHECK(ci::draw_synthetic_image(o, 2, 4) != ci::draw_synthetic_image(other, 2, 4));
    // The class's colour dominates the middle of the picture more than other classes' do:
    // count pixels near red (class 0 is a red circle) in class 0 against class 5 (blue).
    const auto reddish = [](const std::vector<std::uint8_t>& px) {
        std::size_t n = 0;
        for (std::size_t i = 0; i + 2 < px.size(); i += 3)
            if (px[i] > 180 && px[i + 1] < 80 && px[i + 2] < 80) ++n;
        return n;
    };
    std::size_t red0 = 0, red5 = 0;
    for (std::size_t n = 0; n < 8; ++n) {
        red0 += reddish(ci::draw_synthetic_image(o, 0, n));
        red5 += reddish(ci::draw_synthetic_image(o, 5, n));
    }
    CHECK(red0 > 8 * 200);
    CHECK(red5 < red0 / 10);
}

TEST_CASE("class names sort in class order and name shape and colour; more than 100 classes is refused")
{
    const auto names = ci::synthetic_class_names(12);
    REQUIRE(names.size() == 12);
    CHECK(names[0] == "00_red_circle");
    CHECK(names[1] == "01_orange_square");
    CHECK(names[10] == "10_orange_circle");
    CHECK(std::is_sorted(names.begin(), names.end()));
    CHECK(std::set<std::string>(names.begin(), names.end()).size() == 12);
    CHECK_THROWS_AS(ci::synthetic_class_names(101), cv::error);
    CHECK_THROWS_AS(ci::synthetic_class_names(0), cv::error);
}

TEST_CASE("make_synthetic_images writes an ImageFolder walk() labels, and keeps what is there on a second call")
{
    temp_folder t;
    ci::synthetic_images o{.dir = t.path, .classes = 3, .count = 10, .width = 64, .height = 48, .threads = 2};
    std::size_t calls = 0, last = 0;
    const auto s = ci::make_synthetic_images(o, [&](std::size_t done, std::size_t total) {
        ++calls;
        CHECK(total == 10);
        CHECK(done > last);
        last = done;
    });
    CHECK(s.files == 10);
    CHECK(s.written == 10);
    CHECK(calls == 10);
    CHECK(last == 10);
    const auto l = cv::file::walk(t.path, {.labels = true});
    REQUIRE(l.size() == 10);
    REQUIRE(l.classes == s.classes);
    std::uint64_t bytes = 0;
    std::size_t per_class[3] = {0, 0, 0};
    for (const auto& e : l.entries) {
        bytes += static_cast<std::uint64_t>(e.size);
        REQUIRE(e.label >= 0);
        REQUIRE(e.label < 3);
        ++per_class[e.label];
        CHECK(e.path.ends_with(".jpg"));
    }
    CHECK(bytes == s.bytes);
    CHECK(per_class[0] == 4);
    CHECK(per_class[1] == 3);
    CHECK(per_class[2] == 3);
    for (const auto& e : fs::recursive_directory_iterator(t.path)) CHECK(e.path().extension() != ".tmp");
    const auto again = ci::make_synthetic_images(o);
    CHECK(again.written == 0);
    CHECK(again.files == 10);
    CHECK(again.bytes == s.bytes);
}
