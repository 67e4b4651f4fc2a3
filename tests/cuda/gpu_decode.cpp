// Tests of the GPU decode stage (conveyor/cuda/decode.hpp) and of nvJPEG's loader: without
// nvJPEG the loader says why; on a GPU the stage's batches hold the CPU path's crops (within
// a stated tolerance), real JPEGs of every kind land in their slots, and bad images fail or
// are skipped as on the CPU.
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/stages.hpp>
#include <conveyor/cuda/decode.hpp>
#if CONVEYOR_WITH_GPU_KERNELS
#include <conveyor/cuda/detail/jpeg_decoder.hpp>
#endif
#include <conveyor/cuda/device.hpp>
#include <conveyor/cuda/nvjpeg.hpp>
#include <conveyor/cuda/staging.hpp>
#include <conveyor/image/batch.hpp>
#include <conveyor/image/encode.hpp>
#include <conveyor/image/synthetic.hpp>

#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace cv = conveyor;
namespace cc = conveyor::cuda;
namespace image = conveyor::image;

namespace {

/// An encoded image with its key and label, to make blobs of (blobs are move-only).
struct raw {
    std::string key;
    std::string bytes;
    std::int64_t label = -1;
};

/// A pipeline of blobs made from `images`, in order.
cv::pipeline<cv::blob> blobs_of(std::vector<raw> images)
{
    auto v = std::make_shared<const std::vector<raw>>(std::move(images));
    return cv::generate(v->size(), [v](std::uint64_t k) {
        const raw& r = (*v)[k];
        cv::blob b;
        b.key = r.key;
        b.label = r.label;
        b.index = k;
        b.data = cv::buffer::copy_of(std::string_view(r.bytes));
        return b;
    });
}

/// `count` photo-like JPEGs (the synthetic dataset's drawings, at quality 90), label k % 10.
std::vector<raw> photos(std::uint64_t count, std::uint32_t w = 500, std::uint32_t h = 375)
{
    std::vector<raw> out;
    for (std::uint64_t k = 0; k < count; ++k) {
        image::synthetic_images o{.classes = 10, .width = w, .height = h, .seed = 3};
        const auto px = image::draw_synthetic_image(o, k % 10, k / 10);
        const cv::buffer jpg = image::encode_jpeg(px, w, h, image::pixel_format::rgb, {.quality = 90});
        out.push_back({"photo/" + std::to_string(k), std::string(jpg.view()), std::int64_t(k % 10)});
    }
    return out;
}

/// The files of Go's image test data (Debian golang-1.19-src) whose names end in `suffix`
/// (truncated ones left out); empty where the package is not installed.
std::vector<raw> go_images(const std::string& suffix)
{
    std::vector<raw> out;
    const char* env = std::getenv("CONVEYOR_GO_IMAGE_TESTDATA");
    const std::filesystem::path dir = env ? env : "/usr/share/go-1.19/src/image/testdata";
    std::error_code ec;
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
        if (e.path().string().ends_with(suffix) && e.path().string().find("truncated") == std::string::npos) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
        std::ifstream in(f, std::ios::binary);
        out.push_back({f.filename().string(), std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), -1});
    }
    return out;
}

std::vector<std::uint8_t> to_host(const void* p, std::size_t bytes)
{
    std::vector<std::uint8_t> v(bytes);
    REQUIRE(cudaMemcpy(v.data(), p, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
}

/// Every image of a run as bytes, with the keys and labels, from the CPU path.
struct collected {
    std::vector<std::uint8_t> pixels;
    std::vector<std::string> keys;
    std::vector<std::int64_t> labels;
};

template <class Pipe>
collected from_cpu(Pipe&& p)
{
    collected c;
    for (auto& b : p) {
        const auto* px = static_cast<const std::uint8_t*>(b.images.data);
        c.pixels.insert(c.pixels.end(), px, px + b.images.bytes());
        const auto* l = static_cast<const std::int64_t*>(b.labels.data);
        c.labels.insert(c.labels.end(), l, l + b.size());
        c.keys.insert(c.keys.end(), b.keys.begin(), b.keys.end());
    }
    return c;
}

template <class Pipe>
collected from_gpu(Pipe&& p)
{
    collected c;
    for (auto& b : p) {
        b.synchronize();
        const auto px = to_host(b.tensors()[0].data, b.tensors()[0].bytes);
        c.pixels.insert(c.pixels.end(), px.begin(), px.end());
        const auto l = to_host(b.tensors()[1].data, b.tensors()[1].bytes);
        const auto* lp = reinterpret_cast<const std::int64_t*>(l.data());
        c.labels.insert(c.labels.end(), lp, lp + b.host().size());
        CHECK(b.host().images.data == nullptr);
        CHECK(b.tensors()[0].shape == b.host().images.shape);
        c.keys.insert(c.keys.end(), b.host().keys.begin(), b.host().keys.end());
    }
    return c;
}

/// Mean absolute difference of two uint8 buffers, and the largest.
std::pair<double, int> difference(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b)
{
    REQUIRE(a.size() == b.size());
    double sum = 0;
    int most = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const int d = std::abs(int(a[i]) - int(b[i]));
        sum += d;
        most = std::max(most, d);
    }
    return {a.empty() ? 0.0 : sum / double(a.size()), most};
}

} // namespace

TEST_CASE("nvJPEG's loader: a library that is not there, or lacks the functions, is a reason, not a crash")
{
    const std::string missing[] = {"/nonexistent/libnvjpeg.so.13"};
    const auto a = cc::detail::load_nvjpeg(missing, 1);
    CHECK(!a);
    CHECK(a.reason.find("/nonexistent/libnvjpeg.so.13") != std::string::npos);
    CHECK(a.reason.find("CPU") != std::string::npos);
    const std::string wrong[] = {"libz.so.1"}; // a real library, not nvJPEG
    const auto b = cc::detail::load_nvjpeg(wrong, 1);
    CHECK(!b);
    CHECK(b.reason.find("lacks nvjpegGetProperty") != std::string::npos);
    // Whatever this machine has, the process-wide answer is consistent.
    const auto& lib = cc::nvjpeg();
    CHECK((lib.api != nullptr) == lib.reason.empty());
    MESSAGE("nvJPEG here: " << (lib ? lib.path + " " + lib.version : lib.reason));
}

#if CONVEYOR_WITH_GPU_KERNELS
TEST_CASE("jpeg_decoder::probe: what the GPU path takes, read from the frame header; truncated files go to the CPU")
{
    using cc::detail::jpeg_decoder;
    const auto one = photos(1, 64, 48).front();
    const auto bytes = [](const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); };
    std::uint32_t w = 0, h = 0;
    bool hw = false;
    CHECK(jpeg_decoder::probe(bytes(one.bytes), true, w, h, hw));
    CHECK(w == 64);
    CHECK(h == 48);
    CHECK(hw);
    const std::string cut = one.bytes.substr(0, one.bytes.size() / 2);
    CHECK_FALSE(jpeg_decoder::probe(bytes(cut), true, w, h, hw)); // strict: no EOI, the CPU path decides
    CHECK(jpeg_decoder::probe(bytes(cut), false, w, h, hw));      // lenient: the GPU decodes what is there
    CHECK(jpeg_decoder::probe(bytes(one.bytes + std::string(3, '\0')), true, w, h, hw)); // zero padding after EOI
    CHECK_FALSE(jpeg_decoder::probe(bytes(std::string("\x89PNG\r\n\x1a\n")), true, w, h, hw));
    CHECK_FALSE(jpeg_decoder::probe(bytes(std::string("\xFF\xD8\xFF")), false, w, h, hw));
    const auto go = go_images(".jpeg");
    if (go.empty()) {
        MESSAGE("Go's test JPEGs: skipped, golang-1.19-src is not installed");
        return;
    }
    // What the engines take: baseline (or extended) Huffman, YCbCr with chroma 1x1 and luma
    // 1x1, 2x1, 2x2 or 1x2, or gray. Progressive ones go to the hybrid decoders; CMYK and
    // RGB-coded ones (Adobe transform 0) to the CPU, which reads them right.
    // A gray image with 2x2 sampling factors came out wrong from the engines (mean |diff| 69
    // levels on an H200, nvJPEG 13.0): the hybrid decoders take it.
    const std::set<std::string> engines{"video-001.jpeg",         "video-001.q50.420.jpeg", "video-001.q50.422.jpeg",
                                        "video-001.q50.440.jpeg", "video-001.q50.444.jpeg", "video-005.gray.jpeg",
                                        "video-005.gray.q50.jpeg"};
    const std::set<std::string> cpu{"video-001.cmyk.jpeg", "video-001.rgb.jpeg"};
    for (const auto& g : go) {
        CAPTURE(g.key);
        const bool ok = jpeg_decoder::probe(bytes(g.bytes), true, w, h, hw);
        if (cpu.contains(g.key)) {
            CHECK_FALSE(ok);
            continue;
        }
        REQUIRE(ok);
        CHECK(w == 150);
        CHECK(h == 103);
        CHECK(hw == engines.contains(g.key));
    }
}
#endif

TEST_CASE("cuda::decode_batches checks its options as decode_batches does, and its own")
{
    using cv::error;
    CHECK_THROWS_AS(cc::decode_batches({}, {.size = 4}), error); // no output size
    CHECK_THROWS_AS(cc::decode_batches({.decode = {.size = {8, 8}}}, {.size = 4}, {.ring = 0}), error);
    CHECK_THROWS_AS(cc::decode_batches({.decode = {.size = {8, 8}}}, {.size = 4}, {.cpu_share = 2}), error);
    CHECK_NOTHROW(cc::decode_batches({.decode = {.size = {8, 8}}}, {.size = 4}));
    cv::image::decode_image_options extra{.decode = {.size = {8, 8}}};
    extra.extra_fields = {"txt"};
    try {
        cc::decode_batches(extra, {.size = 4});
        FAIL("extra fields were taken");
    } catch (const error& e) {
        CHECK(std::string(e.what()).find("cuda::to_cuda") != std::string::npos); // it says what batches them
    }
}

TEST_SUITE("gpu")
{
    TEST_CASE("GPU decode gives the CPU path's random-resized crops and flips: same keys, labels, and pixels within 2 levels")
    {
        cv::runtime rt;
        const image::decode_image_options d{
            .decode = {.size = {224, 224}, .crop = image::crop_mode::random_resized, .flip = 0.5, .seed = 11}};
        const std::uint64_t count = 96;
        for (auto layout : {image::tensor_layout::nhwc, image::tensor_layout::nchw}) {
            const image::collate_options b{.size = 32, .layout = layout};
            const collected cpu = from_cpu(blobs_of(photos(count)).on(rt) | image::decode_batches(d, b));
            auto stage = cc::decode_batches(d, b, {.cpu_share = 0});
            const collected gpu = from_gpu(blobs_of(photos(count)).on(rt) | stage);
            CHECK(gpu.keys == cpu.keys);
            CHECK(gpu.labels == cpu.labels);
            const auto [mean, most] = difference(gpu.pixels, cpu.pixels);
            const auto s = stage.stats();
            MESSAGE("GPU vs CPU, " << (layout == image::tensor_layout::nhwc ? "NHWC" : "NCHW") << " uint8, " << count
                                   << " random-resized crops 224: mean |diff| " << mean << " levels, max " << most << "; "
                                   << s.decoder << "; hardware " << s.hardware << ", hybrid " << s.hybrid << ", CPU " << s.cpu);
            CHECK(mean <= 2.0);
            CHECK(s.hardware + s.hybrid + s.cpu == count);
            CHECK(s.hardware + s.hybrid > 0);
        }
    }

    TEST_CASE("GPU decode: batches queued back to back, all held and read at the end, each hold their own images")
    {
        // The decoder's sides and the stage's items are reused while earlier batches are
        // still on the device: nothing of a later batch may land in an earlier one.
        cv::runtime rt;
        const image::decode_image_options d{
            .decode = {.size = {64, 64}, .crop = image::crop_mode::random_resized, .flip = 0.5, .seed = 23}};
        const image::collate_options b{.size = 8};
        const std::uint64_t count = 80; // 10 batches
        const collected cpu = from_cpu(blobs_of(photos(count, 320, 240)).on(rt) | image::decode_batches(d, b));
        auto stage = cc::decode_batches(d, b, {.ring = 10, .cpu_share = 0});
        std::vector<cc::device_batch<image::image_batch>> held;
        for (auto& batch : blobs_of(photos(count, 320, 240)).on(rt) | stage) held.push_back(std::move(batch));
        REQUIRE(held.size() == 10);
        collected gpu;
        for (auto& batch : held) {
            batch.synchronize();
            const auto px = to_host(batch.tensors()[0].data, batch.tensors()[0].bytes);
            gpu.pixels.insert(gpu.pixels.end(), px.begin(), px.end());
            gpu.keys.insert(gpu.keys.end(), batch.host().keys.begin(), batch.host().keys.end());
        }
        CHECK(gpu.keys == cpu.keys);
        REQUIRE(gpu.pixels.size() == cpu.pixels.size());
        const std::size_t per_batch = gpu.pixels.size() / held.size();
        double worst = 0;
        for (std::size_t k = 0; k < held.size(); ++k) {
            const auto at = static_cast<std::ptrdiff_t>(k * per_batch), end = at + static_cast<std::ptrdiff_t>(per_batch);
            const auto [mean, most] = difference(std::vector<std::uint8_t>(gpu.pixels.begin() + at, gpu.pixels.begin() + end),
                                                 std::vector<std::uint8_t>(cpu.pixels.begin() + at, cpu.pixels.begin() + end));
            CHECK_MESSAGE(mean <= 2.0, "batch " << k << ": mean |diff| " << mean << ", max " << most);
            worst = std::max(worst, mean);
        }
        MESSAGE("10 batches held, then read: the worst batch's mean |diff| " << worst);
        CHECK(stage.stats().hardware + stage.stats().hybrid == count);
    }

    TEST_CASE("GPU decode: normalized float16 NCHW matches the CPU path's within its tolerance")
    {
        cv::runtime rt;
        const image::decode_image_options d{.decode = {.size = {160, 128}, .crop = image::crop_mode::center, .seed = 3}};
        const image::collate_options b{.size = 16,
                                     .layout = image::tensor_layout::nchw,
                                     .type = image::dtype::float16,
                                     .mean = image::imagenet_mean,
                                     .std = image::imagenet_std};
        collected cpu = from_cpu(blobs_of(photos(40, 640, 480)).on(rt) | image::decode_batches(d, b));
        collected gpu = from_gpu(blobs_of(photos(40, 640, 480)).on(rt) | cc::decode_batches(d, b, {.cpu_share = 0}));
        REQUIRE(cpu.pixels.size() == gpu.pixels.size());
        double sum = 0;
        const std::size_t n = cpu.pixels.size() / 2;
        for (std::size_t i = 0; i < n; ++i) {
            std::uint16_t x, y;
            std::memcpy(&x, &cpu.pixels[2 * i], 2);
            std::memcpy(&y, &gpu.pixels[2 * i], 2);
            sum += std::abs(image::half_to_float(x) - image::half_to_float(y));
        }
        // 2 levels of 255, divided by the smallest std: the bound of the uint8 case, normalized.
        const double mean = sum / double(n);
        MESSAGE("float16 NCHW normalized, center crops: mean |diff| " << mean << " (2 levels = " << 2.0 / 255 / 0.224 << ")");
        CHECK(mean <= 2.0 / 255 / 0.224);
        CHECK(gpu.labels == cpu.labels);
    }

    TEST_CASE("GPU decode: the CPU's share, measured, lands in the same slots as the GPU's")
    {
        cv::runtime rt;
        const image::decode_image_options d{.decode = {.size = {96, 96}, .crop = image::crop_mode::random_resized, .seed = 5}};
        const image::collate_options b{.size = 24};
        const collected cpu = from_cpu(blobs_of(photos(120)).on(rt) | image::decode_batches(d, b));
        auto stage = cc::decode_batches(d, b); // measured split
        const collected gpu = from_gpu(blobs_of(photos(120)).on(rt) | stage);
        CHECK(gpu.keys == cpu.keys);
        CHECK(difference(gpu.pixels, cpu.pixels).first <= 2.0);
        const auto s = stage.stats();
        CHECK(s.cpu > 0); // every batch keeps the CPU measured
        CHECK(s.split.batches == 5);
        MESSAGE("measured split over 5 batches: GPU " << s.split.gpu_rate << " img/s, CPU " << s.split.cpu_rate << " img/s, CPU share "
                                                      << s.split.cpu_share);
    }

    TEST_CASE("GPU decode: real JPEGs of every kind (Go's test images) decode, on the GPU or the CPU, as the CPU path does")
    {
        auto files = go_images(".jpeg");
        if (files.empty()) {
            MESSAGE("skipped: Go's image test data is not installed (golang-1.19-src)");
            return;
        }
        cv::runtime rt;
        // CMYK is refused by both paths (skipped); the rest decode.
        const image::decode_image_options d{.decode = {.size = {64, 48}, .crop = image::crop_mode::random_resized, .seed = 2},
                                            .errors = cv::on_error::skip};
        const image::collate_options b{.size = 4};
        const collected cpu = from_cpu(blobs_of(files).on(rt) | image::decode_batches(d, b));
        auto stage = cc::decode_batches(d, b, {.cpu_share = 0});
        const collected gpu = from_gpu(blobs_of(files).on(rt) | stage);
        REQUIRE(gpu.keys == cpu.keys);
        const auto s = stage.stats();
        // Image by image: the usual subsamplings must match as the photos do; the rare ones
        // (4:1:0, 4:1:1, and chroma not 1x1) are reported, as nvJPEG upsamples them its own way.
        const std::size_t item = std::size_t{64} * 48 * 3;
        double usual_sum = 0;
        std::size_t usual = 0;
        for (std::size_t i = 0; i < gpu.keys.size(); ++i) {
            const std::vector<std::uint8_t> a(gpu.pixels.begin() + i * item, gpu.pixels.begin() + (i + 1) * item);
            const std::vector<std::uint8_t> c(cpu.pixels.begin() + i * item, cpu.pixels.begin() + (i + 1) * item);
            const auto [m, most] = difference(a, c);
            const bool rare = gpu.keys[i].find(".410") != std::string::npos || gpu.keys[i].find(".411") != std::string::npos ||
                              gpu.keys[i].find("221212") != std::string::npos;
            MESSAGE(gpu.keys[i] << ": mean |diff| " << m << ", max " << most << std::string(rare ? " (rare subsampling)" : ""));
            CHECK(m <= 3.0); // each image: no decoder gets one wrong
            if (!rare) {
                usual_sum += m;
                ++usual;
            }
        }
        MESSAGE(files.size() << " Go test JPEGs: hardware " << s.hardware << ", hybrid " << s.hybrid << ", CPU " << s.cpu
                             << " (refused " << s.refused << ", skipped " << s.skipped << ")");
        CHECK(usual_sum / double(std::max<std::size_t>(usual, 1)) <= 2.0);
        CHECK(s.hybrid > 0);   // progressive ones: not for the engines
        CHECK(s.hardware > 0);
    }

    TEST_CASE("GPU decode: a corrupt JPEG fails the run naming it, or is skipped with its slot filled by the next image")
    {
        cv::runtime rt;
        const std::vector<raw> good_ones = photos(10);
        raw bad{"broken.jpg", good_ones[0].bytes.substr(0, good_ones[0].bytes.size() / 3)}; // a JPEG cut short
        const auto pngs = go_images("video-001.png"); // a PNG, where Go's test data is installed
        std::vector<raw> with_bad;
        for (std::size_t i = 0; i < good_ones.size(); ++i) {
            if (i == 3) with_bad.push_back(bad);
            if (i == 5 && !pngs.empty()) with_bad.push_back(pngs[0]);
            with_bad.push_back(good_ones[i]);
        }
        const image::decode_image_options fail{.decode = {.size = {64, 64}}};
        try {
            for (auto& b : blobs_of(with_bad).on(rt) | cc::decode_batches(fail, {.size = 4}, {.cpu_share = 0})) (void)b;
            FAIL("a corrupt JPEG must fail the run");
        } catch (const cv::error& e) {
            CHECK(std::string(e.what()).find("broken.jpg") != std::string::npos);
        }
        image::decode_image_options skip = fail;
        skip.errors = cv::on_error::skip;
        auto stage = cc::decode_batches(skip, {.size = 4}, {.cpu_share = 0});
        const collected got = from_gpu(blobs_of(with_bad).on(rt) | stage);
        REQUIRE(got.keys.size() == with_bad.size() - 1); // full batches, then the rest
        CHECK(got.keys[3] == good_ones[3].key);          // the slot of the bad one, filled by the next
        if (!pngs.empty()) CHECK(got.keys[5] == pngs[0].key);
        CHECK(stage.stats().skipped == 1);
        // Each slot holds its own image: compare with the CPU path on the good ones.
        std::vector<raw> good;
        for (auto& x : with_bad)
            if (x.key != "broken.jpg") good.push_back(x);
        const collected cpu = from_cpu(blobs_of(good).on(rt) | image::decode_batches(skip, {.size = 4}));
        CHECK(cpu.keys == got.keys);
        CHECK(difference(cpu.pixels, got.pixels).first <= 2.0);
    }
}
