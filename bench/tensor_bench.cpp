// conveyor-bench tensors: the seeds' tensor-loading cases, each a ceiling of its own.
//
//   single_image   one image (read once) decoded and resized into a size x size tensor
//                  again and again on one thread: the pure decode + resize cost per image
//   random_image   images of the dataset in random order, read (file::dataset, many
//                  in flight) and decoded into batch tensors (decode_batches on the
//                  compute pool): the loader's cost with I/O
//   random_gpu     random float tensors of the batch's shape made on the GPU (cuRAND):
//                  the GPU-side ceiling, no host involved
//   random_to_gpu  random float tensors made once in pinned host memory and copied to the
//                  GPU through the to_cuda stage: the host-to-device ceiling
//
// The GPU cases need a CUDA build (with cuRAND for random_gpu) and a device; without
// them they are skipped, and say why, in the JSON line and the summary. One JSON line per
// case on stdout; a summary table on stderr.
#include "tensor_bench.hpp"

#include "support/histogram.hpp"
#include "support/json_line.hpp"
#include "support/timer.hpp"
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/stages.hpp>
#include <conveyor/file/index.hpp>
#include <conveyor/file/source.hpp>
#include <conveyor/image/batch.hpp>
#include <conveyor/image/decode.hpp>
#include <conveyor/image/synthetic.hpp>

#if CONVEYOR_WITH_CUDA
#include <conveyor/cuda/device.hpp>
#include <conveyor/cuda/staging.hpp>

#include <cuda_runtime_api.h>
#if CONVEYOR_BENCH_HAS_CURAND
#include <curand.h>
#endif
#endif

#include <boost/asio/awaitable.hpp>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace cv = conveyor;
namespace cb = conveyor::bench;
namespace ci = conveyor::image;
namespace fs = std::filesystem;

const std::array<const char*, 4> all_cases{"single_image", "random_image", "random_gpu", "random_to_gpu"};

struct tensor_args {
    std::string which = "all";
    std::string dir;
    std::size_t synthetic = 0;
    std::uint32_t size = 224;
    std::size_t batch = 64;
    double seconds = 0;
    std::uint64_t iterations = 0;
    std::size_t threads = 0;
    std::size_t inflight = 64;
    int device = 0;
    std::uint64_t seed = 1;
};

/// When a case stops: after `iterations` timed iterations, or else after `seconds`.
struct stop_rule {
    std::uint64_t iterations = 0;
    double seconds = 3;
    bool done(std::uint64_t n, const cb::stopwatch& clock) const
    {
        return iterations ? n >= iterations : clock.seconds() >= seconds;
    }
};

/// What one case measured (or why it did not run).
struct case_result {
    std::string name;
    bool skipped = false;
    std::string reason;
    std::string dtype;
    std::vector<std::int64_t> shape;  ///< of one tensor (one iteration's output)
    std::uint64_t tensors = 0;        ///< iterations timed
    std::uint64_t images = 0;
    std::uint64_t bytes = 0;          ///< tensor bytes made (or copied)
    double seconds = 0;
    double warmup_seconds = 0;        ///< the untimed first iteration (pipeline start, first touch)
    cb::latency_histogram latency;    ///< per timed iteration
};

case_result skipped(std::string name, std::string reason)
{
    case_result r;
    r.name = std::move(name);
    r.skipped = true;
    r.reason = std::move(reason);
    return r;
}

std::string shape_text(const std::vector<std::int64_t>& shape)
{
    std::string s;
    for (auto d : shape) s += (s.empty() ? "" : "x") + std::to_string(d);
    return s;
}

// ---- the images ------------------------------------------------------------------------

/// The dataset the image cases read: a directory's JPEGs and PNGs, or synthetic JPEGs made
/// in a temporary directory (removed afterwards).
struct image_set {
    cv::file::listing files;
    std::optional<fs::path> made; // the temporary directory, if synthetic

    image_set() = default;
    image_set(const image_set&) = delete;
    image_set& operator=(const image_set&) = delete;
    ~image_set()
    {
        std::error_code ec;
        if (made) fs::remove_all(*made, ec);
    }
};

std::unique_ptr<image_set> load_images(const tensor_args& a)
{
    auto s = std::make_unique<image_set>();
    fs::path dir = a.dir;
    if (dir.empty()) {
        const std::size_t count = a.synthetic ? a.synthetic : 256;
        dir = fs::temp_directory_path() / ("conveyor-tensors-" + std::to_string(::getpid()));
        s->made = dir;
        std::fprintf(stderr, "tensors: making %zu synthetic JPEGs (500x375) in %s%s\n", count, dir.c_str(),
                     a.synthetic ? "" : " (give --dir or --synthetic N to choose)");
        ci::make_synthetic_images({.dir = dir, .classes = std::min<std::size_t>(10, count), .count = count, .seed = a.seed});
    }
    s->files = cv::file::walk(dir, {.extensions = {".jpg", ".jpeg", ".png"}});
    if (s->files.entries.empty())
        throw std::runtime_error("no .jpg, .jpeg or .png files under " + dir.string() + " for the image cases");
    std::uint64_t bytes = 0;
    for (const auto& e : s->files.entries) bytes += static_cast<std::uint64_t>(std::max<std::int64_t>(0, e.size));
    std::fprintf(stderr, "tensors: %zu images, %.1f MB, in %s\n", s->files.size(), static_cast<double>(bytes) / 1e6, dir.c_str());
    return s;
}

ci::decode_options decode_opts(const tensor_args& a)
{
    return {.size = {a.size, a.size}, .crop = ci::crop_mode::center};
}

case_result run_single_image(const tensor_args& a, const image_set& images, const stop_rule& stop)
{
    case_result r{.name = "single_image"};
    const std::string path = images.files.full_path(0);
    std::ifstream in(path, std::ios::binary);
    const std::vector<char> text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (!in.good() && !in.eof()) throw std::runtime_error("cannot read " + path);
    const auto bytes = std::as_bytes(std::span(text.data(), text.size()));
    const ci::decoder dec;
    const ci::decode_options opts = decode_opts(a);
    std::vector<std::uint8_t> out(std::size_t{a.size} * a.size * ci::channels_of(opts.format));
    const ci::decode_context ctx{.key = path, .origin = path};
    r.dtype = "uint8";
    r.shape = {a.size, a.size, static_cast<std::int64_t>(ci::channels_of(opts.format))};
    {
        cb::stopwatch warm;
        dec.decode_into(bytes, opts, ctx, out);
        r.warmup_seconds = warm.seconds();
    }
    std::fprintf(stderr, "tensors: single_image: %s (%zu bytes) into %s uint8 tensors, one thread\n", path.c_str(), text.size(),
                 shape_text(r.shape).c_str());
    cb::stopwatch clock;
    while (!stop.done(r.tensors, clock)) {
        const auto t0 = std::chrono::steady_clock::now();
        dec.decode_into(bytes, opts, ctx, out);
        r.latency.record(std::chrono::steady_clock::now() - t0);
        ++r.tensors;
    }
    r.seconds = clock.seconds();
    r.images = r.tensors;
    r.bytes = r.tensors * out.size();
    return r;
}

/// Position `i` of the random order: an image drawn uniformly (with replacement), as a
/// sampler of random indices does.
struct random_index {
    std::uint64_t seed;
    std::uint64_t n;
    std::uint64_t operator()(std::uint64_t i) const noexcept
    {
        // splitmix64 of (seed, position): a pure function of both.
        using cv::detail::splitmix64;
        return splitmix64(seed ^ splitmix64(i)())() % n;
    }
};

/// Reads image `i` of the dataset (a named type: it ends up in coroutine frames).
struct read_image {
    std::shared_ptr<cv::file::dataset> ds;
    cv::asio::awaitable<cv::blob> operator()(std::uint64_t i) const { return ds->async_get(static_cast<std::size_t>(i)); }
};

case_result run_random_image(const tensor_args& a, const image_set& images, const stop_rule& stop)
{
    case_result r{.name = "random_image"};
    const std::size_t threads = a.threads ? a.threads : std::max(1u, std::thread::hardware_concurrency());
    cv::runtime rt({.io_threads = 1, .compute_threads = threads});
    auto ds = std::make_shared<cv::file::dataset>(images.files, rt);
    // As many images as the iterations need (the first batch is the warm-up), or, timed by
    // seconds, more than any run gets through: the loop below stops it.
    const std::uint64_t count = stop.iterations ? (stop.iterations + 1) * a.batch : std::numeric_limits<std::uint64_t>::max() / 2;
    auto pipe = cv::generate(count, random_index{a.seed, images.files.size()}).on(rt) |
                cv::map(read_image{ds}, {.concurrency = std::max<std::size_t>(1, a.inflight), .ordered = false, .name = "read"}) |
                ci::decode_batches({.decode = decode_opts(a)}, {.size = a.batch, .partial = false});
    std::fprintf(stderr, "tensors: random_image: batches of %zu, %u x %u, %zu reads in flight, %zu decode threads\n", a.batch, a.size,
                 a.size, a.inflight, threads);
    cb::stopwatch warm;
    std::optional<cb::stopwatch> clock;
    auto last = std::chrono::steady_clock::now();
    for (auto& b : pipe) {
        const auto now = std::chrono::steady_clock::now();
        if (!clock) { // the first batch: the warm-up (pipeline start, first touch of the pools)
            r.warmup_seconds = warm.seconds();
            r.dtype = "uint8";
            r.shape = b.images.shape;
            clock.emplace();
            last = now;
            if (stop.iterations && stop.done(0, *clock)) break;
            continue;
        }
        r.latency.record(now - last);
        last = now;
        ++r.tensors;
        r.images += b.size();
        r.bytes += b.images.bytes();
        if (stop.done(r.tensors, *clock)) break;
    }
    if (!clock) throw std::runtime_error("random_image: the pipeline gave no batch (fewer than --batch images?)");
    r.seconds = clock->seconds();
    return r;
}

// ---- the GPU cases -----------------------------------------------------------------------

#if CONVEYOR_WITH_CUDA

using cv::cuda::detail::check; // a cudaError_t that is not cudaSuccess throws, naming the call

/// The GPU-side objects of a case, released in any event.
struct gpu_scope {
    cudaStream_t stream = nullptr;
    void* device_memory = nullptr;
    std::vector<cudaEvent_t> events;
#if CONVEYOR_BENCH_HAS_CURAND
    curandGenerator_t generator = nullptr;
#endif
    gpu_scope() = default;
    gpu_scope(const gpu_scope&) = delete;
    gpu_scope& operator=(const gpu_scope&) = delete;
    ~gpu_scope()
    {
        // Errors here have nowhere to go (a failed case already reported its own).
#if CONVEYOR_BENCH_HAS_CURAND
        if (generator) curandDestroyGenerator(generator);
#endif
        for (auto e : events)
            if (e) cudaEventDestroy(e);
        if (device_memory) cudaFree(device_memory);
        if (stream) cudaStreamDestroy(stream);
    }
};

/// Why the GPU cases cannot run here, or "" when they can.
std::string no_gpu_reason(int device)
{
    const auto avail = cv::cuda::devices();
    if (avail.devices == 0) return "no CUDA device: " + avail.reason;
    if (device < 0 || device >= avail.devices)
        return "--device " + std::to_string(device) + " is not one of the " + std::to_string(avail.devices) + " devices here";
    return {};
}

#if CONVEYOR_BENCH_HAS_CURAND
void check(curandStatus_t s, const char* what)
{
    if (s != CURAND_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": cuRAND status " + std::to_string(static_cast<int>(s)));
}

case_result run_random_gpu(const tensor_args& a, const stop_rule& stop)
{
    case_result r{.name = "random_gpu", .dtype = "float32"};
    if (auto why = no_gpu_reason(a.device); !why.empty()) return skipped(r.name, why);
    r.shape = {static_cast<std::int64_t>(a.batch), 3, a.size, a.size};
    const std::size_t elements = a.batch * 3 * std::size_t{a.size} * a.size;
    const std::size_t bytes = elements * sizeof(float);
    check(cudaSetDevice(a.device), "cudaSetDevice");
    gpu_scope g;
    check(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(cudaMalloc(&g.device_memory, bytes), "cudaMalloc");
    check(curandCreateGenerator(&g.generator, CURAND_RNG_PSEUDO_PHILOX4_32_10), "curandCreateGenerator");
    check(curandSetPseudoRandomGeneratorSeed(g.generator, a.seed), "curandSetPseudoRandomGeneratorSeed");
    check(curandSetStream(g.generator, g.stream), "curandSetStream");
    auto* out = static_cast<float*>(g.device_memory);
    // A few iterations in flight, each between two events: the GPU's own time per tensor,
    // read when its slot comes round again (so the host never waits on every one).
    constexpr std::size_t slots = 4;
    g.events.resize(2 * slots, nullptr);
    for (auto& e : g.events) check(cudaEventCreate(&e), "cudaEventCreate");
    auto collect = [&](std::size_t slot) {
        check(cudaEventSynchronize(g.events[2 * slot + 1]), "cudaEventSynchronize");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, g.events[2 * slot], g.events[2 * slot + 1]), "cudaEventElapsedTime");
        r.latency.record(static_cast<std::uint64_t>(static_cast<double>(ms) * 1e6));
    };
    {
        cb::stopwatch warm; // the first call sets the generator up on the device
        check(curandGenerateUniform(g.generator, out, elements), "curandGenerateUniform");
        check(cudaStreamSynchronize(g.stream), "cudaStreamSynchronize");
        r.warmup_seconds = warm.seconds();
    }
    cb::stopwatch clock;
    while (!stop.done(r.tensors, clock)) {
        const std::size_t slot = r.tensors % slots;
        if (r.tensors >= slots) collect(slot);
        check(cudaEventRecord(g.events[2 * slot], g.stream), "cudaEventRecord");
        check(curandGenerateUniform(g.generator, out, elements), "curandGenerateUniform");
        check(cudaEventRecord(g.events[2 * slot + 1], g.stream), "cudaEventRecord");
        ++r.tensors;
    }
    check(cudaStreamSynchronize(g.stream), "cudaStreamSynchronize"); // all of it done before the clock stops
    r.seconds = clock.seconds();
    for (std::uint64_t i = r.tensors > slots ? r.tensors - slots : 0; i < r.tensors; ++i) collect(i % slots);
    check(cudaGetLastError(), "random_gpu");
    r.images = r.tensors * a.batch;
    r.bytes = r.tensors * bytes;
    return r;
}
#endif

/// A batch in pinned host memory: one slab of the ring, as the to_cuda stage stages it.
struct pinned_batch {
    std::shared_ptr<void> memory;
    std::size_t bytes = 0;
    std::vector<std::int64_t> shape;
};

std::vector<cv::cuda::host_tensor> staging_view(const pinned_batch& b)
{
    return {{b.memory.get(), b.bytes, b.shape, {2, 32}}}; // float32
}

/// Batch `i`: the pinned slabs in turn.
struct next_pinned {
    std::shared_ptr<const std::vector<pinned_batch>> slabs;
    pinned_batch operator()(std::uint64_t i) const { return (*slabs)[i % slabs->size()]; }
};

case_result run_random_to_gpu(const tensor_args& a, const stop_rule& stop)
{
    case_result r{.name = "random_to_gpu", .dtype = "float32"};
    if (auto why = no_gpu_reason(a.device); !why.empty()) return skipped(r.name, why);
    r.shape = {static_cast<std::int64_t>(a.batch), 3, a.size, a.size};
    const std::size_t elements = a.batch * 3 * std::size_t{a.size} * a.size;
    const std::size_t bytes = elements * sizeof(float);
    constexpr std::size_t ring = 3;
    // Random tensors made once in pinned memory, before timing: more slabs than the stage's
    // ring, so a copy never reads the slab the previous one read.
    auto slabs = std::make_shared<std::vector<pinned_batch>>();
    std::mt19937_64 gen(a.seed);
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    for (std::size_t i = 0; i < ring + 2; ++i) {
        std::shared_ptr<void> mem(cv::cuda::allocate_pinned(bytes), [](void* p) { cv::cuda::free_pinned(p); });
        auto* f = static_cast<float*>(mem.get());
        for (std::size_t k = 0; k < elements; ++k) f[k] = uniform(gen);
        slabs->push_back({std::move(mem), bytes, r.shape});
    }
    cv::runtime rt({.io_threads = 1, .compute_threads = 1});
    const std::uint64_t count = stop.iterations ? stop.iterations + 1 : std::numeric_limits<std::uint64_t>::max() / 2;
    auto pipe = cv::generate(count, next_pinned{slabs}).on(rt) | cv::cuda::to_cuda({.device = a.device, .ring = ring});
    cb::stopwatch warm;
    std::optional<cb::stopwatch> clock;
    auto last = std::chrono::steady_clock::now();
    for (auto& b : pipe) {
        b.synchronize(); // the copy is done before it counts
        const auto now = std::chrono::steady_clock::now();
        if (!clock) { // the first batch: device buffers allocated, stream made
            r.warmup_seconds = warm.seconds();
            clock.emplace();
            last = now;
            if (stop.iterations && stop.done(0, *clock)) break;
            continue;
        }
        r.latency.record(now - last);
        last = now;
        ++r.tensors;
        if (stop.done(r.tensors, *clock)) break;
    }
    if (!clock) throw std::runtime_error("random_to_gpu: the to_cuda stage gave no batch");
    r.seconds = clock->seconds();
    check(cudaGetLastError(), "random_to_gpu");
    r.images = r.tensors * a.batch;
    r.bytes = r.tensors * bytes;
    return r;
}

#endif // CONVEYOR_WITH_CUDA

// ---- reporting -------------------------------------------------------------------------

void print_json(const case_result& r, const tensor_args& a)
{
    cb::json_line line;
    line.add("bench", "tensors").add("case", r.name).add("skipped", r.skipped);
    if (r.skipped) {
        line.add("reason", r.reason).print();
        return;
    }
    const double s = std::max(1e-12, r.seconds);
    line.add("size", a.size)
        .add("batch", r.shape.size() == 4 ? static_cast<std::size_t>(r.shape[0]) : std::size_t{1})
        .add("dtype", r.dtype)
        .add("shape", shape_text(r.shape))
        .add("tensors", r.tensors)
        .add("images", r.images)
        .add("bytes", r.bytes)
        .add("seconds", r.seconds)
        .add("warmup_s", r.warmup_seconds)
        .add("tensors_per_s", static_cast<double>(r.tensors) / s)
        .add("images_per_s", static_cast<double>(r.images) / s)
        .add("GB_per_s", static_cast<double>(r.bytes) / 1e9 / s)
        .add("p50_ms", r.latency.percentile(50) / 1e6)
        .add("p99_ms", r.latency.percentile(99) / 1e6)
        .print();
}

void print_summary(const std::vector<case_result>& results)
{
    std::fprintf(stderr, "\ntensors: %-14s %-16s %12s %12s %9s %10s %10s\n", "case", "tensor", "tensors/s", "images/s", "GB/s",
                 "p50 ms", "p99 ms");
    for (const auto& r : results) {
        if (r.skipped) {
            std::fprintf(stderr, "tensors: %-14s skipped: %s\n", r.name.c_str(), r.reason.c_str());
            continue;
        }
        const double s = std::max(1e-12, r.seconds);
        std::fprintf(stderr, "tensors: %-14s %-20s %12.1f %12.1f %9.3f %10.3f %10.3f\n", r.name.c_str(),
                     (r.dtype + " " + shape_text(r.shape)).c_str(), static_cast<double>(r.tensors) / s,
                     static_cast<double>(r.images) / s, static_cast<double>(r.bytes) / 1e9 / s, r.latency.percentile(50) / 1e6,
                     r.latency.percentile(99) / 1e6);
    }
}

int cmd_tensors(const tensor_args& a)
{
    if (a.size == 0 || a.batch == 0) throw std::invalid_argument("tensors: --size and --batch must be at least 1");
    const stop_rule stop{.iterations = a.iterations, .seconds = a.seconds > 0 ? a.seconds : 3.0};
    std::vector<std::string> cases;
    if (a.which == "all") cases.assign(all_cases.begin(), all_cases.end());
    else cases.push_back(a.which);

    std::unique_ptr<image_set> images;
    std::vector<case_result> results;
    for (const auto& c : cases) {
        case_result r;
        if (c == "single_image" || c == "random_image") {
            if (!images) images = load_images(a);
            r = c == "single_image" ? run_single_image(a, *images, stop) : run_random_image(a, *images, stop);
        } else {
#if CONVEYOR_WITH_CUDA
            if (c == "random_to_gpu") r = run_random_to_gpu(a, stop);
#if CONVEYOR_BENCH_HAS_CURAND
            else r = run_random_gpu(a, stop);
#else
            else r = skipped(c, "this build has no cuRAND (CUDA::curand was not found when configuring)");
#endif
#else
            r = skipped(c, "this build has no CUDA (the toolkit was not found when configuring, or CONVEYOR_WITH_CUDA=OFF)");
#endif
        }
        if (r.skipped) std::fprintf(stderr, "tensors: %s: skipped: %s\n", r.name.c_str(), r.reason.c_str());
        print_json(r, a);
        results.push_back(std::move(r));
    }
    print_summary(results);
    return 0;
}

} // namespace

std::function<int()> add_tensor_subcommands(CLI::App& app)
{
    auto a = std::make_shared<tensor_args>();
    auto* t = app.add_subcommand("tensors", "tensor loading: one image decoded again and again, random images read and decoded "
                                            "into batches, random tensors made on the GPU, random tensors copied to it");
    std::vector<std::string> choices(all_cases.begin(), all_cases.end());
    choices.push_back("all");
    t->add_option("--case", a->which, "which case")->check(CLI::IsMember(choices))->capture_default_str();
    auto* dir = t->add_option("--dir", a->dir, "images to read (.jpg, .jpeg, .png, walked recursively)")->check(CLI::ExistingDirectory);
    t->add_option("--synthetic", a->synthetic, "make N synthetic JPEGs in a temporary directory instead (default: 256)")
        ->check(CLI::PositiveNumber)
        ->excludes(dir);
    t->add_option("--size", a->size, "images are decoded, centre-cropped and resized to size x size")->capture_default_str();
    t->add_option("--batch", a->batch, "images per tensor (random_image, random_gpu, random_to_gpu)")->capture_default_str();
    auto* secs = t->add_option("--seconds", a->seconds, "time each case for this long (default: 3)")->check(CLI::PositiveNumber);
    t->add_option("--iterations", a->iterations, "or run each case this many iterations (after one untimed warm-up)")
        ->check(CLI::PositiveNumber)
        ->excludes(secs);
    t->add_option("--threads", a->threads, "random_image: decode threads (0: one per core)")->capture_default_str();
    t->add_option("--inflight", a->inflight, "random_image: reads in flight")->check(CLI::PositiveNumber)->capture_default_str();
    t->add_option("--device", a->device, "CUDA device of the GPU cases")->capture_default_str();
    t->add_option("--seed", a->seed, "seed of the image order and the random tensors")->capture_default_str();
    return [t, a]() -> int { return t->parsed() ? cmd_tensors(*a) : -1; };
}
