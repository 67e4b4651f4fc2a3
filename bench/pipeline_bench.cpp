// conveyor-bench pipeline: the end-to-end rate of a training input pipeline, from tar shards
// (local, S3 or http) or an ImageFolder to batches of decoded, augmented images:
//
//     shards → samples → decode (random-resized crop, flip) straight into batches → [GPU, --cuda]
//
// It prints, per epoch, images/s, MB/s read, the time to the first batch, peak RSS and CPU
// time (for s3:// shards also what the S3 client did: requests, retries, failed attempts by
// cause); then the decode-only rate with the same threads over samples held in memory (what
// the pipeline would reach if reading and batching cost nothing), and the ratio. The JSON
// fields match bench/torch_baseline.py's, so the two compare line by line.
//
// With --extra txt,json,cls each batch also carries those fields as columns (decoded beside
// its images: the cost of batches of any fields, against the same run without --extra).
// `gen-shards` makes shards with jpg, txt, json and cls members from the synthetic dataset.
#include "pipeline_bench.hpp"

#include "s3_bench.hpp"

#include "support/bench.hpp"
#include <conveyor/core/location.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/stages.hpp>
#include <conveyor/file/index.hpp>
#include <conveyor/file/source.hpp>
#include <conveyor/core/metrics.hpp>
#include <conveyor/image/batch.hpp>
#include <conveyor/image/columns.hpp>
#if CONVEYOR_WITH_CUDA
#include <conveyor/cuda/decode.hpp>
#include <conveyor/cuda/device.hpp>
#include <conveyor/cuda/staging.hpp>
#endif
#include <conveyor/image/decode.hpp>
#include <conveyor/image/stage.hpp>
#include <conveyor/image/synthetic.hpp>
#include <conveyor/shard/writer.hpp>
#include <conveyor/s3/client.hpp>
#include <conveyor/shard/list.hpp>
#include <conveyor/shard/source.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

namespace cv = conveyor;
namespace cb = conveyor::bench;
namespace ci = conveyor::image;

struct pipeline_args {
    std::vector<std::string> urls;
    std::string folder;
    std::size_t batch = 256;
    std::uint32_t size = 224;
    std::size_t threads = 0;
    std::size_t epochs = 1;
    std::size_t decode_only = 1000;
    std::uint64_t seed = 1;
    std::size_t pool_mb = 0; // 0: the runtime's default
    bool cuda = false;
    bool gpu_decode = false; // decode on the GPU (cuda::decode_batches) instead of decode_batches | to_cuda
    double cpu_share = -1;   // --gpu-decode: the CPU's share of the JPEGs (negative: measured)
    bool source_rate = false; // also time shards → shuffle alone (no decoding)
    std::string endpoint;     // s3:// shards: the endpoint (empty: AWS_ENDPOINT_URL, the profile, or AWS)
    std::string region;
    unsigned timeout_ms = 0;  // s3:// shards: the first-byte and idle timeouts (0: the client's defaults)
    std::vector<std::string> extra; // fields batched beside the images (decode_image_options::extra_fields)
};

/// One epoch's figures.
struct epoch_result {
    std::uint64_t images = 0, batches = 0;
    double seconds = 0, first_batch_s = -1;
    cb::resource_usage usage;
    cv::stats_snapshot stats;
};

template <class Batch>
epoch_result run_epoch(cv::pipeline<Batch> pipe, std::uint64_t epoch)
{
    epoch_result r;
    const auto before = cb::usage_now();
    cb::stopwatch clock;
    auto run = pipe.run(epoch);
    for (auto& b : run) {
        if (r.batches++ == 0) r.first_batch_s = clock.seconds();
        if constexpr (std::is_same_v<Batch, ci::image_batch>) {
            r.images += b.size();
        } else {
            b.synchronize(); // a device batch: its copy is done before the next is asked for
            r.images += b.host().size();
        }
    }
    r.seconds = clock.seconds();
    r.usage = cb::usage_now() - before;
    r.stats = run.snapshot();
    return r;
}

/// Descriptors open in this process now (/proc/self/fd, less the one that lists it), and
/// how many of them are sockets; -1 if unreadable.
struct descriptor_count {
    long all = -1, sockets = -1;
};
descriptor_count open_descriptors()
{
    std::error_code ec;
    descriptor_count n{0, 0};
    for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) {
        ++n.all;
        std::error_code lec;
        if (std::filesystem::read_symlink(it->path(), lec).native().starts_with("socket:")) ++n.sockets;
    }
    if (ec) return {};
    --n.all;
    return n;
}

/// Threads of this process now (/proc/self/status); -1 if unreadable.
long thread_count()
{
    std::FILE* f = std::fopen("/proc/self/status", "r");
    if (!f) return -1;
    long n = -1;
    char line[256];
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "Threads: %ld", &n) == 1) break;
    std::fclose(f);
    return n;
}

/// The share of the epoch the consumer spent waiting for batches (with --cuda: the time a
/// GPU fed by this loop would have stood idle between batches).
double wait_share(const epoch_result& r)
{
    const double elapsed = std::chrono::duration<double>(r.stats.elapsed).count();
    return elapsed > 0 ? std::chrono::duration<double>(r.stats.consumer_waited).count() / elapsed : 0;
}

/// Decodes `jpegs` with `opts` on `threads` threads, `passes` times; images/s.
double decode_only_rate(const std::vector<std::vector<std::byte>>& jpegs, const ci::decode_options& opts, std::size_t threads)
{
    if (jpegs.empty()) return 0;
    const ci::decoder dec;
    const auto out = dec.output_size(std::span(jpegs.front()), opts);
    std::atomic<std::size_t> next{0};
    const std::size_t total = std::max<std::size_t>(jpegs.size(), 2000);
    cb::stopwatch clock;
    {
        std::vector<std::jthread> pool;
        for (std::size_t t = 0; t < threads; ++t)
            pool.emplace_back([&] {
                std::vector<std::uint8_t> pixels(std::size_t{out.width} * out.height * ci::channels_of(opts.format));
                for (std::size_t i; (i = next.fetch_add(1)) < total;) {
                    const auto& j = jpegs[i % jpegs.size()];
                    const std::string key = std::to_string(i);
                    dec.decode_into(std::span(j), opts, {.key = key}, pixels);
                }
            });
    }
    return static_cast<double>(total) / clock.seconds();
}

/// CPU time of the calling thread, in seconds.
double thread_cpu_seconds()
{
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

/** The CPU time per sample, on one thread, of what `--extra` adds (decoding the extra
    fields, making the columns of each batch of `batch`, dropping them) against the image's
    decode: thread CPU time, which other processes on the cores do not inflate as they do
    wall time. Prints a JSON line. */
void extra_cost(const std::vector<cv::shard::sample>& kept, const ci::decode_image_options& d, std::size_t batch)
{
    const ci::decoder dec;
    std::vector<std::uint8_t> pixels(std::size_t{d.decode.size.width} * d.decode.size.height * ci::channels_of(d.decode.format));
    double image_s = 0, extra_s = 0;
    std::vector<std::vector<ci::field_value>> rows;
    for (int pass = 0; pass < 2; ++pass) { // the first warms the caches and the pools
        image_s = extra_s = 0;
        for (const auto& s : kept) {
            const double t0 = thread_cpu_seconds();
            rows.push_back(ci::detail::extra_values(s, d, dec, 0));
            if (rows.size() == batch) {
                auto columns = ci::detail::columns_of(d.extra_fields, std::move(rows));
                rows.clear();
            }
            const double t1 = thread_cpu_seconds();
            const ci::encoded_image e = ci::encoded_image_of(s, d);
            dec.decode_into(e.bytes, d.decode, {.key = e.key}, pixels);
            const double t2 = thread_cpu_seconds();
            extra_s += t1 - t0;
            image_s += t2 - t1;
        }
        rows.clear();
    }
    const double n = static_cast<double>(kept.size());
    std::string names;
    for (const auto& f : d.extra_fields) names += (names.empty() ? "" : ",") + f;
    cb::json_line()
        .add("bench", "pipeline")
        .add("engine", "extra-cost")
        .add("extra", names)
        .add("samples", kept.size())
        .add("image_cpu_us", image_s / n * 1e6)
        .add("extra_cpu_us", extra_s / n * 1e6)
        .add("extra_over_image", extra_s / std::max(1e-12, image_s), 5)
        .print();
    std::fprintf(stderr, "pipeline: per sample, one thread: the image %.0f us of CPU, the extra fields (%s) %.1f us: %.2f%% more\n",
                 image_s / n * 1e6, names.c_str(), extra_s / n * 1e6, 100 * extra_s / std::max(1e-12, image_s));
}

int cmd_pipeline(const pipeline_args& a)
{
    const std::size_t threads = a.threads ? a.threads : std::max(1u, std::thread::hardware_concurrency());
#if CONVEYOR_WITH_CUDA
    if (a.gpu_decode && !a.folder.empty()) {
        std::fprintf(stderr, "pipeline: --gpu-decode reads shards, not --folder\n");
        return 2;
    }
    if ((a.cuda || a.gpu_decode) && cv::cuda::devices().devices == 0) {
        std::fprintf(stderr, "pipeline: --cuda: no usable GPU here (%s)\n", cv::cuda::devices().reason.c_str());
        return 2;
    }
#else
    if (a.cuda || a.gpu_decode) {
        std::fprintf(stderr, "pipeline: --cuda, --gpu-decode: this build has no CUDA\n");
        return 2;
    }
#endif
    cv::runtime_options ro{.io_threads = 1, .compute_threads = threads};
    if (a.pool_mb) ro.buffer_pool_bytes = a.pool_mb << 20;
    cv::runtime rt(ro);
    ci::decode_image_options decode{
        .decode = {.size = {a.size, a.size}, .crop = ci::crop_mode::random_resized, .flip = 0.5, .seed = a.seed}};
    decode.extra_fields = a.extra;
    std::string extra_names;
    for (const auto& f : a.extra) extra_names += (extra_names.empty() ? "" : ",") + f;
    std::uint64_t bytes = 0;
    std::string engine;
    std::optional<cv::pipeline<ci::image_batch>> pipe;
    ci::collate_options batching{.size = a.batch};
#if CONVEYOR_WITH_CUDA
    // Batches bound for the GPU are made in page-locked slabs: their copies run at the
    // link's rate and overlap the decoding of the next batches.
    if (a.cuda) batching.allocator = cv::cuda::pinned_slab_allocator();
#endif
    std::optional<cv::pipeline<cv::shard::sample>> samples; // for the decode-only pass
    std::optional<cv::pipeline<cv::shard::sample>> shuffled; // for --gpu-decode
    std::optional<cv::s3::client> s3; // for s3:// shards: its counters are reported per epoch
    if (!a.folder.empty()) {
        auto files = cv::file::walk(a.folder, {.labels = true});
        for (const auto& e : files.entries) bytes += static_cast<std::uint64_t>(std::max<std::int64_t>(0, e.size));
        engine = "conveyor-files";
        std::fprintf(stderr, "pipeline: %zu files, %.1f MB, in %s\n", files.size(), bytes / 1e6, a.folder.c_str());
        pipe = cv::file::files(std::move(files)).on(rt) | cv::shuffle({.buffer = 1000, .seed = a.seed}) |
               ci::decode_batches(decode, batching);
    } else {
        std::optional<cv::s3::client> s3c;
        if (cv::shard::names_s3(a.urls)) {
            cv::s3::config_options co;
            co.endpoint_url = a.endpoint;
            co.region = a.region;
            if (!a.endpoint.empty()) co.style = cv::s3::addressing::path;
            cv::s3::client_options so;
            if (a.timeout_ms) so.http.timeouts.first_byte = so.http.timeouts.idle = std::chrono::milliseconds(a.timeout_ms);
            s3c.emplace(rt, co, so);
            s3 = s3c;
        }
        cv::shard::list_options lo;
        if (s3c) lo.s3 = &*s3c;
        auto list = cv::shard::resolve(a.urls, lo);
        for (auto& s : list) {
            std::error_code ec;
            if (const cv::location where(s.url); s.size < 0 && where.is_local())
                if (const auto n = std::filesystem::file_size(where.path(), ec); !ec) s.size = static_cast<std::int64_t>(n);
            bytes += static_cast<std::uint64_t>(std::max<std::int64_t>(0, s.size));
        }
        engine = "conveyor-shards";
        std::fprintf(stderr, "pipeline: %zu shards, %.1f MB\n", list.size(), bytes / 1e6);
        cv::shard::source_options so{.order = {.seed = a.seed}};
        so.s3 = s3c;
        shuffled = cv::shard::shards(list, so).on(rt) | cv::shuffle({.buffer = 1000, .seed = a.seed});
        pipe = *shuffled | ci::decode_batches(decode, batching);
        so.order.shuffle = false;
        samples = cv::shard::shards(list, so).on(rt);
    }
    const double rss_before = static_cast<double>(cb::current_rss_bytes()) / 1e6;
    std::vector<double> rates;
#if CONVEYOR_WITH_CUDA
    std::optional<cv::cuda::decode_batches_stage> gpu_stage;
#endif
    for (std::size_t e = 0; e < a.epochs; ++e) {
        const auto s3_0 = s3 ? s3->stats() : cv::s3::client_stats{};
        const auto pool_allocations0 = rt.buffers().allocations();
#if CONVEYOR_WITH_CUDA
        if (a.gpu_decode && !gpu_stage) { // one stage for every epoch: it keeps nvJPEG set up between runs
            engine = "conveyor-shards-gpu-decode";
            gpu_stage.emplace(cv::cuda::decode_batches(decode, {.size = a.batch}, {.device = 0, .cpu_share = a.cpu_share}));
        }
        const cv::cuda::gpu_decode_stats before = gpu_stage ? gpu_stage->stats() : cv::cuda::gpu_decode_stats{};
        const auto r = gpu_stage ? run_epoch(*shuffled | *gpu_stage, e)
                       : a.cuda  ? run_epoch(*pipe | cv::cuda::to_cuda({.device = 0}), e)
                                 : run_epoch(*pipe, e);
        if (gpu_stage) {
            auto g = gpu_stage->stats(); // this epoch's part
            g.hardware -= before.hardware;
            g.hybrid -= before.hybrid;
            g.cpu -= before.cpu;
            g.refused -= before.refused;
            g.gpu_seconds -= before.gpu_seconds;
            g.cpu_thread_seconds -= before.cpu_thread_seconds;
            const double all = static_cast<double>(std::max<std::uint64_t>(1, g.hardware + g.hybrid + g.cpu));
            cb::json_line()
                .add("bench", "pipeline_gpu_decode")
                .add("epoch", e)
                .add("decoder", g.decoder)
                .add("hardware_share", g.hardware / all, 4)
                .add("hybrid_share", g.hybrid / all, 4)
                .add("cpu_share", g.cpu / all, 4)
                .add("refused", g.refused)
                .add("gpu_rate", g.split.gpu_rate)
                .add("cpu_rate", g.split.cpu_rate)
                .add("input_rate", g.split.input_rate)
                .add("gpu_s", g.gpu_seconds)
                .add("cpu_thread_s", g.cpu_thread_seconds)
                .print();
            std::fprintf(stderr, "pipeline: GPU decode (%s): hardware %.1f%%, hybrid %.1f%%, CPU %.1f%% of the images; measured GPU %.0f images/s, CPU %.0f images/s, input %.0f images/s\n",
                         g.decoder.c_str(), 100 * g.hardware / all, 100 * g.hybrid / all, 100 * g.cpu / all, g.split.gpu_rate,
                         g.split.cpu_rate, g.split.input_rate);
        }
#else
        const auto r = run_epoch(*pipe, e);
#endif
        rates.push_back(static_cast<double>(r.images) / r.seconds);
        const auto fds = open_descriptors();
        cb::json_line line;
        line.add("bench", "pipeline")
            .add("engine", engine)
            .add("extra", extra_names)
            .add("threads", threads)
            .add("batch", a.batch)
            .add("size", a.size)
            .add("epoch", e)
            .add("images", r.images)
            .add("batches", r.batches)
            .add("bytes", bytes)
            .add("seconds", r.seconds)
            .add("images_per_s", rates.back())
            .add("mb_per_s", static_cast<double>(bytes) / 1e6 / r.seconds)
            .add("time_to_first_batch_s", r.first_batch_s)
            .add("peak_rss_mb", r.usage.max_rss_mb())
            .add("rss_before_mb", rss_before)
            .add("cpu_s", r.usage.cpu_s())
            .add("images_per_cpu_s", static_cast<double>(r.images) / std::max(1e-9, r.usage.cpu_s()))
            .add("consumer_wait_share", wait_share(r), 3)
            // The process once the epoch's run is gone: what a long run keeps from one epoch to the next.
            .add("rss_end_mb", static_cast<double>(cb::current_rss_bytes()) / 1e6)
            .add("fds_end", fds.all)
            .add("sockets_end", fds.sockets)
            .add("threads_end", thread_count())
            // The runtime's buffer pool: idle memory it keeps (up to its cap, by design), and
            // the fresh allocations it made in this epoch.
            .add("pool_idle_mb", static_cast<double>(rt.buffers().cached_bytes()) / 1e6)
            .add("pool_allocations", rt.buffers().allocations() - pool_allocations0);
        if (s3) { // what the S3 client did in this epoch; failed attempts by cause
            const auto st = s3->stats();
            add_s3_counters(line, st, s3_0, false);
            line.add("status_errors", st.status_errors - s3_0.status_errors)
                .add("connection_errors", st.connection_errors - s3_0.connection_errors)
                .add("timeouts", st.timeouts - s3_0.timeouts)
                .add("short_bodies", st.short_bodies - s3_0.short_bodies)
                .add("retries_refused", st.retries_refused - s3_0.retries_refused);
        }
        line.print();
        {
            cb::json_line line;
            line.add("bench", "pipeline_stages").add("engine", engine).add("epoch", e);
            for (const auto& st : r.stats.stages) line.add(st.name + "_busy_share", st.busy_share(), 3);
            const auto neck = cv::bottleneck(r.stats);
            line.add("bottleneck", neck ? r.stats.stages[*neck].name : std::string("consumer"));
            line.print();
        }
        std::fprintf(stderr, "pipeline: epoch %zu: %llu images in %llu batches, %.2f s: %.0f images/s, %.0f MB/s, first batch after %.3f s, peak RSS %.0f MB, %.0f images per CPU second\n",
                     e, static_cast<unsigned long long>(r.images), static_cast<unsigned long long>(r.batches), r.seconds,
                     rates.back(), bytes / 1e6 / r.seconds, r.first_batch_s, r.usage.max_rss_mb(),
                     r.images / std::max(1e-9, r.usage.cpu_s()));
        std::fprintf(stderr, "pipeline: busy share per stage: %s\n", cv::format_shares(r.stats).c_str());
        std::fprintf(stderr, "pipeline: the consumer%s waited for its next batch %.1f%% of the epoch\n",
                     a.cuda || a.gpu_decode ? " (standing for the GPU: each batch is awaited)" : "", 100 * wait_share(r));
    }
    // The source alone: shards → shuffle on the same I/O thread, nothing decoded. No decode
    // stage fed by this source can deliver more samples per second.
    if (shuffled && a.source_rate) {
        std::vector<double> source_rates;
        for (std::size_t e = 0; e < std::max<std::size_t>(a.epochs, 1); ++e) {
            std::uint64_t n = 0;
            cb::stopwatch clock;
            auto run = shuffled->run(e);
            for (auto& sample : run) n += sample.key.empty() ? 0 : 1;
            source_rates.push_back(static_cast<double>(n) / clock.seconds());
            cb::json_line()
                .add("bench", "pipeline")
                .add("engine", "source-only")
                .add("epoch", e)
                .add("images", n)
                .add("images_per_s", source_rates.back())
                .print();
        }
        std::fprintf(stderr, "pipeline: the source alone (shards -> shuffle, nothing decoded): median %.0f samples/s over %zu epochs\n",
                     cb::median(source_rates), source_rates.size());
    }
    // Decode only: the same decode on the same threads over JPEGs already in memory.
    if (samples && a.decode_only > 0) {
        std::vector<std::vector<std::byte>> jpegs;
        std::vector<cv::shard::sample> kept; // with --extra: for the cost of the extra fields
        for (auto& s : *samples) {
            for (const char* f : {"jpg", "jpeg"})
                if (const auto* field = s.find(f)) {
                    const auto d = field->data.span();
                    jpegs.emplace_back(d.begin(), d.end());
                    break;
                }
            if (!a.extra.empty()) kept.push_back(s);
            if (jpegs.size() >= a.decode_only) break;
        }
        if (!kept.empty()) extra_cost(kept, decode, a.batch);
        const double only = decode_only_rate(jpegs, decode.decode, threads);
        // The first epoch also warms the pools (fresh memory is dear in VMs): with more than
        // one, the later ones are compared.
        const double e2e = rates.size() > 1 ? cb::median(std::vector<double>(rates.begin() + 1, rates.end())) : rates.front();
        cb::json_line()
            .add("bench", "pipeline")
            .add("engine", "decode-only")
            .add("threads", threads)
            .add("size", a.size)
            .add("images", jpegs.size())
            .add("images_per_s", only)
            .add("pipeline_over_decode_only", e2e / std::max(1e-9, only))
            .print();
        std::fprintf(stderr, "pipeline: decode only (%zu JPEGs in memory, %zu threads): %.0f images/s; the pipeline reached %.0f%% of it\n",
                     jpegs.size(), threads, only, 100 * e2e / std::max(1e-9, only));
    }
    return 0;
}

// ---- gen-shards ------------------------------------------------------------------------

struct gen_shards_args {
    std::string out;
    std::size_t count = 2560;
    std::size_t classes = 10;
    std::uint64_t shard_mb = 64;
    std::uint64_t seed = 1;
};

/** Draws the synthetic dataset (image::make_synthetic_images, kept if there) under
    OUT/images and packs it, in a fixed shuffled order, into OUT/shard-%06d.tar: each sample a
    `jpg`, a `cls`, a `txt` caption and a `json` document (class, caption, size, a few
    boxes), about what captioned datasets hold beside each image. */
int cmd_gen_shards(const gen_shards_args& a)
{
    namespace fs = std::filesystem;
    const fs::path out = a.out, images = out / "images";
    ci::synthetic_images spec{.dir = images, .classes = a.classes, .count = a.count, .seed = a.seed};
    cb::stopwatch clock;
    ci::make_synthetic_images(spec);
    const auto files = cv::file::walk(images, {.extensions = {".jpg"}, .labels = true});
    std::vector<std::size_t> order(files.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::uint64_t state = a.seed * 6364136223846793005ULL + 12345;
    for (std::size_t i = order.size(); i > 1; --i) { // Fisher-Yates with a fixed LCG: the same shards for a seed
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        std::swap(order[i - 1], order[(state >> 33) % i]);
    }
    cv::file::listing ordered;
    ordered.root = files.root;
    ordered.classes = files.classes;
    for (std::size_t i : order) ordered.entries.push_back(files.entries[i]);
    cv::shard::writer w({.pattern = (out / "shard-%06d.tar").string(), .max_size = a.shard_mb << 20});
    cv::runtime rt;
    std::uint64_t n = 0, bytes = 0;
    for (auto& b : cv::file::files(ordered).on(rt)) {
        const std::string cls = std::to_string(b.label);
        const std::string& name = files.classes.at(static_cast<std::size_t>(b.label));
        const std::string key = b.key.substr(0, b.key.rfind('.'));
        std::string caption = "a synthetic photo of a " + name + " over a textured background, image " + std::to_string(n);
        for (char& c : caption)
            if (c == '_') c = ' ';
        const std::uint64_t r = n * 2654435761u;
        std::string json = "{\"label\": " + cls + ", \"class\": \"" + name + "\", \"caption\": \"" + caption +
                           "\", \"width\": 500, \"height\": 375, \"boxes\": [";
        for (int k = 0; k < 3; ++k)
            json += (k ? ", " : "") + std::string("[") + std::to_string((r >> (k * 7)) % 400) + ", " + std::to_string((r >> (k * 5)) % 300) +
                    ", 64, 48]";
        json += "], \"source\": {\"seed\": " + std::to_string(a.seed) + ", \"index\": " + std::to_string(n) + "}}";
        auto as_bytes = [](const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); };
        const cv::shard::field_view fields[] = {
            {"jpg", b.data.span()}, {"cls", as_bytes(cls)}, {"txt", as_bytes(caption)}, {"json", as_bytes(json)}};
        w.write(key, fields);
        bytes += b.data.size() + cls.size() + caption.size() + json.size();
        ++n;
    }
    w.close();
    const auto idx = w.index();
    std::fprintf(stderr, "gen-shards: %llu samples (jpg, cls, txt, json), %.1f MB, in %zu shards in %s, %.1f s\n",
                 static_cast<unsigned long long>(n), bytes / 1e6, idx.shards.size(), out.c_str(), clock.seconds());
    cb::json_line()
        .add("bench", "gen-shards")
        .add("samples", n)
        .add("bytes", bytes)
        .add("shards", idx.shards.size())
        .add("seconds", clock.seconds())
        .print();
    return 0;
}

} // namespace

std::function<int()> add_pipeline_subcommands(CLI::App& app)
{
    auto g = std::make_shared<gen_shards_args>();
    auto* gs = app.add_subcommand("gen-shards", "make shards of jpg, cls, txt and json samples from the synthetic dataset (for pipeline --extra)");
    gs->add_option("out", g->out, "the folder: images/ and shard-%06d.tar go there")->required();
    gs->add_option("--count", g->count, "images")->capture_default_str();
    gs->add_option("--classes", g->classes, "classes (at most 100)")->capture_default_str();
    gs->add_option("--shard-MB", g->shard_mb, "data per shard")->capture_default_str();
    gs->add_option("--seed", g->seed, "seed of the images and the order")->capture_default_str();
    auto a = std::make_shared<pipeline_args>();
    auto* p = app.add_subcommand("pipeline", "end to end: shards (or an ImageFolder) → decode with random-resized crop and flip → batches");
    auto* urls = p->add_option("urls", a->urls, "shards: paths, brace patterns, s3:// URLs, a dataset index (.json)");
    auto* folder = p->add_option("--folder", a->folder, "an ImageFolder instead of shards");
    urls->excludes(folder);
    p->add_option("--batch", a->batch, "images per batch")->capture_default_str();
    p->add_option("--size", a->size, "output side (random-resized crop)")->capture_default_str();
    p->add_option("--threads", a->threads, "compute threads (0: one per core); one I/O thread besides")->capture_default_str();
    p->add_option("--epochs", a->epochs, "passes over the data")->capture_default_str();
    p->add_option("--decode-only", a->decode_only, "JPEGs held in memory for the decode-only rate (0: skip it)")->capture_default_str();
    p->add_option("--seed", a->seed, "seed of order and augmentation")->capture_default_str();
    p->add_option("--pool-MB", a->pool_mb, "idle memory the runtime's buffer pool may keep (0: its default)")->capture_default_str();
    p->add_flag("--cuda", a->cuda, "copy each batch to GPU 0 (cuda::to_cuda); needs a build with CUDA and a device");
    p->add_flag("--source-rate", a->source_rate, "also time the shards and the shuffle alone (nothing decoded): the ceiling of any decoder they feed");
    p->add_flag("--gpu-decode", a->gpu_decode, "decode on GPU 0 and the CPU at once (cuda::decode_batches) into device batches");
    p->add_option("--endpoint", a->endpoint, "s3:// shards: the S3 endpoint URL (default: AWS_ENDPOINT_URL, the profile, or AWS)");
    p->add_option("--region", a->region, "s3:// shards: the S3 region");
    p->add_option("--timeout-ms", a->timeout_ms, "s3:// shards: the S3 client's first-byte and idle timeouts (0: its defaults)")
        ->capture_default_str();
    p->add_option("--cpu-share", a->cpu_share, "--gpu-decode: the CPU decoders' share of the JPEGs (negative: measured each batch)")
        ->capture_default_str();
    p->add_option("--extra", a->extra, "fields batched beside the images as columns, e.g. --extra txt,json,cls")->delimiter(',');
    return [p, a, gs, g]() -> int {
        if (gs->parsed()) return cmd_gen_shards(*g);
        if (!p->parsed()) return -1;
        if (a->urls.empty() && a->folder.empty()) throw CLI::ValidationError("pipeline", "give shard URLs or --folder");
        return cmd_pipeline(*a);
    };
}
