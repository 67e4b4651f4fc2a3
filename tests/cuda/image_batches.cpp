// Tests of image batches on the GPU: what to_cuda copies of a batch and the pinned slabs
// (conveyor/cuda/batch.hpp), decode_batches into pinned slabs, to_cuda, and the DLPack
// export of device batches (conveyor/image/dlpack.hpp with CUDA).
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/stages.hpp>
#include <conveyor/cuda/batch.hpp>
#include <conveyor/cuda/device.hpp>
#include <conveyor/cuda/staging.hpp>
#include <conveyor/image/batch.hpp>
#include <conveyor/image/dlpack.hpp>
#include <conveyor/image/encode.hpp>

#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <cstdint>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <string>
#include <vector>

namespace cv = conveyor;
namespace cc = conveyor::cuda;
namespace image = conveyor::image;

namespace {

/// `count` JPEG blobs of 48x40 pixels, each a gradient of its own; blob k has label k % 5.
cv::pipeline<cv::blob> jpeg_blobs(std::uint64_t count)
{
    return cv::generate(count, [](std::uint64_t k) {
        const std::uint32_t w = 48, h = 40;
        std::vector<std::uint8_t> px(std::size_t(w) * h * 3);
        for (std::uint32_t y = 0; y < h; ++y)
            for (std::uint32_t x = 0; x < w; ++x)
                for (std::uint32_t c = 0; c < 3; ++c)
                    px[(std::size_t(y) * w + x) * 3 + c] = static_cast<std::uint8_t>(x * 5 + y * 3 + c * 40 + k * 17);
        cv::blob b;
        b.key = "img/" + std::to_string(k);
        b.label = std::int64_t(k % 5);
        b.index = k;
        b.data = image::encode_jpeg(px, w, h, image::pixel_format::rgb);
        return b;
    });
}

/// Copies `bytes` of device memory at `p` back to the host.
std::vector<std::byte> from_device(const void* p, std::size_t bytes)
{
    std::vector<std::byte> v(bytes);
    REQUIRE(cudaMemcpy(v.data(), p, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
}

} // namespace

TEST_CASE("a batch gives cuda::to_cuda its images and labels to copy, and slabs may be pinned")
{
    cv::runtime rt(cv::runtime_options{.io_threads = 1, .compute_threads = 1});
    const image::decode_image_options d{.decode = {.size = {16, 12}, .crop = image::crop_mode::center}};
    std::vector<image::image_batch> batches;
    for (auto& b : jpeg_blobs(3).on(rt) | image::decode_batches(d, {.size = 2, .type = image::dtype::float16})) batches.push_back(std::move(b));
    REQUIRE(batches.size() == 2);
    const auto views = staging_view(batches[1]); // by argument-dependent lookup, as to_cuda finds it
    REQUIRE(views.size() == 2);
    CHECK(views[0].data == batches[1].images.data);
    CHECK(views[0].bytes == 1 * 12 * 16 * 3 * 2);
    CHECK(views[0].shape == std::vector<std::int64_t>{1, 12, 16, 3});
    CHECK(views[0].type == cc::element_type{2, 16});
    CHECK(views[1].data == batches[1].labels.data);
    CHECK(views[1].bytes == 8);
    CHECK(views[1].type == cc::element_type{0, 64});
    CHECK(cc::pinned_slab_allocator().kind == image::memory_kind::cuda_host);
}

TEST_SUITE("gpu")
{
    TEST_CASE("decode_batches into pinned slabs, to_cuda and DLPack: the device tensors hold the host batch's bytes")
    {
        cv::runtime rt;
        const image::decode_image_options d{.decode = {.size = {32, 24}, .crop = image::crop_mode::center}};
        const image::collate_options bo{.size = 4,
                                      .layout = image::tensor_layout::nchw,
                                      .type = image::dtype::float32,
                                      .mean = {0.485f, 0.456f, 0.406f},
                                      .std = {0.229f, 0.224f, 0.225f},
                                      .allocator = conveyor::cuda::pinned_slab_allocator()};
        auto p = jpeg_blobs(10).on(rt) | image::decode_batches(d, bo) | cc::to_cuda({.device = 0, .ring = 3});
        std::vector<std::int64_t> labels;
        std::size_t batches = 0;
        DLManagedTensor* kept = nullptr; // the first batch's images, held past their batch
        std::vector<std::byte> kept_bytes;
        for (auto& b : p) {
            const image::image_batch& h = b.host();
            CHECK(cc::is_pinned(h.images.data));
            DLManagedTensor* t = cc::to_dlpack(b);
            DLManagedTensor* l = cc::labels_to_dlpack(b);
            CHECK(t->dl_tensor.device.device_type == kDLCUDA);
            CHECK(t->dl_tensor.device.device_id == 0);
            CHECK(t->dl_tensor.dtype.code == kDLFloat);
            CHECK(t->dl_tensor.dtype.bits == 32);
            REQUIRE(t->dl_tensor.ndim == 4);
            CHECK(t->dl_tensor.shape[0] == std::int64_t(h.size()));
            CHECK(t->dl_tensor.shape[1] == 3);
            CHECK(t->dl_tensor.shape[2] == 24);
            CHECK(t->dl_tensor.shape[3] == 32);
            CHECK(l->dl_tensor.device.device_type == kDLCUDA);
            CHECK(l->dl_tensor.dtype.code == kDLInt);
            b.synchronize();
            const auto img = from_device(t->dl_tensor.data, h.images.bytes());
            CHECK(std::memcmp(img.data(), h.images.data, img.size()) == 0);
            const auto lab = from_device(l->dl_tensor.data, h.labels.bytes());
            CHECK(std::memcmp(lab.data(), h.labels.data, lab.size()) == 0);
            const auto* lp = static_cast<const std::int64_t*>(h.labels.data);
            labels.insert(labels.end(), lp, lp + h.size());
            l->deleter(l);
            if (batches == 0) {
                kept = t;
                kept_bytes = img;
            } else {
                t->deleter(t);
            }
            ++batches;
        }
        CHECK(batches == 3); // 4 + 4 + 2
        CHECK(labels == std::vector<std::int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4});
        // The first batch's device tensor outlived its batch while later batches went
        // through the ring: its buffers were not reused.
        REQUIRE(kept);
        CHECK(from_device(kept->dl_tensor.data, kept_bytes.size()) == kept_bytes);
        kept->deleter(kept);
    }
    TEST_CASE("device batches dropped unread or read give every pinned slab back to the pool")
    {
        cv::runtime rt;
        const image::decode_image_options d{.decode = {.size = {32, 24}, .crop = image::crop_mode::center}};
        image::collate_options bo{.size = 2, .allocator = conveyor::cuda::pinned_slab_allocator()};
        bo.pool = std::make_shared<image::slab_pool>(image::batch_slab_bytes(d.decode, bo), 4, bo.allocator);
        const auto pool = bo.pool;
        for (const bool wait : {false, true}) {
            CAPTURE(wait);
            std::size_t n = 0;
            {
                auto p = jpeg_blobs(20).on(rt) | image::decode_batches(d, bo) | cc::to_cuda({.device = 0, .ring = 2});
                for (auto& b : p) {
                    if (wait) b.synchronize(); // else dropped with its copies perhaps in flight
                    ++n;
                }
            }
            CHECK(n == 10);
            // A batch dropped before its copies were done is kept until the stream is past
            // them, then handed back on the run's executor: give it a moment.
            for (int i = 0; i < 200 && pool->stats().in_use > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
            CHECK(pool->stats().in_use == 0);
            CHECK(pool->stats().allocated <= 4);
        }
    }
}
