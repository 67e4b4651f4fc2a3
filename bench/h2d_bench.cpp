// conveyor-bench h2d: host-to-device bandwidth of the to_cuda stage (batches from a pipeline,
// through its ring of device buffers) beside plain cudaMemcpyAsync of the same bytes from
// pinned and from pageable memory, in one process: the seeds' random_to_gpu case.
#include "h2d_bench.hpp"

#include <conveyor/bench/json_line.hpp>
#include <conveyor/bench/timer.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/stages.hpp>
#include <conveyor/cuda/device.hpp>
#include <conveyor/cuda/staging.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace cv = conveyor;
namespace cc = conveyor::cuda;
namespace cb = conveyor::bench;

namespace {

struct h2d_args {
    std::size_t batch_mb = 38; // 256 x 3 x 224 x 224 uint8 is 38.5 MB
    std::size_t batches = 64;
    std::size_t repeat = 5;
    std::size_t ring = 3;
    int device = 0;
};

/// A batch of bytes in pinned memory (or pageable, to show the difference).
struct bytes_batch {
    std::shared_ptr<void> memory;
    std::size_t bytes = 0;
};

std::vector<cc::host_tensor> staging_view(const bytes_batch& b)
{
    return {{b.memory.get(), b.bytes, {static_cast<std::int64_t>(b.bytes)}, {1, 8}}};
}

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

/// GB/s of `batches` plain copies of `bytes` from `src` on one stream, timed by events.
double plain_copies(const void* src, std::size_t bytes, std::size_t batches, void* dst, cudaStream_t s)
{
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a, s);
    for (std::size_t i = 0; i < batches; ++i) cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return static_cast<double>(bytes) * static_cast<double>(batches) / 1e6 / ms; // GB/s
}

int cmd_h2d(const h2d_args& a)
{
    const auto avail = cc::devices();
    if (avail.devices == 0) {
        cb::json_line().add("bench", "h2d").add("skipped", true).add("reason", avail.reason).print();
        std::fprintf(stderr, "h2d: skipped for want of a CUDA device: %s\n", avail.reason.c_str());
        return 0;
    }
    const std::size_t bytes = a.batch_mb << 20;
    cudaSetDevice(a.device);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    void* dst = nullptr;
    cudaMalloc(&dst, bytes);
    cc::pinned_memory pinned(bytes);
    std::vector<std::uint8_t> pageable(bytes, 1);
    std::memset(pinned.data(), 1, bytes);
    cv::runtime rt;
    // The stage's source: `batches` batches, each its own pinned slab from a small pool (as
    // the batch stage's slabs would be), made before timing.
    std::vector<std::shared_ptr<void>> slabs;
    for (std::size_t i = 0; i < a.ring + 2; ++i)
        slabs.emplace_back(cc::allocate_pinned(bytes), [](void* p) { cc::free_pinned(p); });
    std::vector<double> stage, pin, page;
    for (std::size_t r = 0; r < a.repeat; ++r) {
        pin.push_back(plain_copies(pinned.data(), bytes, a.batches, dst, s));
        page.push_back(plain_copies(pageable.data(), bytes, a.batches, dst, s));
        std::vector<bytes_batch> in;
        for (std::size_t i = 0; i < a.batches; ++i) in.push_back({slabs[i % slabs.size()], bytes});
        auto p = cv::from_range(std::move(in)).on(rt) | cc::to_cuda({.device = a.device, .ring = a.ring});
        cb::stopwatch clock;
        std::size_t n = 0;
        for (auto& b : p) {
            b.synchronize();
            ++n;
        }
        const double gbps = static_cast<double>(bytes) * static_cast<double>(n) / 1e9 / clock.seconds();
        stage.push_back(gbps);
        cb::json_line()
            .add("bench", "h2d")
            .add("repeat", r)
            .add("batch_MB", static_cast<double>(bytes) / 1e6)
            .add("batches", a.batches)
            .add("ring", a.ring)
            .add("to_cuda_GBps", gbps)
            .add("pinned_GBps", pin.back())
            .add("pageable_GBps", page.back())
            .print();
    }
    cudaFree(dst);
    cudaStreamDestroy(s);
    std::fprintf(stderr, "h2d: %zu batches of %.1f MB, medians of %zu: to_cuda %.2f GB/s, plain pinned %.2f GB/s (%.0f%%), plain pageable %.2f GB/s\n",
                 a.batches, static_cast<double>(bytes) / 1e6, a.repeat, median(stage), median(pin),
                 100 * median(stage) / std::max(1e-9, median(pin)), median(page));
    return 0;
}

} // namespace

std::function<int()> add_h2d_subcommands(CLI::App& app)
{
    auto a = std::make_shared<h2d_args>();
    auto* h = app.add_subcommand("h2d", "host-to-device copies: the to_cuda stage beside plain cudaMemcpyAsync from pinned and pageable memory");
    h->add_option("--batch-MB", a->batch_mb, "bytes per batch, in MiB")->capture_default_str();
    h->add_option("--batches", a->batches, "batches per pass")->capture_default_str();
    h->add_option("--repeat", a->repeat, "passes")->capture_default_str();
    h->add_option("--ring", a->ring, "to_cuda's device buffer sets")->capture_default_str();
    h->add_option("--device", a->device, "CUDA device")->capture_default_str();
    return [h, a]() -> int { return h->parsed() ? cmd_h2d(*a) : -1; };
}
