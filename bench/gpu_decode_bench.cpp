// conveyor-bench gpu-decode: the rate of cuda::decode_batches over JPEGs held in memory (no
// reading), GPU only, so that it compares with a plain batched nvJPEG loop over the same
// files (bench/gpu/nvjpeg_loop.cpp) and torchvision.io.decode_jpeg on the GPU
// (bench/gpu/torchvision_decode.py): what the stage adds to nvJPEG, or saves. The passes run
// back to back in one run of the stage, timed between the batches that end them.
//
//     conveyor-bench gpu-decode DIR --count 2048 --batch 256 --repeats 5            full images
//     conveyor-bench gpu-decode DIR --rrc 224                                        random-resized crops
#include "gpu_decode_bench.hpp"

#include "support/bench.hpp"
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/cuda/decode.hpp>
#include <conveyor/cuda/device.hpp>
#include <conveyor/file/index.hpp>
#include <conveyor/image/decode.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace cv = conveyor;
namespace cb = conveyor::bench;
namespace ci = conveyor::image;

struct gpu_decode_args {
    std::string dir;
    std::size_t count = 2048, batch = 256, repeats = 5, threads = 0;
    std::uint32_t rrc = 0; // 0: whole images at their own size
    double cpu_share = 0;
};

int cmd_gpu_decode(const gpu_decode_args& a)
{
    if (cv::cuda::devices().devices == 0) {
        std::fprintf(stderr, "gpu-decode: no usable GPU here (%s)\n", cv::cuda::devices().reason.c_str());
        return 2;
    }
    // The first `count` JPEGs of the folder, in its sorted order, as the baselines take them.
    auto files = cv::file::walk(a.dir, {.extensions = {".jpg", ".jpeg", ".JPEG"}});
    auto jpegs = std::make_shared<std::vector<std::string>>();
    for (const auto& e : files.entries) {
        if (jpegs->size() >= a.count) break;
        std::ifstream in(files.root / e.path, std::ios::binary);
        jpegs->emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    if (jpegs->empty()) {
        std::fprintf(stderr, "gpu-decode: no JPEGs in %s\n", a.dir.c_str());
        return 2;
    }
    const ci::decoder probe;
    const auto info = probe.info(std::as_bytes(std::span(jpegs->front().data(), jpegs->front().size())));
    ci::decode_image_options d;
    if (a.rrc) d.decode = {.size = {a.rrc, a.rrc}, .crop = ci::crop_mode::random_resized, .flip = 0.5, .seed = 1};
    else d.decode = {.size = {info.width, info.height}};
    const std::size_t threads = a.threads ? a.threads : std::max(1u, std::thread::hardware_concurrency());
    cv::runtime rt({.io_threads = 1, .compute_threads = threads});
    std::uint64_t bytes = 0;
    for (const auto& j : *jpegs) bytes += j.size();
    std::vector<double> rates;
    std::string decoder;
    double hardware_share = 0;
    // One run over every pass, as a training loop runs an epoch: nvJPEG, the ring and the
    // pools are set up once, and each pass is the time between the batches that close it
    // (pass 0 warms up). The blobs of every pass are made before the clock starts, so the
    // stage gets JPEGs already in memory (as from a shard reader) and nothing is copied in
    // the timed part; each pass's keys differ, so its crops do too.
    const std::size_t n = jpegs->size(), passes = a.repeats + 1;
    auto blobs = std::make_shared<std::vector<cv::blob>>(passes * n);
    for (std::size_t k = 0; k < passes * n; ++k) {
        cv::blob& b = (*blobs)[k];
        b.key = std::to_string(k);
        b.index = k;
        b.data = cv::buffer::copy_of(std::string_view((*jpegs)[k % n]));
    }
    auto stage = cv::cuda::decode_batches(d, {.size = a.batch}, {.device = 0, .cpu_share = a.cpu_share});
    auto source = cv::generate(passes * n, [blobs](std::uint64_t k) { return std::move((*blobs)[k]); });
    std::uint64_t images = 0;
    std::size_t pass = 0;
    auto before = stage.stats();
    cb::stopwatch clock;
    double pass_start = 0;
    for (auto& b : source.on(rt) | stage) {
        b.synchronize();
        images += b.host().size();
        if (images < (pass + 1) * n) continue;
        // This batch closes a pass.
        const double now = clock.seconds();
        const auto g = stage.stats();
        decoder = g.decoder;
        const std::uint64_t in_pass = images - pass * n;
        hardware_share = static_cast<double>(g.hardware - before.hardware) / std::max<double>(1, static_cast<double>(in_pass));
        before = g;
        const double s = now - pass_start;
        pass_start = now;
        if (pass++ == 0) continue;
        rates.push_back(static_cast<double>(in_pass) / s);
        cb::json_line()
            .add("bench", "gpu_decode")
            .add("engine", "conveyor-gpu-decode")
            .add("mode", a.rrc ? "rrc" + std::to_string(a.rrc) : std::string("full"))
            .add("repeat", pass - 1)
            .add("images", in_pass)
            .add("batch", a.batch)
            .add("mb", static_cast<double>(bytes) / 1e6)
            .add("seconds", s)
            .add("images_per_s", rates.back())
            .add("hardware_share", hardware_share, 4)
            .add("cpu_share_set", a.cpu_share)
            .print();
    }
    if (rates.empty()) {
        std::fprintf(stderr, "gpu-decode: too few batches for one timed pass\n");
        return 1;
    }
    const double med = cb::median(rates);
    std::fprintf(stderr, "gpu-decode: %zu JPEGs (%.1f MB, %ux%u), batches of %zu, %s: median %.0f images/s over %zu repeats (%.0f..%.0f); %s; hardware %.1f%%\n",
                 jpegs->size(), bytes / 1e6, info.width, info.height, a.batch,
                 a.rrc ? ("random-resized crops " + std::to_string(a.rrc)).c_str() : "whole images", med, rates.size(),
                 *std::min_element(rates.begin(), rates.end()), *std::max_element(rates.begin(), rates.end()), decoder.c_str(),
                 100 * hardware_share);
    return 0;
}

} // namespace

std::function<int()> add_gpu_decode_subcommands(CLI::App& app)
{
    auto a = std::make_shared<gpu_decode_args>();
    auto* p = app.add_subcommand("gpu-decode", "JPEGs held in memory → cuda::decode_batches (GPU only): the stage's own rate");
    p->add_option("dir", a->dir, "a folder of JPEGs (searched recursively; the first --count in sorted order)")->required();
    p->add_option("--count", a->count, "JPEGs to hold in memory")->capture_default_str();
    p->add_option("--batch", a->batch, "images per batch")->capture_default_str();
    p->add_option("--repeats", a->repeats, "timed passes (after one warm-up pass)")->capture_default_str();
    p->add_option("--threads", a->threads, "compute threads (0: one per core)")->capture_default_str();
    p->add_option("--rrc", a->rrc, "random-resized crops of this side instead of whole images (0: whole)")->capture_default_str();
    p->add_option("--cpu-share", a->cpu_share, "share of the JPEGs the CPU decodes (0: GPU only; negative: measured)")->capture_default_str();
    return [p, a]() -> int { return p->parsed() ? cmd_gpu_decode(*a) : -1; };
}
