// Tests of conveyor/cuda/detail/kernels.hpp: the GPU resampler against the CPU's
// (image::detail::resample, then flip_rows, then convert_image), byte for byte.
#include <conveyor/cuda/detail/kernels.hpp>
#include <conveyor/image/batch.hpp>
#include <conveyor/image/decode.hpp>
#include <conveyor/image/detail/resample.hpp>

#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace image = conveyor::image;
namespace ck = conveyor::cuda::detail;

namespace resample_test {

/// A decoded image as the CPU holds it: HWC, interleaved.
struct picture {
    std::uint32_t width = 0, height = 0;
    unsigned channels = 3;
    std::vector<std::uint8_t> px;
};

/// Noise, with a quarter of the bytes 255: sums of rounded weights then reach past 255,
/// and the clamp must agree too.
picture noise(std::uint32_t w, std::uint32_t h, unsigned c, std::uint32_t seed)
{
    picture p{w, h, c, std::vector<std::uint8_t>(std::size_t{w} * h * c)};
    std::mt19937 rng(seed);
    for (auto& v : p.px) {
        const auto r = rng();
        v = (r & 3u) == 0 ? 255 : static_cast<std::uint8_t>(r >> 8);
    }
    return p;
}

/// One image's part of a launch: its region, flip and slot.
struct job {
    const picture* src = nullptr;
    image::detail::region r{};
    bool flip = false;
    std::uint32_t slot = 0;
};

/// What the batch holds: the output size, channel order, layout and type.
struct batch_spec {
    image::extent size{224, 224};
    image::pixel_format format = image::pixel_format::rgb;
    image::tensor_layout layout = image::tensor_layout::nhwc;
    image::dtype type = image::dtype::uint8;
    std::uint32_t slots = 0;
};

image::decode_options decode_of(const batch_spec& s)
{
    image::decode_options d;
    d.format = s.format;
    d.size = s.size;
    return d;
}

image::collate_options options_of(const batch_spec& s)
{
    image::collate_options b;
    b.size = s.slots;
    b.layout = s.layout;
    b.type = s.type;
    if (s.type != image::dtype::uint8) {
        b.mean = image::imagenet_mean;
        b.std = image::imagenet_std;
    }
    return b;
}

constexpr std::byte unwritten{0xA5}; // what both batches start as: a slot no job names keeps it

/// The batch as the CPU path makes it: the decoder's channel order (bgr: swapped before the
/// resampler, as the decoder produces it), resample, flip_rows, convert_image.
std::vector<std::byte> cpu_batch(const batch_spec& s, const std::vector<job>& jobs)
{
    const auto d = decode_of(s);
    const auto b = options_of(s);
    const auto plan = image::detail::make_batch_plan(d, b);
    std::vector<std::byte> out(plan.item_bytes * s.slots, unwritten);
    const unsigned c = plan.channels;
    std::vector<std::uint8_t> hwc(std::size_t{s.size.width} * s.size.height * c);
    for (const auto& j : jobs) {
        std::vector<std::uint8_t> src = j.src->px;
        if (s.format == image::pixel_format::bgr)
            for (std::size_t i = 0; i < src.size(); i += 3) std::swap(src[i], src[i + 2]);
        image::detail::resample(src.data(), j.src->width, j.src->height, c, j.r, hwc.data(), s.size, image::decode_context{});
        if (j.flip) image::detail::flip_rows(hwc.data(), s.size, c);
        image::detail::convert_image(hwc.data(), b, plan, out.data() + j.slot * plan.item_bytes);
    }
    return out;
}

/// Device memory, freed on scope exit.
struct device_buffer {
    void* p = nullptr;
    explicit device_buffer(std::size_t bytes) { REQUIRE(cudaMalloc(&p, std::max<std::size_t>(bytes, 1)) == cudaSuccess); }
    ~device_buffer() { cudaFree(p); }
    device_buffer(const device_buffer&) = delete;
    device_buffer& operator=(const device_buffer&) = delete;
    template <class T>
    T* as() const
    {
        return static_cast<T*>(p);
    }
};

/// The batch as the GPU makes it: each picture uploaded as planes (R, G, B or gray) with a
/// pitch wider than a row and junk in the padding, one launch for all the jobs.
std::vector<std::byte> gpu_batch(const batch_spec& s, const std::vector<job>& jobs)
{
    const auto plan = image::detail::make_batch_plan(decode_of(s), options_of(s));
    const unsigned c = plan.channels;
    std::vector<std::unique_ptr<device_buffer>> keep;
    std::vector<ck::resample_job> dj;
    std::mt19937 rng(7);
    for (const auto& j : jobs) {
        const picture& p = *j.src;
        REQUIRE(p.channels == c);
        const std::uint32_t pitch = p.width + 13;
        std::vector<std::uint8_t> planar(std::size_t{pitch} * p.height * c);
        for (auto& v : planar) v = static_cast<std::uint8_t>(rng());
        for (unsigned k = 0; k < c; ++k)
            for (std::uint32_t y = 0; y < p.height; ++y)
                for (std::uint32_t x = 0; x < p.width; ++x)
                    planar[(std::size_t{k} * p.height + y) * pitch + x] = p.px[(std::size_t{y} * p.width + x) * c + k];
        keep.push_back(std::make_unique<device_buffer>(planar.size()));
        auto* d = keep.back()->as<std::uint8_t>();
        REQUIRE(cudaMemcpy(d, planar.data(), planar.size(), cudaMemcpyHostToDevice) == cudaSuccess);
        ck::resample_job r;
        for (unsigned k = 0; k < c; ++k) r.planes[k] = d + std::size_t{k} * p.height * pitch;
        r.pitch = pitch;
        r.width = p.width;
        r.height = p.height;
        r.left = j.r.left;
        r.top = j.r.top;
        r.region_width = j.r.width;
        r.region_height = j.r.height;
        r.flip = j.flip ? 1 : 0;
        r.slot = j.slot;
        dj.push_back(r);
    }
    device_buffer d_jobs(dj.size() * sizeof(ck::resample_job));
    REQUIRE(cudaMemcpy(d_jobs.p, dj.data(), dj.size() * sizeof(ck::resample_job), cudaMemcpyHostToDevice) == cudaSuccess);
    device_buffer table(sizeof(plan.to_float));
    if (s.type == image::dtype::float32)
        REQUIRE(cudaMemcpy(table.p, plan.to_float.data(), sizeof(plan.to_float), cudaMemcpyHostToDevice) == cudaSuccess);
    if (s.type == image::dtype::float16)
        REQUIRE(cudaMemcpy(table.p, plan.to_half.data(), sizeof(plan.to_half), cudaMemcpyHostToDevice) == cudaSuccess);
    const std::size_t bytes = plan.item_bytes * s.slots;
    device_buffer images(bytes);
    REQUIRE(cudaMemset(images.p, static_cast<int>(unwritten), bytes) == cudaSuccess);

    ck::batch_target t;
    t.images = images.p;
    t.width = s.size.width;
    t.height = s.size.height;
    t.channels = c;
    t.planar = s.layout == image::tensor_layout::nchw;
    t.type = s.type == image::dtype::float32   ? ck::element_kind::float32
             : s.type == image::dtype::float16 ? ck::element_kind::float16
                                               : ck::element_kind::uint8;
    t.swap_rb = s.format == image::pixel_format::bgr;
    t.table = s.type == image::dtype::uint8 ? nullptr : table.p;
    cudaStream_t stream = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
    const int rc = ck::launch_resample(d_jobs.as<const ck::resample_job>(), static_cast<std::uint32_t>(dj.size()), t, stream);
    const cudaError_t done = cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
    REQUIRE(rc == 0);
    REQUIRE(done == cudaSuccess);
    std::vector<std::byte> out(bytes);
    REQUIRE(cudaMemcpy(out.data(), images.p, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    return out;
}

/// Runs `jobs` both ways and checks that every byte of the batch agrees.
void check_same(const batch_spec& s, const std::vector<job>& jobs)
{
    const auto want = cpu_batch(s, jobs);
    const auto got = gpu_batch(s, jobs);
    REQUIRE(got.size() == want.size());
    std::size_t differ = 0, first = want.size();
    for (std::size_t i = 0; i < want.size(); ++i)
        if (got[i] != want[i]) {
            if (differ++ == 0) first = i;
        }
    if (differ) {
        const std::size_t item = want.size() / s.slots;
        std::ostringstream o;
        o << differ << " of " << want.size() << " bytes differ; the first at byte " << first << " (slot " << first / item
          << ", byte " << first % item << "): cpu " << int(want[first]) << ", gpu " << int(got[first]);
        for (const auto& j : jobs)
            if (j.slot == first / item)
                o << "; its job: " << j.src->width << "x" << j.src->height << " region " << j.r.left << "," << j.r.top << " "
                  << j.r.width << "x" << j.r.height << (j.flip ? " flipped" : "");
        FAIL_CHECK(o.str());
    }
}

/// RandomResizedCrop's regions (area 8-100 %, aspect 3/4-4/3), fractional or whole.
image::detail::region random_region(const picture& p, std::mt19937& rng, bool whole)
{
    std::uniform_real_distribution<double> u(0.0, 1.0);
    const double area = double(p.width) * p.height * (0.08 + 0.92 * u(rng));
    const double ratio = std::exp(std::log(3.0 / 4.0) + u(rng) * (std::log(4.0 / 3.0) - std::log(3.0 / 4.0)));
    double w = std::min<double>(std::sqrt(area * ratio), p.width), h = std::min<double>(std::sqrt(area / ratio), p.height);
    if (whole) {
        w = std::max(1.0, std::floor(w));
        h = std::max(1.0, std::floor(h));
    }
    double left = u(rng) * (p.width - w), top = u(rng) * (p.height - h);
    if (whole) {
        left = std::floor(left);
        top = std::floor(top);
    }
    return {left, top, w, h};
}

/// The jobs every layout and type is checked on: several sizes, random crops (fractional and
/// whole-pixel, some flipped), whole images, upscaling, exact-size copies (plain and
/// flipped), a region partly outside its image, and slivers thinner than a pixel.
struct corpus {
    std::vector<picture> pictures;
    std::vector<job> jobs;
    std::uint32_t slots = 0;
};

corpus make_corpus(unsigned c, image::extent out)
{
    corpus k;
    k.pictures.reserve(5);
    k.pictures.push_back(noise(7, 5, c, 1));
    k.pictures.push_back(noise(375, 500, c, 2));
    k.pictures.push_back(noise(1200, 900, c, 3));
    k.pictures.push_back(noise(3000, 2000, c, 4));
    k.pictures.push_back(noise(50, 40, c, 5));
    std::mt19937 rng(11);
    std::uint32_t slot = 0;
    auto add = [&](const picture& p, image::detail::region r, bool flip) { k.jobs.push_back({&p, r, flip, slot++}); };
    for (const auto& p : k.pictures) {
        add(p, {0, 0, double(p.width), double(p.height)}, false); // the whole image
        for (int i = 0; i < 4; ++i) add(p, random_region(p, rng, i % 2 == 1), i >= 2);
    }
    const picture& mid = k.pictures[1];
    const picture& big = k.pictures[3];
    if (mid.width >= out.width + 10 && mid.height >= out.height + 20) {
        add(mid, {10, 20, double(out.width), double(out.height)}, false); // copied as it is
        add(mid, {10, 20, double(out.width), double(out.height)}, true);
        add(mid, {10.5, 20, double(out.width), double(out.height)}, false); // not whole: filtered
        add(mid, {10, 20, double(out.width), double(out.height) + 0.25}, false);
    }
    add(mid, {-12.5, -3, mid.width + 40.0, mid.height + 7.5}, false);   // clamped to the image
    add(mid, {100.25, 200.5, 0.3, 0.2}, false);                         // a sliver
    add(mid, {100, 200, 0, 0}, true);                                   // nothing: a 1e-6 span
    add(mid, {double(mid.width) - 0.5, double(mid.height) - 0.5, 4, 4}, false); // the last pixel's corner
    add(big, {123.7, 45.2, 2876.3, 1954.8}, true);                      // nearly all of a large one
    add(big, {1500.5, 1000.25, 3.5, 2.75}, false);                      // a few pixels blown up
    k.slots = slot;
    return k;
}

} // namespace resample_test

using namespace resample_test;

TEST_CASE("launch_resample refuses a target it cannot write, before any CUDA call")
{
    ck::batch_target t;
    t.width = t.height = 8;
    const auto* jobs = reinterpret_cast<const ck::resample_job*>(alignof(ck::resample_job)); // never read
    CHECK(ck::launch_resample(jobs, 1, t, nullptr) == cudaErrorInvalidValue); // no images
    t.images = reinterpret_cast<void*>(256);
    t.channels = 2;
    CHECK(ck::launch_resample(jobs, 1, t, nullptr) == cudaErrorInvalidValue);
    t.channels = 3;
    t.type = ck::element_kind::float16;
    CHECK(ck::launch_resample(jobs, 1, t, nullptr) == cudaErrorInvalidValue); // no table
    CHECK(ck::launch_resample(nullptr, 1, t, nullptr) == cudaErrorInvalidValue);
    CHECK(ck::launch_resample(jobs, 0, t, nullptr) == cudaSuccess); // nothing to do
}

TEST_SUITE("gpu")
{
    TEST_CASE("the GPU resampler writes the CPU path's bytes: uint8 RGB, NHWC and NCHW")
    {
        const auto k = make_corpus(3, {224, 224});
        for (auto layout : {image::tensor_layout::nhwc, image::tensor_layout::nchw}) {
            CAPTURE(int(layout));
            check_same({.size = {224, 224}, .layout = layout, .slots = k.slots}, k.jobs);
        }
    }

    TEST_CASE("the GPU resampler writes the CPU path's bytes: float32 and float16 NCHW, ImageNet's normalization")
    {
        const auto k = make_corpus(3, {224, 224});
        for (auto type : {image::dtype::float32, image::dtype::float16}) {
            CAPTURE(int(type));
            check_same({.size = {224, 224}, .layout = image::tensor_layout::nchw, .type = type, .slots = k.slots}, k.jobs);
        }
        check_same({.size = {224, 224}, .layout = image::tensor_layout::nhwc, .type = image::dtype::float32, .slots = k.slots},
                   k.jobs);
    }

    TEST_CASE("the GPU resampler writes the CPU path's bytes: gray, one channel")
    {
        const auto k = make_corpus(1, {224, 224});
        check_same({.size = {224, 224}, .format = image::pixel_format::gray, .slots = k.slots}, k.jobs);
        check_same({.size = {224, 224},
                    .format = image::pixel_format::gray,
                    .layout = image::tensor_layout::nchw,
                    .type = image::dtype::float32,
                    .slots = k.slots},
                   k.jobs);
    }

    TEST_CASE("the GPU resampler writes the CPU path's bytes: bgr from R, G, B planes (swap_rb)")
    {
        const auto k = make_corpus(3, {224, 224});
        check_same({.size = {224, 224}, .format = image::pixel_format::bgr, .slots = k.slots}, k.jobs);
        check_same({.size = {224, 224},
                    .format = image::pixel_format::bgr,
                    .layout = image::tensor_layout::nchw,
                    .type = image::dtype::float16,
                    .slots = k.slots},
                   k.jobs);
    }

    TEST_CASE("the GPU resampler writes the CPU path's bytes: outputs of other sizes (wide, odd, not a multiple of a block's rows)")
    {
        for (image::extent out : {image::extent{640, 480}, image::extent{100, 37}, image::extent{1, 1}, image::extent{300, 3}}) {
            CAPTURE(out.width);
            CAPTURE(out.height);
            const auto k = make_corpus(3, out);
            check_same({.size = out, .slots = k.slots}, k.jobs);
            check_same({.size = out, .layout = image::tensor_layout::nchw, .type = image::dtype::float32, .slots = k.slots}, k.jobs);
        }
    }

    TEST_CASE("the GPU resampler writes the CPU path's bytes where its shared memory is too small (rows, columns, windows)")
    {
        // Each past one of the kernel's shared-memory capacities (src/cuda_kernels.cu): an RGB
        // row wider than 4096 pixels; a gray one whose horizontal windows fill more than
        // 24 KiB; vertical windows longer than 1024 taps for a block's 8 rows.
        const auto wide = noise(5000, 16, 3, 21), tall = noise(64, 5000, 3, 22), long_windows = noise(9000, 8, 1, 23);
        const std::vector<job> rgb{{&wide, {0, 0, 5000, 16}, false, 0},
                                   {&wide, {17.5, 2.25, 4900.5, 12.5}, true, 1},
                                   {&tall, {0, 0, 64, 5000}, false, 2},
                                   {&tall, {3.5, 10.25, 60, 4980}, true, 3}};
        check_same({.size = {64, 12}, .slots = 4}, rgb);
        check_same({.size = {16, 16}, .layout = image::tensor_layout::nchw, .slots = 4}, rgb);
        check_same({.size = {5000, 16}, .slots = 1}, {{&wide, {0, 0, 5000, 16}, true, 0}}); // an exact copy, 5000 wide
        const std::vector<job> gray{{&long_windows, {0, 0, 9000, 8}, false, 0}, {&long_windows, {1.5, 0.5, 8990, 7}, true, 1}};
        check_same({.size = {100, 4}, .format = image::pixel_format::gray, .slots = 2}, gray);
    }

    TEST_CASE("one launch fills the slots its jobs name, in any order, and leaves the others as they were")
    {
        const auto a = noise(640, 480, 3, 31), b = noise(333, 777, 3, 32), c = noise(224, 224, 3, 33), d = noise(90, 60, 3, 34);
        const std::vector<job> jobs{{&a, {12.25, 7.5, 500.5, 420}, false, 5},
                                    {&b, {0, 0, 333, 777}, true, 0},
                                    {&c, {0, 0, 224, 224}, false, 3}, // the whole image, its size: copied
                                    {&d, {5, 5, 80, 50}, true, 1},
                                    {&a, {0, 0, 640, 480}, false, 2}};
        for (auto type : {image::dtype::uint8, image::dtype::float32}) {
            CAPTURE(int(type));
            check_same({.size = {224, 224}, .layout = image::tensor_layout::nchw, .type = type, .slots = 7}, jobs); // 4 and 6: untouched
        }
    }
}
