// decode_bench.cpp — conveyor-bench decode: images/s of conveyor's decoder and of the
// decode_image stage, beside a plain loop over the codec library's own decode of the same
// images in the same process (the limit), at 1 and N threads: TurboJPEG's tjDecompress2,
// libwebp's WebPDecodeRGB, or libavif's avifDecoderRead and avifImageYUVToRGB (--format).
// Full size, and random-resized crops to 224x224 (JPEG: decoded whole then cropped,
// DCT-scaled then cropped, as a region, or cut losslessly first).
//
// The images are real ones: a directory of them (--dir), or made here from synthetic
// pictures (500x375 by default, ImageNet's typical size; gradients, shapes and grain) by
// TurboJPEG (quality 90, 4:2:0), libwebp (quality 90) or libavif (libaom, quantizer 25,
// 4:2:0, 8-bit), held in memory so that only decoding is timed. Each repeat runs every mode
// once, in a rotated order, and the summary gives medians and the spread.
#include "decode_bench.hpp"

#include "support/bench.hpp"
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/image/decode.hpp>
#include <conveyor/image/stage.hpp>

#include <turbojpeg.h>
#if CONVEYOR_WITH_WEBP
#include <webp/decode.h>
#include <webp/encode.h>
#endif
#if CONVEYOR_WITH_AVIF
#include <avif/avif.h>
#endif

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
    std::string format = "jpeg";
    int avif_quantizer = 25;
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

/// `px` (w x h RGB) as `a.format` says.
std::vector<unsigned char> encode(const decode_args& a, const std::vector<unsigned char>& px, tjhandle tj)
{
    if (a.format == "webp") {
#if CONVEYOR_WITH_WEBP
        std::uint8_t* buf = nullptr;
        const std::size_t n = WebPEncodeRGB(px.data(), int(a.width), int(a.height), int(a.width * 3), float(a.quality), &buf);
        if (n == 0) throw std::runtime_error("WebPEncodeRGB failed");
        std::vector<unsigned char> out(buf, buf + n);
        WebPFree(buf);
        return out;
#endif
    }
    if (a.format == "avif") {
#if CONVEYOR_WITH_AVIF
        avifImage* im = avifImageCreate(a.width, a.height, 8, AVIF_PIXEL_FORMAT_YUV420);
        avifRGBImage rgb;
        avifRGBImageSetDefaults(&rgb, im);
        rgb.format = AVIF_RGB_FORMAT_RGB;
        rgb.pixels = const_cast<std::uint8_t*>(px.data());
        rgb.rowBytes = a.width * 3;
        avifEncoder* e = avifEncoderCreate();
        e->speed = 8;
        e->minQuantizer = e->maxQuantizer = a.avif_quantizer;
        avifRWData data = AVIF_DATA_EMPTY;
        const bool ok = avifImageRGBToYUV(im, &rgb) == AVIF_RESULT_OK && avifEncoderWrite(e, im, &data) == AVIF_RESULT_OK;
        std::vector<unsigned char> out(data.data, data.data + data.size);
        avifRWDataFree(&data);
        avifEncoderDestroy(e);
        avifImageDestroy(im);
        if (!ok) throw std::runtime_error("libavif could not encode the synthetic picture");
        return out;
#endif
    }
    unsigned char* buf = nullptr;
    unsigned long size = 0;
    if (tjCompress2(tj, px.data(), int(a.width), 0, int(a.height), TJPF_RGB, &buf, &size, TJSAMP_420, a.quality, 0) != 0)
        throw std::runtime_error(std::string("tjCompress2: ") + tjGetErrorStr2(tj));
    std::vector<unsigned char> out(buf, buf + size);
    tjFree(buf);
    return out;
}

jpeg_set make_images(const decode_args& a)
{
    jpeg_set out;
    tjhandle tj = tjInitCompress();
    if (!tj) throw std::runtime_error("tjInitCompress failed");
    try {
        for (std::size_t i = 0; i < a.count; ++i) out.push_back(encode(a, picture(i + 1, a.width, a.height), tj));
    } catch (...) {
        tjDestroy(tj);
        throw;
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
        if (a.format == "jpeg" ? (ext == ".jpg" || ext == ".jpeg") : ext == "." + a.format) paths.push_back(e.path());
    }
    std::sort(paths.begin(), paths.end());
    if (a.count && paths.size() > a.count) paths.resize(a.count);
    jpeg_set out;
    for (const auto& p : paths) {
        std::ifstream in(p, std::ios::binary);
        out.emplace_back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }
    if (out.empty()) throw std::runtime_error("no " + std::string(a.format == "jpeg" ? ".jpg/.jpeg" : "." + a.format) + " files under " + a.dir);
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

/// The plain loops' per-thread state: a TurboJPEG handle, a libavif decoder and image, an
/// output buffer.
struct plain_state {
    tjhandle tj = nullptr;
    std::vector<unsigned char> out;
#if CONVEYOR_WITH_AVIF
    avifDecoder* avif = nullptr;
    avifImage* avif_image = nullptr;
#endif
    plain_state() : tj(tjInitDecompress()) {}
    ~plain_state()
    {
        if (tj) tjDestroy(tj);
#if CONVEYOR_WITH_AVIF
        if (avif) avifDecoderDestroy(avif);
        if (avif_image) avifImageDestroy(avif_image);
#endif
    }
};

plain_state& plain()
{
    thread_local plain_state s;
    return s;
}

/// Decodes `b` at full size to RGB as a program calling the codec library directly would:
/// tjDecompress2 into a reused buffer; WebPDecodeRGB (which allocates its output); or
/// avifDecoderReadMemory on a reused decoder, then avifImageYUVToRGB into a reused buffer.
void plain_decode(const std::string& format, const std::vector<unsigned char>& jpeg)
{
    auto& s = plain();
#if CONVEYOR_WITH_WEBP
    if (format == "webp") {
        int w = 0, h = 0;
        std::uint8_t* px = WebPDecodeRGB(jpeg.data(), jpeg.size(), &w, &h);
        if (!px) throw std::runtime_error("WebPDecodeRGB failed");
        WebPFree(px);
        return;
    }
#endif
#if CONVEYOR_WITH_AVIF
    if (format == "avif") {
        if (!s.avif) {
            s.avif = avifDecoderCreate();
            s.avif_image = avifImageCreateEmpty();
            s.avif->maxThreads = 1;
        }
        avifResult r = avifDecoderReadMemory(s.avif, s.avif_image, jpeg.data(), jpeg.size());
        if (r != AVIF_RESULT_OK) throw std::runtime_error(std::string("avifDecoderReadMemory: ") + avifResultToString(r));
        avifRGBImage rgb;
        avifRGBImageSetDefaults(&rgb, s.avif_image);
        rgb.depth = 8;
        rgb.format = AVIF_RGB_FORMAT_RGB;
        rgb.rowBytes = s.avif_image->width * 3;
        const std::size_t need = std::size_t{rgb.rowBytes} * s.avif_image->height;
        if (s.out.size() < need) s.out.resize(need);
        rgb.pixels = s.out.data();
        r = avifImageYUVToRGB(s.avif_image, &rgb);
        if (r != AVIF_RESULT_OK) throw std::runtime_error(std::string("avifImageYUVToRGB: ") + avifResultToString(r));
        return;
    }
#endif
    (void)format;
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
    {"plain", "the codec library alone, full size RGB (tjDecompress2 / WebPDecodeRGB / avifDecoderRead + avifImageYUVToRGB): the limit"},
    {"decoder", "image::decoder::decode, full size RGB, into a pooled buffer"},
    {"stage", "the decode_image stage on a runtime of N compute threads, full size, from memory"},
    {"rrc-full", "random-resized crop to SxS: JPEG: full decode, crop, resize (decode_into, no DCT scaling); WebP: the crop decoded alone, resized; AVIF: full decode, crop, resize"},
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
    std::size_t repeat;
    double images_per_s;
};

int run_decode(const decode_args& a)
{
#if !CONVEYOR_WITH_WEBP
    if (a.format == "webp") throw std::runtime_error("this build has no WebP decoder (CONVEYOR_WITH_WEBP)");
#endif
#if !CONVEYOR_WITH_AVIF
    if (a.format == "avif") throw std::runtime_error("this build has no AVIF decoder (CONVEYOR_WITH_AVIF)");
#endif
    const auto set = std::make_shared<const jpeg_set>(a.dir.empty() ? make_images(a) : load_dir(a));
    std::size_t bytes = 0;
    for (const auto& j : *set) bytes += j.size();
    std::vector<mode> modes;
    // The DCT-scaled, region and lossless-cut crops are JPEG's alone.
    const auto jpeg_only = [](const std::string& m) { return m == "rrc-scaled" || m == "rrc-region" || m == "rrc-transform"; };
    for (const auto& m : all_modes)
        if ((a.modes.empty() && (a.format == "jpeg" || !jpeg_only(m.name))) ||
            std::find(a.modes.begin(), a.modes.end(), m.name) != a.modes.end()) {
            if (a.format != "jpeg" && jpeg_only(m.name)) throw std::runtime_error("mode " + m.name + " is for JPEG only");
            modes.push_back(m);
        }
    if (modes.empty()) throw std::runtime_error("no known mode selected");
    const std::string made = a.format == "avif" ? " synthetic, quantizer " + std::to_string(a.avif_quantizer)
                                                : " synthetic, q" + std::to_string(a.quality);
    std::fprintf(stderr, "decode: %zu %s images (%s), mean %.0f KB; %zu repeat(s) x %zu pass(es); output %ux%u for the rrc modes\n",
                 set->size(), a.format.c_str(), a.dir.empty() ? (std::to_string(a.width) + "x" + std::to_string(a.height) + made).c_str()
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
                crew.run(over_images([&](std::size_t i) { plain_decode(a.format, (*set)[i]); }));
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
                results.push_back({m.name, threads, r, ips});
                cb::json_line()
                    .add("bench", "decode")
                    .add("format", a.format)
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
            cb::json_line()
                .add("bench", "decode")
                .add("format", a.format)
                .add("summary", true)
                .add("mode", m.name)
                .add("threads", t)
                .add("median_images_per_s", cb::median(v))
                .add("min_images_per_s", v.empty() ? 0.0 : *std::min_element(v.begin(), v.end()))
                .add("max_images_per_s", v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()))
                .print();
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
        // The spread: the ratio within each repeat (the two modes ran back to back).
        std::vector<double> paired;
        for (const auto& rx : results)
            for (const auto& ry : results)
                if (rx.mode == x && rx.threads == tx && ry.mode == y && ry.threads == ty && rx.repeat == ry.repeat)
                    paired.push_back(rx.images_per_s / ry.images_per_s);
        const double lo = paired.empty() ? r : *std::min_element(paired.begin(), paired.end());
        const double hi = paired.empty() ? r : *std::max_element(paired.begin(), paired.end());
        std::fprintf(stderr, "%-58s %6.2f   (repeats %.2f-%.2f)   %s\n", what, r, lo, hi, target);
        cb::json_line()
            .add("bench", "decode")
            .add("format", a.format)
            .add("ratio", what)
            .add("value", r)
            .add("repeat_min", lo)
            .add("repeat_max", hi)
            .add("target", target)
            .print();
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
        if (a.format != "jpeg") { // what a crop and resize to SxS costs beside the whole decode
            ratio(("rrc-full / plain, " + n + " thread(s)").c_str(), "rrc-full", t, "plain", t, "");
            ratio(("stage-rrc / plain, " + n + " thread(s)").c_str(), "stage-rrc", t, "plain", t, "");
            continue;
        }
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
    auto* sub = app.add_subcommand("decode", "decode images/s (JPEG, WebP, AVIF): conveyor's decoder and decode_image stage beside a plain loop over the codec library");
    sub->add_option("--format", args->format, "the images' format: jpeg, webp or avif (made here, or read from --dir by extension)")
        ->check(CLI::IsMember({"jpeg", "webp", "avif"}))
        ->capture_default_str();
    sub->add_option("--avif-quantizer", args->avif_quantizer, "synthetic AVIFs' quantizer (0-63, 0 lossless)")->capture_default_str();
    sub->add_option("--dir", args->dir, "decode the files of --format under this directory (.jpg/.jpeg, .webp, .avif; default: make synthetic ones)")
        ->check(CLI::ExistingDirectory);
    sub->add_option("--count", args->count, "images to make, or the most to read from --dir")->capture_default_str();
    sub->add_option("--width", args->width, "synthetic images' width")->capture_default_str();
    sub->add_option("--height", args->height, "synthetic images' height")->capture_default_str();
    sub->add_option("--quality", args->quality, "synthetic JPEGs' and WebPs' quality")->capture_default_str();
    sub->add_option("--threads", args->threads, "thread counts to measure, e.g. 1,2")->delimiter(',')->capture_default_str();
    sub->add_option("--repeat", args->repeat, "measurements of each mode (medians reported)")->capture_default_str();
    sub->add_option("--passes", args->passes, "passes over the images per measurement")->capture_default_str();
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
