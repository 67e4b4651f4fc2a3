// Tests of conveyor/cuda/device.hpp and conveyor/cuda/staging.hpp.
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/stages.hpp>
#include <conveyor/cuda/device.hpp>
#include <conveyor/cuda/error.hpp>
#include <conveyor/cuda/staging.hpp>

#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <optional>
#include <atomic>
#include <thread>
#include <vector>

namespace cv = conveyor;
namespace cc = conveyor::cuda;

namespace test_batches {

/// A batch as a user might have one: bytes and labels, in pinned or pageable memory.
struct batch {
    std::uint64_t id = 0;
    std::vector<std::uint8_t> pixels;
    std::vector<std::int64_t> labels;
};

std::vector<cc::host_tensor> staging_view(const batch& b)
{
    return {{b.pixels.data(), b.pixels.size(), {static_cast<std::int64_t>(b.pixels.size())}, {1, 8}},
            {b.labels.data(), b.labels.size() * 8, {static_cast<std::int64_t>(b.labels.size())}, {0, 64}}};
}

batch make(std::uint64_t id, std::size_t bytes)
{
    batch b{id, std::vector<std::uint8_t>(bytes), {}};
    for (std::size_t i = 0; i < bytes; ++i) b.pixels[i] = static_cast<std::uint8_t>(i * 7 + id);
    for (std::int64_t l = 0; l < 4; ++l) b.labels.push_back(static_cast<std::int64_t>(id) * 10 + l);
    return b;
}

} // namespace test_batches

static_assert(cc::stageable<test_batches::batch>);
static_assert(!cc::stageable<int>);

TEST_CASE("devices() answers without throwing, and gives a reason when there are none")
{
    const auto a = cc::devices();
    CHECK(a.devices >= 0);
    if (a.devices == 0) CHECK_FALSE(a.reason.empty());
    else CHECK(a.reason.empty());
}

TEST_CASE("without a device, to_cuda fails the run with errc::no_device and says why")
{
    if (cc::devices().devices > 0) return; // the GPU suite covers machines with one
    cv::runtime rt;
    std::vector<test_batches::batch> in{test_batches::make(0, 64)};
    auto p = cv::from_range(std::move(in)).on(rt) | cc::to_cuda({.device = 0});
    try {
        for (auto& b : p) (void)b;
        FAIL("the run did not fail");
    } catch (const cv::error& e) {
        CHECK(e.code() == cc::errc::no_device);
        CHECK(std::string(e.what()).find(cc::devices().reason) != std::string::npos);
    }
}

TEST_CASE("without a device, pinned memory is refused with errc::no_device, and nothing counts as pinned")
{
    if (cc::devices().devices > 0) return;
    try {
        cc::pinned_memory m(4096);
        FAIL("pinned memory without a device");
    } catch (const cv::error& e) {
        CHECK((e.code() == cc::errc::no_device || e.code() == cc::errc::cuda_failed));
    }
    int x = 0;
    CHECK_FALSE(cc::is_pinned(&x));
}

TEST_CASE("a ring of zero buffers is refused when the stage is made")
{
    CHECK_THROWS_AS(cc::to_cuda({.ring = 0}), cv::error);
}

TEST_SUITE("gpu")
{
    TEST_CASE("to_cuda copies every batch's tensors to the device, in order, and the host batch stays readable")
    {
        cv::runtime rt;
        std::vector<test_batches::batch> in;
        for (std::uint64_t i = 0; i < 10; ++i) in.push_back(test_batches::make(i, 1000 + i * 4096));
        auto p = cv::from_range(std::move(in)).on(rt) | cc::to_cuda({.device = 0, .ring = 2});
        std::uint64_t next = 0;
        for (auto& b : p) {
            CHECK(b.host().id == next);
            REQUIRE(b.tensors().size() == 2);
            b.synchronize();
            std::vector<std::uint8_t> back(b.host().pixels.size());
            REQUIRE(cudaMemcpy(back.data(), b.tensors()[0].data, back.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
            CHECK(back == b.host().pixels);
            std::vector<std::int64_t> labels(4);
            REQUIRE(cudaMemcpy(labels.data(), b.tensors()[1].data, 32, cudaMemcpyDeviceToHost) == cudaSuccess);
            CHECK(labels == b.host().labels);
            CHECK(b.tensors()[1].type == cc::element_type{0, 64});
            CHECK(b.tensors()[0].shape == std::vector<std::int64_t>{static_cast<std::int64_t>(b.host().pixels.size())});
            ++next;
        }
        CHECK(next == 10);
    }

    TEST_CASE("to_cuda waits for the consumer when it holds every buffer set, and goes on when one is dropped")
    {
        cv::runtime rt;
        std::vector<test_batches::batch> in;
        for (std::uint64_t i = 0; i < 6; ++i) in.push_back(test_batches::make(i, 1 << 20));
        auto r = (cv::from_range(std::move(in)).on(rt) | cc::to_cuda({.device = 0, .ring = 2, .capacity = 1})).run();
        std::vector<cc::device_batch<test_batches::batch>> held;
        for (int i = 0; i < 2; ++i) {
            auto b = r.next();
            REQUIRE(b);
            held.push_back(std::move(*b));
        }
        // Both sets are held: the third batch cannot be copied until one comes back.
        std::atomic<bool> got{false};
        std::optional<cc::device_batch<test_batches::batch>> third;
        std::thread t([&] {
            third = r.next();
            got = true;
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        CHECK_FALSE(got.load());
        held.erase(held.begin());
        t.join();
        REQUIRE(third);
        CHECK(third->host().id == 2);
    }

    TEST_CASE("pinned memory is pinned, and copies from it are exact")
    {
        cc::pinned_memory m(1 << 20);
        REQUIRE(m.data());
        CHECK(cc::is_pinned(m.data()));
        std::vector<std::uint8_t> local(16);
        CHECK_FALSE(cc::is_pinned(local.data()));
    }
}
