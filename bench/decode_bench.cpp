// decode_bench.cpp — conveyor-bench decode: images/s of conveyor's JPEG decoder and of the
// decode_image stage, beside a plain TurboJPEG tjDecompress2 loop over the same JPEGs in
// the same process (the limit), at 1 and N threads; full size, and random-resized crops to
// 224x224 decoded whole then cropped, DCT-scaled then cropped, or cut losslessly first.
//
// The JPEGs are real ones: a directory of them (--dir), or made here with TurboJPEG from
// synthetic pictures (500x375 by default, ImageNet's typical size; gradients, shapes and
// grain, quality 90, 4:2:0), held in memory so that only decoding is timed. Each repeat
// runs every mode once, in a rotated order, and the summary gives medians.
#include "decode_bench.hpp"

#include "support/bench.hpp"
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/image/decode.hpp>
#include <conveyor/image/stage.hpp>

#include <turbojpeg.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace cv = conveyor;
namespace cb = conveyor::bench;
namespace image = conveyor::image;
namespace fs = std::filesystem;
namespace asio = boost::asio;

using jpeg_set = std::vector<std::vector<unsigned char>>;

struct decode_args {
    std::string dir;
    std::size_t count = 256;
    std::uint32_t width = 500;
    std::uint32_t height = 375;
    int quality = 90;
    std::vector<std::size_t> threads{1, 2};
    std::size_t repeat = 5;
    std::size_t passes = 1;
    std::uint32_t size = 224;
    std::vector<std::string> modes;
};

std::uint64_t mix(std::uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/// A synthetic photo-like picture: a two-colour gradient, a few discs and boxes, and grain
/// (JPEGs of flat colour would decode unrealistically fast).
std::vector<unsigned char> picture(std::uint64_t seed, std::uint32_t w, std::uint32_t h)
{
    std::vector<unsigned char> px(std::size_t{w} * h * 3);
    std::uint64_t s = mix(seed);
    auto next = [&] { return s = mix(s + 0x9e3779b97f4a7c15ULL); };
    int c0[3], c1[3];
    for (int k = 0; k < 3; ++k) c0[k] = int(next() % 256), c1[k] = int(next() % 256);
    struct shape {
        int x, y, r, box, col[3];
    };
    std::vector<shape> shapes(6);
    for (auto& sh : shapes) {
        sh = {int(next() % w), int(next() % h), int(10 + next() % (std::min(w, h) / 3)), int(next() % 2), {}};
        for (int& c : sh.col) c = int(next() % 256);
    }
    for (std::uint32_t y = 0; y < h; ++y)
        for (std::uint32_t x = 0; x < w; ++x) {
            const double t = (double(x) / w + double(y) / h) / 2;
            int col[3];
            for (int k = 0; k < 3; ++k) col[k] = int(c0[k] * (1 - t) + c1[k] * t);
            for (const auto& sh : shapes) {
                const int dx = int(x) - sh.x, dy = int(y) - sh.y;
                const bool in = sh.box ? (std::abs(dx) < sh.r && std::abs(dy) < sh.r * 2 / 3) : dx * dx + dy * dy < sh.r * sh.r;
                if (in)
                    for (int k = 0; k < 3; ++k) col[k] = sh.col[k];
            }
            const int grain = int(next() % 25) - 12;
            unsigned char* p = &px[(std::size_t{y} * w + x) * 3];
            for (int k = 0; k < 3; ++k) p[k] = static_cast<unsigned char>(std::clamp(col[k] + grain, 0, 255));
        }
    return px;
}

jpeg_set make_jpegs(const decode_args& a)
{
    jpeg_set out;
    tjhandle tj = tjInitCompress();
    if (!tj) throw std::runtime_error("tjInitCompress failed");
    for (std::size_t i = 0; i < a.count; ++i) {
        const auto px = picture(i + 1, a.width, a.height);
        unsigned char* buf = nullptr;
        unsigned long size = 0;
        if (tjCompress2(tj, px.data(), int(a.width), 0, int(a.height), TJPF_RGB, &buf, &size, TJSAMP_420, a.quality, 0) != 0) {
            tjDestroy(tj);
            throw std::runtime_error(std::string("tjCompress2: ") + tjGetErrorStr2(tj));
        }
        out.emplace_back(buf, buf + size);
        tjFree(buf);
    }
    tjDestroy(tj);
    return out;
}

jpeg_set load_dir(const decode_args& a)
{
    std::vector<fs::path> paths;
    for (const auto& e : fs::recursive_directory_iterator(a.dir)) {
        if (!e.is_regular_file()) continue;
        auto ext = e.path().extension().string();
        std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
        if (ext == ".jpg" || ext == ".jpeg") paths.push_back(e.path());
    }
    std::sort(paths.begin(), paths.end());
    if (a.count && paths.size() > a.count) paths.resize(a.count);
    jpeg_set out;
    for (const auto& p : paths) {
        std::ifstream in(p, std::ios::binary);
        out.emplace_back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }
    if (out.empty()) throw std::runtime_error("no .jpg/.jpeg files under " + a.dir);
    return out;
}

/// `n` threads that live across measurements (so per-thread codec handles and scratch
/// memory are made once, for the plain loop and the decoder alike), each running a job.
class team {
public:
    explicit team(std::size_t n)
    {
        for (std::size_t t = 0; t < n; ++t) threads_.emplace_back([this, t] { loop(t); });
    }
    ~team()
    {
        {
            std::lock_guard lk(mu_);
            quit_ = true;
        }
        cv_.notify_all();
        for (auto& t : threads_) t.join();
    }
    std::size_t size() const noexcept { return threads_.size(); }
    /// Runs `job(thread)` on every thread; returns when all are done.
    void run(const std::function<void(std::size_t)>& job)
    {
        std::unique_lock lk(mu_);
        job_ = &job;
        done_ = 0;
        error_ = nullptr;
        ++generation_;
        cv_.notify_all();
        done_cv_.wait(lk, [&] { return done_ == threads_.size(); });
        job_ = nullptr;
        if (error_) std::rethrow_exception(error_);
    }

private:
    void loop(std::size_t t)
    {
        std::uint64_t seen = 0;
        for (;;) {
            const std::function<void(std::size_t)>* job;
            {
                std::unique_lock lk(mu_);
                cv_.wait(lk, [&] { return quit_ || generation_ != seen; });
                if (quit_) return;
                seen = generation_;
                job = job_;
            }
            std::exception_ptr e;
            try {
                (*job)(t);
            } catch (...) {
                e = std::current_exception();
            }
            std::lock_guard lk(mu_);
            if (e && !error_) error_ = e;
            if (++done_ == threads_.size()) done_cv_.notify_all();
        }
    }

    std::vector<std::thread> threads_;
    std::mutex mu_;
    std::condition_variable cv_, done_cv_;
    const std::function<void(std::size_t)>* job_ = nullptr;
    std::uint64_t generation_ = 0;
    std::size_t done_ = 0;
    bool quit_ = false;
    std::exception_ptr error_;
};

/// The plain TurboJPEG loop's per-thread state.
struct plain_state {
    tjhandle tj = nullptr;
    std::vector<unsigned char> out;
    plain_state() : tj(tjInitDecompress()) {}
    ~plain_state()
    {
        if (tj) tjDestroy(tj);
    }
};

plain_state& plain()
{
    thread_local plain_state s;
    return s;
}

/// Decodes `jpeg` at full size with tjDecompress2, as a program using TurboJPEG directly would.
void plain_decode(const std::vector<unsigned char>& jpeg)
{
    auto& s = plain();
    int w = 0, h = 0, sub = 0, cs = 0;
    if (tjDecompressHeader3(s.tj, jpeg.data(), jpeg.size(), &w, &h, &sub, &cs) != 0)
        throw std::runtime_error(std::string("tjDecompressHeader3: ") + tjGetErrorStr2(s.tj));
    const std::size_t need = std::size_t(w) * h * 3;
    if (s.out.size() < need) s.out.resize(need);
    if (tjDecompress2(s.tj, jpeg.data(), jpeg.size(), s.out.data(), w, 0, h, TJPF_RGB, 0) != 0)
        throw std::runtime_error(std::string("tjDecompress2: ") + tjGetErrorStr2(s.tj));
}

struct mode {
    std::string name;
    std::string what;
};

const std::vector<mode> all_modes = {
    {"plain", "tjDecompress2, full size RGB, into one reused buffer per thread (the limit)"},
    {"decoder", "image::decoder::decode, full size RGB, into a pooled buffer"},
    {"stage", "the decode_image stage on a runtime of N compute threads, full size, from memory"},
    {"rrc-full", "random-resized crop to SxS: full decode, crop, resize (decode_into, no DCT scaling)"},
    {"rrc-scaled", "random-resized crop to SxS: DCT-scaled decode, crop, resize (decode_into)"},
    {"rrc-region", "random-resized crop to SxS: DCT-scaled decode of the crop's rows and MCU columns only, resize"},
    {"rrc-transform", "random-resized crop to SxS: lossless MCU crop (tjTransform), DCT-scaled decode of it, resize"},
    {"stage-rrc", "the decode_image stage, random-resized crop to SxS with DCT scaling"},
};

/// A pipeline of the images as blobs, `passes` times over, copied from memory into pooled buffers.
cv::pipeline<cv::blob> memory_source(std::shared_ptr<const jpeg_set> set, std::size_t passes, cv::runtime& rt)
{
    return cv::pipeline<cv::blob>(
        [set, passes](const std::shared_ptr<cv::run_context>& ctx) {
            return cv::make_stream<cv::blob>(
                ctx, "memory", cv::default_stream_capacity,
                [set, passes, ctx = ctx.get()](cv::sink<cv::blob>& out) -> asio::awaitable<void> {
                    std::uint64_t i = 0;
                    for (std::size_t p = 0; p < passes; ++p)
                        for (const auto& j : *set) {
                            cv::blob b;
                            b.key = "img_" + std::to_string(i % set->size());
                            b.index = i++;
                            b.data = ctx->rt().buffers().acquire(j.size());
                            std::memcpy(b.data.data(), j.data(), j.size());
                            const bool listening = co_await out.send(std::move(b));
                            if (!listening) co_return;
                        }
                });
        },
        &rt);
}

struct result {
    std::string mode;
    std::size_t threads;
    double images_per_s;
};

int run_decode(const decode_args& a)
{
    const auto set = std::make_shared<const jpeg_set>(a.dir.empty() ? make_jpegs(a) : load_dir(a));
    std::size_t bytes = 0;
    for (const auto& j : *set) bytes += j.size();
    std::vector<mode> modes;
    for (const auto& m : all_modes)
        if (a.modes.empty() || std::find(a.modes.begin(), a.modes.end(), m.name) != a.modes.end()) modes.push_back(m);
    if (modes.empty()) throw std::runtime_error("no known mode selected");
    std::fprintf(stderr, "decode: %zu JPEGs (%s), mean %.0f KB; %zu repeat(s) x %zu pass(es); output %ux%u for the rrc modes\n",
                 set->size(), a.dir.empty() ? (std::to_string(a.width) + "x" + std::to_string(a.height) + " synthetic, q" + std::to_string(a.quality)).c_str()
                                            : a.dir.c_str(),
                 double(bytes) / set->size() / 1e3, a.repeat, a.passes, a.size, a.size);

    const image::decode_options rrc{.size = {a.size, a.size}, .crop = image::crop_mode::random_resized, .flip = 0.5, .seed = 1};
    std::vector<result> results;
    for (std::size_t threads : a.threads) {
        team crew(threads);
        cv::runtime rt({.io_threads = 1, .compute_threads = threads});
        const image::decoder dec;
        const std::size_t total = set->size() * a.passes;
        // Each thread takes images t, t+N, t+2N, ... of every pass.
        auto over_images = [&](auto&& fn) {
            return [&, fn](std::size_t t) {
                for (std::size_t p = 0; p < a.passes; ++p)
                    for (std::size_t i = t; i < set->size(); i += crew.size()) fn(i);
            };
        };
        auto timed = [&](const mode& m) -> double {
            cb::stopwatch sw;
            if (m.name == "plain") {
                crew.run(over_images([&](std::size_t i) { plain_decode((*set)[i]); }));
            } else if (m.name == "decoder") {
                crew.run(over_images([&](std::size_t i) {
                    const auto& j = (*set)[i];
                    auto img = dec.decode(std::as_bytes(std::span(j)), {}, {.key = "img"});
                    (void)img;
                }));
            } else if (m.name == "stage" || m.name == "stage-rrc") {
                auto pipe = memory_source(set, a.passes, rt) |
                            image::decode_image({.decode = m.name == "stage" ? image::decode_options{} : rrc});
                std::size_t n = 0;
                for (auto& d : pipe) n += d.image.width > 0;
                if (n != total) throw std::runtime_error("the stage gave " + std::to_string(n) + " images of " + std::to_string(total));
            } else {
                auto o = rrc;
                o.dct_scaling = m.name != "rrc-full";
                o.jpeg_crop = m.name == "rrc-transform" ? image::jpeg_crop_method::transform_then_decode
                              : m.name == "rrc-region"  ? image::jpeg_crop_method::decode_region
                                                        : image::jpeg_crop_method::decode_then_crop;
                crew.run(over_images([&, o](std::size_t i) {
                    thread_local std::vector<std::uint8_t> slot;
                    slot.resize(std::size_t{a.size} * a.size * 3);
                    const auto& j = (*set)[i];
                    dec.decode_into(std::as_bytes(std::span(j)), o, {.key = "img_" + std::to_string(i)}, slot);
                }));
            }
            return double(total) / sw.seconds();
        };
        // Warm-up: every mode once (codec handles, scratch memory, the buffer pool).
        for (const auto& m : modes) (void)timed(m);
        for (std::size_t r = 0; r < a.repeat; ++r) {
            for (std::size_t k = 0; k < modes.size(); ++k) {
                const auto& m = modes[(k + r) % modes.size()]; // rotate the order each repeat
                const double ips = timed(m);
                results.push_back({m.name, threads, ips});
                cb::json_line()
                    .add("bench", "decode")
                    .add("mode", m.name)
                    .add("threads", threads)
                    .add("repeat", r)
                    .add("images", total)
                    .add("images_per_s", ips)
                    .add("mean_kb", double(bytes) / set->size() / 1e3)
                    .print();
            }
        }
    }

    // Medians, JSON lines and a table.
    std::map<std::pair<std::string, std::size_t>, double> med;
    for (const auto& m : modes)
        for (std::size_t t : a.threads) {
            std::vector<double> v;
            for (const auto& r : results)
                if (r.mode == m.name && r.threads == t) v.push_back(r.images_per_s);
            med[{m.name, t}] = cb::median(v);
            cb::json_line().add("bench", "decode").add("summary", true).add("mode", m.name).add("threads", t).add("median_images_per_s", cb::median(v)).print();
        }
    std::fprintf(stderr, "\n%-14s", "images/s");
    for (std::size_t t : a.threads) std::fprintf(stderr, " %9zu thr", t);
    std::fprintf(stderr, "   (median of %zu)\n", a.repeat);
    for (const auto& m : modes) {
        std::fprintf(stderr, "%-14s", m.name.c_str());
        for (std::size_t t : a.threads) std::fprintf(stderr, " %13.0f", med[{m.name, t}]);
        std::fprintf(stderr, "   %s\n", m.what.c_str());
    }
    auto have = [&](const char* name, std::size_t t) { return med.count({name, t}) && med[{name, t}] > 0; };
    auto ratio = [&](const char* what, const char* x, std::size_t tx, const char* y, std::size_t ty, const char* target) {
        if (!have(x, tx) || !have(y, ty)) return;
        const double r = med[{x, tx}] / med[{y, ty}];
        std::fprintf(stderr, "%-58s %6.2f   %s\n", what, r, target);
        cb::json_line().add("bench", "decode").add("ratio", what).add("value", r).add("target", target).print();
    };
    std::fprintf(stderr, "\n");
    const std::size_t t1 = a.threads.front(), tn = a.threads.back();
    ratio("decoder / plain, 1 thread", "decoder", t1, "plain", t1, "target >= 0.95");
    ratio("stage / plain, 1 thread", "stage", t1, "plain", t1, "target >= 0.95");
    if (tn != t1) {
        ratio("plain, N threads / 1 thread", "plain", tn, "plain", t1, "(what the machine allows)");
        ratio("decoder, N threads / 1 thread", "decoder", tn, "decoder", t1, "target >= 1.8 at 2");
        ratio("stage, N threads / 1 thread", "stage", tn, "stage", t1, "target >= 1.8 at 2");
    }
    for (std::size_t t : a.threads) {
        const std::string n = std::to_string(t);
        ratio(("rrc-scaled / rrc-full, " + n + " thread(s)").c_str(), "rrc-scaled", t, "rrc-full", t, "target >= 2");
        ratio(("rrc-region / rrc-full, " + n + " thread(s)").c_str(), "rrc-region", t, "rrc-full", t, "target >= 2");
        ratio(("rrc-transform / rrc-full, " + n + " thread(s)").c_str(), "rrc-transform", t, "rrc-full", t, "");
        ratio(("stage-rrc / rrc-full, " + n + " thread(s)").c_str(), "stage-rrc", t, "rrc-full", t, "target >= 2");
    }
    return 0;
}

} // namespace

std::function<int()> add_decode_subcommands(CLI::App& app)
{
    auto args = std::make_shared<decode_args>();
    auto* sub = app.add_subcommand("decode", "JPEG decode images/s: conveyor's decoder and decode_image stage beside a plain tjDecompress2 loop");
    sub->add_option("--dir", args->dir, "decode the .jpg/.jpeg files under this directory (default: make synthetic JPEGs)")
        ->check(CLI::ExistingDirectory);
    sub->add_option("--count", args->count, "JPEGs to make, or the most to read from --dir")->capture_default_str();
    sub->add_option("--width", args->width, "synthetic JPEGs' width")->capture_default_str();
    sub->add_option("--height", args->height, "synthetic JPEGs' height")->capture_default_str();
    sub->add_option("--quality", args->quality, "synthetic JPEGs' quality")->capture_default_str();
    sub->add_option("--threads", args->threads, "thread counts to measure, e.g. 1,2")->delimiter(',')->capture_default_str();
    sub->add_option("--repeat", args->repeat, "measurements of each mode (medians reported)")->capture_default_str();
    sub->add_option("--passes", args->passes, "passes over the JPEGs per measurement")->capture_default_str();
    sub->add_option("--size", args->size, "output side of the random-resized-crop modes")->capture_default_str();
    sub->add_option("--modes", args->modes, "modes to run (default all): plain, decoder, stage, rrc-full, rrc-scaled, rrc-region, rrc-transform, stage-rrc")
        ->delimiter(',');
    return [sub, args]() -> int {
        if (!*sub) return -1;
        try {
            return run_decode(*args);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "decode: %s\n", e.what());
            return 1;
        }
    };
}
