// Tests of conveyor/image/stage.hpp: decode_image on shard samples (the first image field
// present, the label from `cls`) and on file blobs (the ImageFolder label), bad images
// failing with their key and shard or skipped and counted, and per-epoch augmentation.
#include "support.hpp"

#include "../shard/tar_support.hpp"

#include <conveyor/core/runtime.hpp>
#include <conveyor/core/stages.hpp>
#include <conveyor/file/index.hpp>
#include <conveyor/file/source.hpp>
#include <conveyor/image/batch.hpp>
#include <conveyor/image/stage.hpp>
#include <conveyor/shard/source.hpp>

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

namespace image = conveyor::image;
namespace shard = conveyor::shard;
using namespace conveyor_test_image;
using tar_test::temp_dir;
namespace fs = std::filesystem;

namespace {

std::string as_string(const std::vector<std::byte>& b)
{
    return {reinterpret_cast<const char*>(b.data()), b.size()};
}

/// One shard of `n` samples: sample k has a JPEG of (64 + 8k) x 48 under field `jpg` (or
/// `png`-less samples with `jpeg` for odd k, to test the field order) and cls = k % 3.
/// `bad` samples get garbage instead of an image.
fs::path make_shard(const fs::path& dir, int n, const std::vector<int>& bad = {})
{
    std::string tar;
    for (int k = 0; k < n; ++k) {
        const std::string key = "train/s" + std::to_string(k);
        std::string img = as_string(make_jpeg(64 + 8 * std::uint32_t(k), 48, TJSAMP_420, 90));
        if (std::find(bad.begin(), bad.end(), k) != bad.end()) img = "this is not an image";
        tar += tar_test::tar_entry(key + ".cls", " " + std::to_string(k % 3) + "\n");
        tar += tar_test::tar_entry(key + (k % 2 ? ".jpeg" : ".jpg"), img);
        tar += tar_test::tar_entry(key + ".txt", "a caption");
    }
    tar += tar_test::end_of_archive;
    const fs::path p = dir / "shard-000.tar";
    tar_test::spill(p, tar);
    return p;
}

} // namespace

TEST_CASE("decode_image decodes shard samples: the first image field present, the label from cls")
{
    temp_dir d;
    const auto p = make_shard(d.path, 6);
    auto pipe = shard::shards(p.string()) | image::decode_image();
    std::vector<image::decoded> got;
    for (auto& x : pipe) got.push_back(std::move(x));
    REQUIRE(got.size() == 6);
    for (int k = 0; k < 6; ++k) {
        CAPTURE(k);
        CHECK(got[k].key == "train/s" + std::to_string(k));
        CHECK(got[k].origin == p.string());
        CHECK(got[k].label == k % 3);
        CHECK(got[k].index == std::uint64_t(k));
        CHECK(got[k].image.width == 64 + 8 * std::uint32_t(k));
        CHECK(got[k].image.height == 48);
        CHECK(got[k].image.channels == 3);
    }
}

TEST_CASE("decode_image augments by seed, epoch and key: the same in every run of an epoch, different between epochs")
{
    temp_dir d;
    const auto p = make_shard(d.path, 4);
    auto run = [&](std::uint64_t epoch) {
        auto pipe = shard::shards(p.string()) |
                    image::decode_image({.decode = {.size = {32, 32}, .crop = image::crop_mode::random_resized, .flip = 0.5, .seed = 9}});
        pipe.set_epoch(epoch);
        std::vector<std::vector<std::uint8_t>> px;
        for (auto& x : pipe) {
            CHECK(x.image.width == 32);
            CHECK(x.image.height == 32);
            px.emplace_back(x.image.data().begin(), x.image.data().end());
        }
        return px;
    };
    const auto a = run(1), b = run(1), c = run(2);
    REQUIRE(a.size() == 4);
    CHECK(a == b);
    CHECK(a != c);
    // And it is what the decoder gives for the same key and epoch (what decode_one shows).
    const auto bytes = make_jpeg(64, 48, TJSAMP_420, 90);
    const auto img = image::decoder{}.decode(bytes, {.size = {32, 32}, .crop = image::crop_mode::random_resized, .flip = 0.5, .seed = 9},
                                             {.key = "train/s0", .epoch = 1});
    CHECK(std::vector<std::uint8_t>(img.data().begin(), img.data().end()) == a[0]);
}

TEST_CASE("a bad image fails the pipeline with its key and shard, or is skipped and counted")
{
    temp_dir d;
    const auto p = make_shard(d.path, 5, {2});
    {
        auto pipe = shard::shards(p.string()) | image::decode_image();
        std::string what;
        try {
            for (auto& x : pipe) (void)x;
        } catch (const conveyor::error& e) {
            what = e.what();
            CHECK(e.code() == image::errc::not_an_image);
        }
        CHECK(what.find("train/s2") != std::string::npos);
        CHECK(what.find("shard-000.tar") != std::string::npos);
        CHECK(what.find("decode_image") != std::string::npos);
    }
    {
        auto stats = std::make_shared<image::decode_stats>();
        auto pipe = shard::shards(p.string()) | image::decode_image({.errors = conveyor::on_error::skip, .stats = stats});
        auto r = pipe.run();
        std::vector<std::string> keys;
        for (auto& x : r) keys.push_back(x.key);
        CHECK(keys == std::vector<std::string>{"train/s0", "train/s1", "train/s3", "train/s4"});
        CHECK(r.stats().skipped == 1);
        CHECK(stats->decoded == 4);
    }
}

TEST_CASE("a sample without an image field or with a bad label is an error saying so")
{
    temp_dir d;
    const auto no_image = d.path / "no_image.tar", bad_label = d.path / "bad_label.tar";
    tar_test::spill(no_image, tar_test::tar_entry("a.txt", "no image here") + tar_test::tar_entry("a.cls", "1") + tar_test::end_of_archive);
    tar_test::spill(bad_label, tar_test::tar_entry("b.jpg", as_string(make_jpeg(16, 16, TJSAMP_444, 90))) +
                                   tar_test::tar_entry("b.cls", "seven") + tar_test::end_of_archive);
    auto first_error = [&](const fs::path& p, image::decode_image_options o) {
        std::string what;
        try {
            for (auto& x : shard::shards(p.string()) | image::decode_image(std::move(o))) (void)x;
        } catch (const conveyor::error& e) {
            what = e.what();
        }
        return what;
    };
    const auto missing = first_error(no_image, {});
    CHECK(missing.find("none of the image fields (jpg, jpeg, png, webp, avif)") != std::string::npos);
    CHECK(missing.find("which has: txt, cls") != std::string::npos);
    const auto label = first_error(bad_label, {});
    CHECK(label.find("not a decimal integer") != std::string::npos);
    CHECK(label.find("\"seven\"") != std::string::npos);
    CHECK(label.find("bad_label.tar") != std::string::npos);
    // No label field asked for: label -1, no error.
    int n = 0;
    for (auto& x : shard::shards(bad_label.string()) | image::decode_image({.label_field = ""})) {
        CHECK(x.label == -1);
        ++n;
    }
    CHECK(n == 1);
    CHECK(image::detail::parse_label(" 42\n", "cls", "k", "u") == 42);
    CHECK(image::detail::parse_label("-1", "cls", "k", "u") == -1);
    CHECK_THROWS_WITH(image::detail::parse_label("", "cls", "k", "u"), doctest::Contains("not a decimal integer"));
    CHECK_THROWS_WITH(image::detail::parse_label("4 2", "cls", "k", "u"), doctest::Contains("not a decimal integer"));
}

TEST_CASE("decode_image decodes file blobs with the ImageFolder class as label")
{
    temp_dir d;
    for (const char* cls : {"cat", "dog"})
        for (int k = 0; k < 3; ++k) {
            fs::create_directories(d.path / cls);
            tar_test::spill(d.path / cls / ("img" + std::to_string(k) + ".jpg"), as_string(make_jpeg(40, 30, TJSAMP_422, 90)));
        }
    auto pipe = conveyor::file::files(conveyor::file::walk(d.path, {.labels = true})) |
                image::decode_image({.decode = {.format = image::pixel_format::gray, .size = {20, 15}}});
    std::map<std::string, std::int64_t> labels;
    for (auto& x : pipe) {
        CHECK(x.image.channels == 1);
        CHECK(x.image.width == 20);
        CHECK(x.origin.find(x.key) != std::string::npos);
        labels[x.key] = x.label;
    }
    REQUIRE(labels.size() == 6);
    CHECK(labels["cat/img0.jpg"] == 0);
    CHECK(labels["dog/img2.jpg"] == 1);
}

TEST_CASE("encoded_image_of and decode_into give what the stage gives (the batch path)")
{
    temp_dir d;
    const auto p = make_shard(d.path, 4);
    const image::decode_image_options o{.decode = {.size = {24, 24}, .crop = image::crop_mode::random_resized, .flip = 0.5, .seed = 2}};
    auto staged = shard::shards(p.string()) | image::decode_image(o);
    staged.set_epoch(5);
    std::vector<std::vector<std::uint8_t>> want;
    for (auto& x : staged) want.emplace_back(x.image.data().begin(), x.image.data().end());
    REQUIRE(want.size() == 4);

    auto raw = shard::shards(p.string());
    const image::decoder dec;
    std::vector<std::uint8_t> slab(4 * 24 * 24 * 3);
    std::size_t k = 0;
    for (auto& s : raw) {
        const auto e = image::encoded_image_of(s, o);
        CHECK(e.key == s.key);
        CHECK(e.label == std::int64_t(k % 3));
        dec.decode_into(e.bytes, o.decode, {.key = e.key, .origin = e.origin, .epoch = 5},
                        std::span(slab).subspan(k * 24 * 24 * 3, 24 * 24 * 3));
        CHECK(std::equal(want[k].begin(), want[k].end(), slab.begin() + std::ptrdiff_t(k * 24 * 24 * 3)));
        ++k;
    }
    CHECK(k == 4);
}

TEST_CASE("decode_batches gives each shard sample's id with its image, skipped ones left out, for resume")
{
    temp_dir d;
    const auto p = make_shard(d.path, 7, {2});
    std::vector<shard::sample> samples;
    for (auto& s : shard::shards(p.string())) samples.push_back(std::move(s));
    REQUIRE(samples.size() == 7);

    auto pipe = shard::shards(p.string()) |
                image::decode_batches({.decode = {.size = {16, 16}}, .errors = conveyor::on_error::skip}, {.size = 4});
    std::vector<image::image_batch> batches;
    for (auto& b : pipe) batches.push_back(std::move(b));
    REQUIRE(batches.size() == 2); // 6 good samples: 4 and 2
    std::vector<int> expect{0, 1, 3, 4, 5, 6};
    std::size_t g = 0;
    for (const auto& b : batches) {
        REQUIRE(b.ids.size() == b.size());
        for (std::size_t i = 0; i < b.size(); ++i, ++g) {
            const auto& s = samples[expect[g]];
            CAPTURE(g);
            CHECK(b.keys[i] == s.key);
            CHECK(b.ids[i].index == s.index);
            CHECK(b.ids[i].end == s.end);
            CHECK(b.ids[i].work == s.work);
            CHECK(b.ids[i].shard == s.shard);
        }
    }
    CHECK(g == expect.size());
}
