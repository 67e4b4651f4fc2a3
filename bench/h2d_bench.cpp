// conveyor-bench h2d: host-to-device bandwidth of the to_cuda stage (batches from a pipeline,
// through its ring of device buffers) beside plain cudaMemcpyAsync of the same bytes from
// pinned and from pageable memory, in one process: the seeds' random_to_gpu case.
#include "h2d_bench.hpp"

#include "support/json_line.hpp"
#include "support/timer.hpp"
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

/// GB/s of `batches` plain copies of `bytes` on one stream, timed by events: copy i reads
/// `srcs[i % srcs.size()]` and writes `dsts[i % dsts.size()]`.
double plain_copies(const std::vector<const void*>& srcs, std::size_t bytes, std::size_t batches, const std::vector<void*>& dsts,
                    cudaStream_t s)
{
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a, s);
    for (std::size_t i = 0; i < batches; ++i)
        cudaMemcpyAsync(dsts[i % dsts.size()], srcs[i % srcs.size()], bytes, cudaMemcpyHostToDevice, s);
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
    // Device buffers as the stage's ring has them, one per set.
    std::vector<void*> dsts(a.ring, nullptr);
    for (auto& d : dsts) cudaMalloc(&d, bytes);
    cc::pinned_memory pinned(bytes);
    std::vector<std::uint8_t> pageable(bytes, 1);
    std::memset(pinned.data(), 1, bytes);
    cv::runtime rt;
    // The stage's source: `batches` batches, each its own pinned slab from a small pool (as
    // the batch stage's slabs would be), made before timing.
    std::vector<std::shared_ptr<void>> slabs;
    for (std::size_t i = 0; i < a.ring + 2; ++i)
        slabs.emplace_back(cc::allocate_pinned(bytes), [](void* p) { cc::free_pinned(p); });
    std::vector<const void*> slab_ptrs;
    for (const auto& m : slabs) slab_ptrs.push_back(m.get());
    std::vector<double> stage, whole, start, pin, pin_slabs, page;
    for (std::size_t r = 0; r < a.repeat; ++r) {
        // The baselines: one pinned buffer copied again and again (the best case: the same
        // pages every time), the stage's own slabs and device buffers in turn (the same
        // memory the stage copies), and pageable memory.
        pin.push_back(plain_copies({pinned.data()}, bytes, a.batches, {dsts.front()}, s));
        pin_slabs.push_back(plain_copies(slab_ptrs, bytes, a.batches, dsts, s));
        page.push_back(plain_copies({pageable.data()}, bytes, a.batches, {dsts.front()}, s));
        std::vector<bytes_batch> in;
        for (std::size_t i = 0; i < a.batches; ++i) in.push_back({slabs[i % slabs.size()], bytes});
        auto p = cv::from_range(std::move(in)).on(rt) | cc::to_cuda({.device = a.device, .ring = a.ring});
        // Timed two ways: the whole run (its start included: the stage's stream, events and
        // device buffers are made when the first batch comes), and the steady state from the
        // first batch's arrival to the last's copy, which is what a long epoch sees.
        cb::stopwatch clock;
        double first_s = 0;
        std::size_t n = 0;
        for (auto& b : p) {
            b.synchronize();
            if (n++ == 0) first_s = clock.seconds();
        }
        const double total_s = clock.seconds();
        const double gbps = static_cast<double>(bytes) * static_cast<double>(n) / 1e9 / total_s;
        const double steady = n > 1 ? static_cast<double>(bytes) * static_cast<double>(n - 1) / 1e9 / (total_s - first_s) : gbps;
        stage.push_back(steady);
        whole.push_back(gbps);
        start.push_back(first_s);
        cb::json_line()
            .add("bench", "h2d")
            .add("repeat", r)
            .add("batch_MB", static_cast<double>(bytes) / 1e6)
            .add("batches", a.batches)
            .add("ring", a.ring)
            .add("to_cuda_GBps", steady)
            .add("to_cuda_whole_run_GBps", gbps)
            .add("first_batch_ms", first_s * 1e3)
            .add("pinned_GBps", pin.back())
            .add("pinned_slabs_GBps", pin_slabs.back())
            .add("pageable_GBps", page.back())
            .print();
    }
    for (auto* d : dsts) cudaFree(d);
    cudaStreamDestroy(s);
    std::fprintf(stderr, "h2d: %zu batches of %.1f MB, ring %zu, medians of %zu:\n"
                 "  to_cuda                               %6.2f GB/s after the first batch (%.0f%% of plain pinned from the same slabs), %.2f GB/s over the whole run (first batch after %.1f ms)\n"
                 "  plain cudaMemcpyAsync, the same slabs %6.2f GB/s\n"
                 "  plain cudaMemcpyAsync, one buffer     %6.2f GB/s (the same pinned pages every time)\n"
                 "  plain cudaMemcpyAsync, pageable       %6.2f GB/s\n",
                 a.batches, static_cast<double>(bytes) / 1e6, a.ring, a.repeat, median(stage),
                 100 * median(stage) / std::max(1e-9, median(pin_slabs)), median(whole), 1e3 * median(start), median(pin_slabs),
                 median(pin), median(page));
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
