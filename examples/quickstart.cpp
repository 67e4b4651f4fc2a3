// quickstart: conveyor end to end on a dataset it makes itself.
//
// With no arguments it
//   1. draws a synthetic ImageFolder dataset of JPEGs (10 classes, each a shape in a colour
//      of its own, 500 x 375, about ImageNet's file size) under /tmp/conveyor-quickstart,
//   2. packs it into webdataset tar shards with a dataset index (shard::writer),
//   3. trains on nothing, but feeds like a training loop would:
//
//        shards (shuffled per epoch) → samples → shuffle → decode (random-resized crop 224,
//        flip) straight into batches of 64 (contiguous tensors) → the GPU, if there is one
//
//      with a progress line, and prints images/s, MB/s, the time to the first batch and
//      each stage's busy share (the bottleneck marked),
//   4. writes first_batch.jpg: the first batch as a contact sheet, each image with its
//      label, so you can see what the pipeline handed on.
//
// Point it at your own data instead with --folder DIR (an ImageFolder of JPEG/PNG files),
// or --shards SPEC (shard paths, brace ranges, s3:// URLs, or a dataset index .json).
#include "progress.hpp"

#include <conveyor/conveyor.hpp>
#include <conveyor/core/metrics.hpp>
#include <conveyor/image/batch.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace cv = conveyor;
namespace ci = conveyor::image;
namespace fs = std::filesystem;

namespace {

// ---- the contact sheet ------------------------------------------------------------------

/// A 5 x 7 pixel font: digits, lower-case letters and a few signs, one row per byte (bit 4
/// is the leftmost pixel).
struct glyph {
    char c;
    std::array<std::uint8_t, 7> rows;
};
constexpr glyph font[] = {
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}}, {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}}, {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}}, {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}}, {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}}, {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'a', {0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F}}, {'b', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1E}},
    {'c', {0x00, 0x00, 0x0E, 0x10, 0x10, 0x11, 0x0E}}, {'d', {0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F}},
    {'e', {0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0E}}, {'f', {0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08}},
    {'g', {0x00, 0x0F, 0x11, 0x11, 0x0F, 0x01, 0x0E}}, {'h', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'i', {0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E}}, {'j', {0x02, 0x00, 0x06, 0x02, 0x02, 0x12, 0x0C}},
    {'k', {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12}}, {'l', {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'m', {0x00, 0x00, 0x1A, 0x15, 0x15, 0x11, 0x11}}, {'n', {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'o', {0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E}}, {'p', {0x00, 0x00, 0x1E, 0x11, 0x1E, 0x10, 0x10}},
    {'q', {0x00, 0x00, 0x0D, 0x13, 0x0F, 0x01, 0x01}}, {'r', {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10}},
    {'s', {0x00, 0x00, 0x0E, 0x10, 0x0E, 0x01, 0x1E}}, {'t', {0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06}},
    {'u', {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0D}}, {'v', {0x00, 0x00, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'w', {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0A}}, {'x', {0x00, 0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11}},
    {'y', {0x00, 0x00, 0x11, 0x11, 0x0F, 0x01, 0x0E}}, {'z', {0x00, 0x00, 0x1F, 0x02, 0x04, 0x08, 0x1F}},
    {'-', {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00}}, {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}},
    {':', {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00}}, {'?', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04}},
};

const glyph* glyph_of(char c)
{
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    for (const auto& g : font)
        if (g.c == c) return &g;
    return c == ' ' || c == '_' ? nullptr : glyph_of('?');
}

/// An RGB picture being drawn.
struct canvas {
    std::uint32_t width, height;
    std::vector<std::uint8_t> px;
    canvas(std::uint32_t w, std::uint32_t h) : width(w), height(h), px(std::size_t{w} * h * 3, 32) {}
    void fill(std::uint32_t x0, std::uint32_t y0, std::uint32_t w, std::uint32_t h, std::uint8_t r, std::uint8_t g, std::uint8_t b)
    {
        for (std::uint32_t y = y0; y < std::min(height, y0 + h); ++y)
            for (std::uint32_t x = x0; x < std::min(width, x0 + w); ++x) {
                std::uint8_t* p = px.data() + (std::size_t{y} * width + x) * 3;
                p[0] = r, p[1] = g, p[2] = b;
            }
    }
    /// `text` in white, each font pixel `scale` x `scale`, from (x, y); returns where it ended.
    std::uint32_t text(std::uint32_t x, std::uint32_t y, const std::string& s, std::uint32_t scale)
    {
        for (char c : s) {
            if (const glyph* g = glyph_of(c))
                for (std::uint32_t row = 0; row < 7; ++row)
                    for (std::uint32_t col = 0; col < 5; ++col)
                        if (g->rows[row] & (0x10 >> col)) fill(x + col * scale, y + row * scale, scale, scale, 255, 255, 255);
            x += 6 * scale;
        }
        return x;
    }
    /// An image (HWC, `channels` 1 or 3) pasted with its top left corner at (x, y).
    void paste(std::uint32_t x0, std::uint32_t y0, const std::uint8_t* img, std::uint32_t w, std::uint32_t h, std::uint32_t channels)
    {
        for (std::uint32_t y = 0; y < h && y0 + y < height; ++y)
            for (std::uint32_t x = 0; x < w && x0 + x < width; ++x) {
                std::uint8_t* p = px.data() + (std::size_t{y0 + y} * width + x0 + x) * 3;
                const std::uint8_t* q = img + (std::size_t{y} * w + x) * channels;
                for (std::uint32_t c = 0; c < 3; ++c) p[c] = q[channels == 3 ? c : 0];
            }
    }
};

/// The first batch as one JPEG: a grid of its images, each with its label under it.
void write_contact_sheet(const fs::path& path, const ci::image_batch& batch, const std::vector<std::string>& classes)
{
    if (batch.size() == 0 || batch.layout != ci::tensor_layout::nhwc || batch.images.type != ci::dtype::uint8) return;
    const auto tile_h = static_cast<std::uint32_t>(batch.images.shape[1]), tile_w = static_cast<std::uint32_t>(batch.images.shape[2]);
    const auto channels = static_cast<std::uint32_t>(batch.images.shape[3]);
    const std::uint32_t label_h = 20, gap = 4;
    const auto cols = static_cast<std::uint32_t>(std::min<std::size_t>(8, batch.size()));
    const auto rows = static_cast<std::uint32_t>((batch.size() + cols - 1) / cols);
    canvas sheet(cols * (tile_w + gap) + gap, rows * (tile_h + label_h + gap) + gap);
    const auto* pixels = static_cast<const std::uint8_t*>(batch.images.data);
    const auto* labels = static_cast<const std::int64_t*>(batch.labels.data);
    for (std::size_t i = 0; i < batch.size(); ++i) {
        const auto x = gap + static_cast<std::uint32_t>(i % cols) * (tile_w + gap);
        const auto y = gap + static_cast<std::uint32_t>(i / cols) * (tile_h + label_h + gap);
        sheet.paste(x, y, pixels + i * std::size_t{tile_h} * tile_w * channels, tile_w, tile_h, channels);
        const std::int64_t label = labels[i];
        std::string name = std::to_string(label);
        if (label >= 0 && static_cast<std::size_t>(label) < classes.size()) name = classes[static_cast<std::size_t>(label)];
        sheet.fill(x, y + tile_h, tile_w, label_h, 0, 0, 0);
        sheet.text(x + 3, y + tile_h + 3, name.substr(0, (tile_w - 6) / 12), 2);
    }
    const cv::buffer jpg = ci::encode_jpeg(sheet.px, sheet.width, sheet.height, ci::pixel_format::rgb, {.quality = 88});
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(jpg.data()), static_cast<std::streamsize>(jpg.size()));
    if (!out) throw std::runtime_error("cannot write " + path.string());
}

// ---- the dataset ------------------------------------------------------------------------

/// Makes the synthetic ImageFolder (kept if already there) and packs it into shards with an
/// index (also kept, if it is there and holds as many samples). Returns the index's path.
fs::path make_dataset(const fs::path& root, std::size_t count, std::size_t classes, std::vector<std::string>& class_names)
{
    const fs::path images = root / "images", shards = root / "shards", index = shards / "index.json";
    ci::synthetic_images spec{.dir = images, .classes = classes, .count = count};
    {
        examples::progress_line bar("drawing " + images.string(), count);
        const auto made = ci::make_synthetic_images(spec, [&](std::size_t done, std::size_t) { bar.update(done); });
        bar.finish();
        class_names = made.classes;
        std::printf("dataset: %zu JPEGs (%zu drawn now), %zu classes, %.1f MB, %.0f KB each, in %s\n", made.files, made.written,
                    made.classes.size(), made.bytes / 1e6, made.bytes / 1e3 / std::max<std::size_t>(1, made.files),
                    images.c_str());
        if (made.written == 0 && fs::exists(index)) {
            const auto idx = cv::shard::read_index(index.string());
            std::uint64_t n = 0;
            for (const auto& s : idx.shards) n += s.entries.size();
            if (n == made.files) {
                std::printf("shards: %zu, already packed in %s\n", idx.shards.size(), shards.c_str());
                return index;
            }
        }
    }
    // Pack: the files in a fixed random order (shards then mix classes), ~64 MB a shard.
    const auto files = cv::file::walk(images, {.extensions = {".jpg"}, .labels = true});
    std::vector<std::size_t> order(files.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::uint64_t state = 12345;
    for (std::size_t i = order.size(); i > 1; --i) { // Fisher-Yates with a fixed LCG: reproducible shards
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        std::swap(order[i - 1], order[(state >> 33) % i]);
    }
    fs::create_directories(shards);
    cv::shard::writer w({.pattern = (shards / "shard-%06d.tar").string(), .max_count = 100000, .max_size = 64'000'000});
    cv::runtime rt;
    cv::file::listing ordered;
    ordered.root = files.root;
    ordered.classes = files.classes;
    for (std::size_t i : order) ordered.entries.push_back(files.entries[i]);
    examples::progress_line bar("packing shards", ordered.size());
    std::uint64_t done = 0, bytes = 0;
    for (auto& b : cv::file::files(ordered).on(rt)) {
        const std::string cls = std::to_string(b.label);
        std::string key = b.key.substr(0, b.key.rfind('.'));
        const cv::shard::field_view fields[] = {{"jpg", b.data.span()}, {"cls", std::as_bytes(std::span(cls.data(), cls.size()))}};
        w.write(key, fields);
        bytes += b.data.size();
        bar.update(++done, bytes);
    }
    w.close();
    bar.finish();
    auto idx = w.index();
    for (auto& s : idx.shards) s.url = fs::path(s.url).filename().string(); // relative to the index
    cv::shard::write_index(index.string(), idx);
    std::printf("shards: %zu of up to 64 MB in %s, index %s\n", idx.shards.size(), shards.c_str(), index.c_str());
    return index;
}

} // namespace

int main(int argc, char** argv)
{
    CLI::App app{"conveyor quickstart: shards → samples → shuffle → decode → batches, on a dataset it makes itself"};
    fs::path root = "/tmp/conveyor-quickstart", folder;
    std::vector<std::string> shard_specs;
    std::size_t count = 2560, classes = 10, batch_size = 64, epochs = 1;
    std::uint32_t size = 224;
    std::uint64_t seed = 7;
    app.add_option("--dir", root, "where the generated dataset and its shards go (kept for the next run)")->capture_default_str();
    app.add_option("--count", count, "images in the generated dataset")->capture_default_str();
    app.add_option("--classes", classes, "classes in the generated dataset (at most 100)")->capture_default_str();
    auto* f = app.add_option("--folder", folder, "read this ImageFolder (class subfolders of JPEG/PNG files) instead");
    app.add_option("--shards", shard_specs, "read these shards instead: paths, brace ranges, s3:// URLs, a dataset index (.json)")
        ->excludes(f);
    app.add_option("--batch", batch_size, "images per batch")->capture_default_str();
    app.add_option("--size", size, "output size (square)")->capture_default_str();
    app.add_option("--epochs", epochs, "passes over the data")->capture_default_str();
    app.add_option("--seed", seed, "seed of the shard order, the shuffle and the augmentations")->capture_default_str();
    CLI11_PARSE(app, argc, argv);

    try {
        std::vector<std::string> class_names;
        if (folder.empty() && shard_specs.empty()) shard_specs = {make_dataset(root, count, classes, class_names).string()};

        // The pipeline: a lazy description; nothing runs until it is iterated. decode_batches
        // decodes each image on the compute pool straight into its place in a batch (one
        // contiguous NHWC uint8 tensor, labels beside it), ready for DLPack or the GPU.
        cv::runtime rt;
        const ci::decode_image_options decode{
            .decode = {.size = {size, size}, .crop = ci::crop_mode::random_resized, .flip = 0.5, .seed = seed}};
        ci::collate_options batching{.size = batch_size};
#if CONVEYOR_WITH_CUDA
        // With a GPU, batches are made in page-locked memory, so their copies run at the
        // link's rate while the next ones are decoded.
        const auto gpus = cv::cuda::devices();
        if (gpus.devices > 0) batching.allocator = cv::cuda::pinned_slab_allocator();
#endif
        std::optional<cv::pipeline<ci::image_batch>> pipe;
        std::size_t expected = 0;    // images an epoch gives, where known
        std::uint64_t data_bytes = 0; // bytes an epoch reads, where known
        if (!folder.empty()) {
            auto files = cv::file::walk(folder, {.labels = true});
            class_names = files.classes;
            expected = files.size();
            for (const auto& e : files.entries) data_bytes += static_cast<std::uint64_t>(std::max<std::int64_t>(0, e.size));
            std::printf("folder: %zu files in %zu classes\n", files.size(), files.classes.size());
            pipe = cv::file::files(std::move(files)).on(rt) | cv::shuffle({.buffer = 1000, .seed = seed}) |
                   ci::decode_batches(decode, batching);
        } else {
            auto list = cv::shard::resolve(shard_specs);
            for (const auto& r : list) {
                data_bytes += static_cast<std::uint64_t>(std::max<std::int64_t>(0, r.size));
                expected += static_cast<std::size_t>(std::max<std::int64_t>(0, r.samples));
            }
            std::printf("shards: %zu to read, %.1f MB\n", list.size(), data_bytes / 1e6);
            pipe = cv::shard::shards(list, {.order = {.seed = seed}}).on(rt) | cv::shuffle({.buffer = 1000, .seed = seed}) |
                   ci::decode_batches(decode, batching);
        }
#if CONVEYOR_WITH_CUDA
        if (gpus.devices > 0)
            std::printf("GPU: %d device(s); batches are copied to device 0 as they come\n", gpus.devices);
        else
            std::printf("GPU: none usable (%s); batches stay in host memory\n", gpus.reason.c_str());
#else
        std::printf("GPU: this build has no CUDA; batches stay in host memory\n");
#endif

        // The training loop: each `for` is one epoch (and a new order).
        for (std::size_t epoch = 0; epoch < epochs; ++epoch) {
            examples::progress_line bar("epoch " + std::to_string(epoch), expected);
            const auto t0 = std::chrono::steady_clock::now();
            double first_batch_s = -1;
            std::uint64_t images = 0, batches = 0;
            cv::stats_snapshot last;
            // Each batch: what a training step would get. On a GPU, the copy runs while the
            // next batches are decoded; `b.ready()` is the event the step's stream waits for.
            const auto step = [&](const ci::image_batch& b) {
                if (batches++ == 0) {
                    first_batch_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                    if (epoch == 0) write_contact_sheet("first_batch.jpg", b, class_names);
                }
                images += b.size();
                bar.update(images);
            };
#if CONVEYOR_WITH_CUDA
            if (gpus.devices > 0) {
                auto run = (*pipe | cv::cuda::to_cuda({.device = 0})).run(epoch);
                for (auto& b : run) {
                    b.synchronize();
                    step(b.host());
                }
                last = run.snapshot();
            } else
#endif
            {
                auto run = pipe->run(epoch);
                for (auto& b : run) step(b);
                last = run.snapshot();
            }
            bar.finish();
            const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::printf("epoch %zu: %llu images in %llu batches of up to %zu, %.2f s: %.0f images/s, %.0f MB/s read; "
                        "first batch after %.3f s\n",
                        epoch, static_cast<unsigned long long>(images), static_cast<unsigned long long>(batches), batch_size,
                        secs, images / secs, data_bytes / 1e6 / secs, first_batch_s);
            std::printf("  busy share per stage: %s\n", cv::format_shares(last).c_str());
        }
        std::printf("quickstart: done. first_batch.jpg shows the first batch, each image with its label.\n");
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "quickstart: %s\n", e.what());
        return 1;
    }
}
