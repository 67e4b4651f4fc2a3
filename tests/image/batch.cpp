// Tests of conveyor/image/batch.hpp: decode_batches collates in input order with labels and
// keys, keeps or drops the partial batch, normalizes to float32/float16 like torchvision,
// skips bad images without holes, and takes its memory from a bounded pool of reused slabs.
#include "support.hpp"

#include "../support/common.hpp"

#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/stages.hpp>
#include <conveyor/image/batch.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace image = conveyor::image;
using namespace conveyor_test_image;

namespace {

const image::decode_options small{.size = {16, 12}};

/// JPEG number k: a picture of its own width, so every item decodes differently.
std::vector<std::byte> jpeg_of(std::uint64_t k)
{
    return make_jpeg(40 + 8 * std::uint32_t(k % 7), 32 + 4 * std::uint32_t(k % 5), TJSAMP_420, 90);
}

/// A pipeline of `count` file blobs; blob k has label k % 3 and key "img/k"; the indices in
/// `bad` hold bytes that are not an image.
conveyor::pipeline<conveyor::blob> blobs(std::uint64_t count, std::vector<std::uint64_t> bad = {})
{
    return conveyor::generate(count, [bad](std::uint64_t k) {
        conveyor::blob b;
        b.key = "img/" + std::to_string(k);
        b.origin = "/data/" + b.key + ".jpg";
        b.label = std::int64_t(k % 3);
        b.index = k;
        if (std::find(bad.begin(), bad.end(), k) != bad.end()) {
            b.data = conveyor::buffer::copy_of(std::string_view("this is not an image"));
        } else {
            const auto j = jpeg_of(k);
            b.data = conveyor::buffer::copy_of(std::span<const std::byte>(j));
        }
        return b;
    });
}

/// What the decoder alone makes of item k (HWC uint8).
std::vector<std::uint8_t> reference(std::uint64_t k, const image::decode_options& o = small)
{
    const auto j = jpeg_of(k);
    const image::decoder dec;
    const std::string key = "img/" + std::to_string(k);
    auto img = dec.decode(j, o, {.key = key});
    return {img.data().begin(), img.data().end()};
}

conveyor::runtime& test_runtime()
{
    static conveyor::runtime rt({.io_threads = 1, .compute_threads = 2});
    return rt;
}

std::vector<image::image_batch> collect(conveyor::pipeline<image::image_batch> p)
{
    std::vector<image::image_batch> out;
    for (auto& b : p.on(test_runtime())) out.push_back(std::move(b));
    return out;
}

/// Checks that slot `i` of uint8 nhwc batch `b` holds item `k`, with its label and key.
void check_slot(const image::image_batch& b, std::size_t i, std::uint64_t k)
{
    CAPTURE(i);
    CAPTURE(k);
    const auto ref = reference(k);
    REQUIRE(ref.size() == 16 * 12 * 3);
    const auto* px = static_cast<const std::uint8_t*>(b.images.data) + i * ref.size();
    CHECK(std::memcmp(px, ref.data(), ref.size()) == 0);
    CHECK(static_cast<const std::int64_t*>(b.labels.data)[i] == std::int64_t(k % 3));
    CHECK(b.keys[i] == "img/" + std::to_string(k));
    REQUIRE(b.ids.size() == b.size());
    CHECK(b.ids[i].shard == k); // a blob's id: its whole unit, at its position in the source's list
    CHECK(b.ids[i].whole);
}

} // namespace

TEST_CASE("decode_batches collates images in input order into nhwc uint8 batches with their labels and keys")
{
    auto batches = collect(blobs(10) | image::decode_batches({.decode = small}, {.size = 4}));
    REQUIRE(batches.size() == 3);
    std::uint64_t k = 0;
    for (std::size_t n = 0; n < batches.size(); ++n) {
        const auto& b = batches[n];
        CHECK(b.index == n);
        const std::size_t count = n < 2 ? 4 : 2;
        REQUIRE(b.size() == count);
        CHECK(b.images.type == image::dtype::uint8);
        CHECK(b.images.shape == std::vector<std::int64_t>{std::int64_t(count), 12, 16, 3});
        CHECK(b.images.strides == std::vector<std::int64_t>{12 * 16 * 3, 16 * 3, 3, 1});
        CHECK(b.labels.type == image::dtype::int64);
        CHECK(b.labels.shape == std::vector<std::int64_t>{std::int64_t(count)});
        CHECK(b.images.data == static_cast<void*>(b.slab.data())); // in the slab: no copy after decode
        for (std::size_t i = 0; i < count; ++i) check_slot(b, i, k++);
    }
}

TEST_CASE("decode_batches drops the partial last batch when told to")
{
    auto batches = collect(blobs(10) | image::decode_batches({.decode = small}, {.size = 4, .partial = false}));
    REQUIRE(batches.size() == 2);
    CHECK(batches[1].keys.back() == "img/7");
    auto exact = collect(blobs(8) | image::decode_batches({.decode = small}, {.size = 4}));
    CHECK(exact.size() == 2);
}

TEST_CASE("decode_batches normalizes float32 and float16 nchw batches as torchvision's ToTensor and Normalize do")
{
    const image::collate_options f32{.size = 3, .layout = image::tensor_layout::nchw, .type = image::dtype::float32,
                                   .mean = image::imagenet_mean, .std = image::imagenet_std};
    image::collate_options f16 = f32;
    f16.type = image::dtype::float16;
    auto b32 = collect(blobs(5) | image::decode_batches({.decode = small}, f32));
    auto b16 = collect(blobs(5) | image::decode_batches({.decode = small}, f16));
    REQUIRE(b32.size() == 2);
    REQUIRE(b16.size() == 2);
    CHECK(b32[0].images.shape == std::vector<std::int64_t>{3, 3, 12, 16});
    CHECK(b32[0].images.strides == std::vector<std::int64_t>{3 * 12 * 16, 12 * 16, 16, 1});
    CHECK(b16[1].images.shape == std::vector<std::int64_t>{2, 3, 12, 16});
    std::size_t compared = 0;
    for (std::uint64_t k = 0; k < 5; ++k) {
        const auto ref = reference(k);
        const auto* p32 = static_cast<const float*>(b32[k / 3].images.data) + (k % 3) * ref.size();
        const auto* p16 = static_cast<const std::uint16_t*>(b16[k / 3].images.data) + (k % 3) * ref.size();
        for (std::size_t c = 0; c < 3; ++c)
            for (std::size_t i = 0; i < 16 * 12; ++i) {
                const float want = (float(ref[i * 3 + c]) / 255.0f - image::imagenet_mean[c]) / image::imagenet_std[c];
                const float got = p32[c * 16 * 12 + i];
                if (got != want) FAIL_CHECK("float32 item " << k << " channel " << c << " pixel " << i << ": " << got << " != " << want);
                if (p16[c * 16 * 12 + i] != image::float_to_half(want))
                    FAIL_CHECK("float16 item " << k << " channel " << c << " pixel " << i);
                ++compared;
            }
    }
    CHECK(compared == 5 * 3 * 16 * 12);
}

TEST_CASE("float_to_half rounds to nearest even, with subnormals, infinities and NaN")
{
    struct known {
        float f;
        std::uint16_t h;
    };
    const known cases[] = {
        {0.0f, 0x0000}, {-0.0f, 0x8000}, {1.0f, 0x3c00}, {-2.0f, 0xc000}, {0.5f, 0x3800},
        {0.1f, 0x2e66},                        // 0.0999755859375
        {65504.0f, 0x7bff},                    // the largest half
        {65519.0f, 0x7bff},                    // below the halfway point to 65536
        {65520.0f, 0x7c00},                    // the tie rounds to even: infinity
        {1e6f, 0x7c00},
        {std::ldexp(1.0f, -14), 0x0400},       // the smallest normal
        {std::ldexp(1.0f, -24), 0x0001},       // the smallest subnormal
        {std::ldexp(1.0f, -25), 0x0000},       // half of it: a tie, to even (zero)
        {std::ldexp(1.5f, -25), 0x0001},       // above the tie
        {std::ldexp(3.0f, -25), 0x0002},       // 1.5 units: a tie, to even (2)
        {std::ldexp(1.0f, -26), 0x0000},
        {std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26), 0x0400}, // rounds up into the normals
        {1.0f + std::ldexp(1.0f, -11), 0x3c00},       // tie between 1 and 1 + 2^-10: even
        {1.0f + 3 * std::ldexp(1.0f, -11), 0x3c02},   // tie between 0x3c01 and 0x3c02: even
        {1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20), 0x3c01},
        {INFINITY, 0x7c00}, {-INFINITY, 0xfc00},
    };
    for (const auto& c : cases) {
        CAPTURE(c.f);
        CHECK(image::float_to_half(c.f) == c.h);
    }
    const std::uint16_t nan = image::float_to_half(NAN);
    CHECK((nan & 0x7c00) == 0x7c00);
    CHECK((nan & 0x03ff) != 0);
    // Every half survives a round trip through float.
    for (std::uint32_t h = 0; h < 0x10000; ++h) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; // NaNs
        if (image::float_to_half(image::half_to_float(std::uint16_t(h))) != h) FAIL_CHECK("half " << h);
    }
#if defined(__FLT16_MAX__)
    // And agrees with the compiler's own conversion on a spread of float bit patterns.
    std::uint64_t z = 12345;
    for (int i = 0; i < 200000; ++i) {
        const auto bits = std::uint32_t(mix(z++));
        const float f = std::bit_cast<float>(bits);
        if (std::isnan(f)) continue;
        const _Float16 want = static_cast<_Float16>(f);
        if (image::float_to_half(f) != std::bit_cast<std::uint16_t>(want)) FAIL_CHECK("float bits " << bits);
    }
#else
    MESSAGE("no _Float16 in this compiler: the comparison with its conversion is skipped");
#endif
}

TEST_CASE("decode_batches skips bad images under on_error::skip: later images take their places, in order")
{
    const std::vector<std::uint64_t> bad{1, 5, 6, 11};
    auto p = (blobs(14, bad) | image::decode_batches({.decode = small, .errors = conveyor::on_error::skip}, {.size = 4}))
                 .on(test_runtime());
    auto run = p.run();
    std::vector<image::image_batch> batches;
    for (auto& b : run) batches.push_back(std::move(b));
    CHECK(run.stats().skipped == 4);
    REQUIRE(batches.size() == 3); // 10 good images: 4, 4, 2
    std::vector<std::uint64_t> good;
    for (std::uint64_t k = 0; k < 14; ++k)
        if (std::find(bad.begin(), bad.end(), k) == bad.end()) good.push_back(k);
    std::size_t g = 0;
    for (const auto& b : batches)
        for (std::size_t i = 0; i < b.size(); ++i) check_slot(b, i, good[g++]);
    CHECK(g == good.size());
}

TEST_CASE("decode_batches fails the run on a bad image by default, naming it")
{
    auto p = blobs(6, {3}) | image::decode_batches({.decode = small}, {.size = 2});
    std::string what;
    try {
        collect(std::move(p));
    } catch (const conveyor::error& e) {
        what = e.what();
    }
    CHECK(what.find("img/3") != std::string::npos);
}

TEST_CASE("decode_batches refuses options it cannot batch with")
{
    CHECK_THROWS_AS(image::decode_batches({}, {.size = 4}), conveyor::error); // no output size
    CHECK_THROWS_AS(image::decode_batches({.decode = small}, {.size = 0}), conveyor::error);
    CHECK_THROWS_AS(image::decode_batches({.decode = small}, {.type = image::dtype::int64}), conveyor::error);
    CHECK_THROWS_AS(image::decode_batches({.decode = small}, {.std = {1.0f, 0.0f, 1.0f}}), conveyor::error);
    auto tiny = std::make_shared<image::slab_pool>(100, 2);
    CHECK_THROWS_AS(image::decode_batches({.decode = small}, {.pool = tiny}), conveyor::error);
}

TEST_CASE("a slow consumer holds the stage back: it waits for slabs, never has more than the bound, and reuses them")
{
    auto stage = image::decode_batches({.decode = small}, {.size = 2, .capacity = 1, .slabs = 3});
    std::set<const void*> addresses;
    std::size_t seen = 0, most_in_use = 0;
    for (auto& b : (blobs(16) | stage).on(test_runtime())) {
        addresses.insert(b.images.data);
        most_in_use = std::max(most_in_use, stage.pool()->stats().in_use);
        std::this_thread::sleep_for(std::chrono::milliseconds(10)); // the stage runs ahead meanwhile
        CHECK(b.keys[0] == "img/" + std::to_string(2 * seen));
        ++seen;
    }
    const auto s = stage.pool()->stats();
    CHECK(seen == 8);
    CHECK(s.max_slabs == 3);
    CHECK(s.allocated <= 3);
    CHECK(s.peak <= 3);
    CHECK(most_in_use <= 3);
    CHECK(addresses.size() <= 3); // 8 batches in at most 3 slabs
    CHECK(s.acquires >= 8);
    CHECK(s.waits > 0);           // it did wait for the consumer
    CHECK(s.in_use == 0);         // all back once the batches are gone
}

TEST_CASE("a consumer may keep every batch when it detaches their slabs: the bound counts the pipeline's slabs only")
{
    auto stage = image::decode_batches({.decode = small}, {.size = 2, .capacity = 1, .slabs = 3});
    std::vector<image::image_batch> kept;
    conveyor_test::finishes_within(std::chrono::seconds(60), "a loop keeping every batch", [&] {
        for (auto& b : (blobs(16) | stage).on(test_runtime())) {
            b.slab.detach();
            b.slab.detach(); // idempotent
            kept.push_back(std::move(b));
        }
    });
    REQUIRE(kept.size() == 8); // without detach, the fourth batch would wait for a slab for ever
    for (std::size_t n = 0; n < kept.size(); ++n)
        for (std::size_t i = 0; i < 2; ++i) check_slot(kept[n], i, 2 * n + i);
    auto s = stage.pool()->stats();
    CHECK(s.in_use == 0);      // detached slabs are out of the bound
    CHECK(s.allocated >= 8);   // the kept batches' memory is their own
    kept.clear();
    s = stage.pool()->stats();
    CHECK(s.allocated <= 3);   // once dropped, the pool keeps at most its bound
}

TEST_CASE("skipped images never deadlock a stage short of slabs: their replacements go into the open batch")
{
    // One slab: the batch being filled has it, so when an image fails, the next one (meant
    // for the next batch, which has no slab) must go into this batch instead of waiting for
    // a slab that only this batch's completion would bring back.
    const std::vector<std::uint64_t> bad{1, 4, 7, 8, 13};
    auto stage = image::decode_batches({.decode = small, .errors = conveyor::on_error::skip}, {.size = 2, .capacity = 1, .slabs = 1});
    std::vector<std::string> keys;
    for (auto& b : (blobs(16, bad) | stage).on(test_runtime())) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        for (std::size_t i = 0; i < b.size(); ++i) check_slot(b, i, std::stoull(b.keys[i].substr(4)));
        keys.insert(keys.end(), b.keys.begin(), b.keys.end());
    }
    std::vector<std::string> want;
    for (std::uint64_t k = 0; k < 16; ++k)
        if (std::find(bad.begin(), bad.end(), k) == bad.end()) want.push_back("img/" + std::to_string(k));
    CHECK(keys == want);
    CHECK(stage.pool()->stats().peak == 1);
}

TEST_CASE("breaking out of a loop over batches stops the stage and gives every slab back")
{
    auto stage = image::decode_batches({.decode = small}, {.size = 2, .capacity = 1, .slabs = 3});
    {
        auto p = (blobs(40) | stage).on(test_runtime());
        for (auto& b : p) {
            CHECK(b.size() == 2);
            break;
        }
    }
    CHECK(stage.pool()->stats().in_use == 0);
}

TEST_CASE("a take after decode_batches ends the run: the stage winds down without waiting for slabs")
{
    auto stage = image::decode_batches({.decode = small}, {.size = 2, .capacity = 1, .slabs = 2});
    auto batches = collect(blobs(40) | stage | conveyor::take(2));
    REQUIRE(batches.size() == 2);
    CHECK(batches[1].keys[1] == "img/3");
    batches.clear();
    CHECK(stage.pool()->stats().in_use == 0);
}

TEST_CASE("a slab pool hands out at most its bound, reuses returned slabs and frees them all through its allocator")
{
    auto allocs = std::make_shared<int>(0), frees = std::make_shared<int>(0);
    image::slab_allocator a{.allocate = [allocs](std::size_t n) { ++*allocs; return std::aligned_alloc(4096, n); },
                            .deallocate = [frees](void* p, std::size_t) { ++*frees; std::free(p); },
                            .kind = image::memory_kind::cuda_host};
    {
        image::slab_pool pool(8192, 2, a);
        auto s1 = pool.try_acquire();
        auto s2 = pool.try_acquire();
        REQUIRE(s1);
        REQUIRE(s2);
        CHECK(s1->size() == 8192);
        CHECK(s1->kind() == image::memory_kind::cuda_host);
        CHECK_FALSE(pool.try_acquire()); // the bound
        const void* first = s1->data();
        image::slab copy = *s1;          // shared: one release when both are gone
        s1.reset();
        CHECK_FALSE(pool.try_acquire());
        copy = {};
        auto s3 = pool.try_acquire();
        REQUIRE(s3);
        CHECK(s3->data() == first);      // reused, not allocated again
        CHECK(pool.stats().allocated == 2);
        CHECK(*allocs == 2);
        CHECK(*frees == 0);
    }
    CHECK(*frees == 2);
}
