// quickstart: conveyor end to end on a dataset it makes itself.
//
// Generates a small ImageNet-like file set (unless it is already there), then runs
//
//     files (io_uring, 64 in flight) → map (checksum, on the compute pool) → shuffle → batch
//
// for two epochs, with a progress line, and prints a summary. Later modules extend this
// to shards → JPEG decode → batch → GPU.
#include <conveyor/bench/progress.hpp>
#include <conveyor/bench/synthetic.hpp>
#include <conveyor/conveyor.hpp>

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

namespace cv = conveyor;

namespace {

// What the training loop would receive: here a label and a checksum instead of a tensor.
struct sample {
    std::string key;
    std::int64_t label;
    std::uint64_t bytes;
    std::uint64_t checksum;
};

// Stands in for CPU work such as decoding: touches every byte (FNV-1a over 8-byte words).
std::uint64_t checksum(const cv::buffer& b)
{
    std::uint64_t h = 0xcbf29ce484222325ULL;
    const std::byte* p = b.data();
    std::size_t n = b.size(), i = 0;
    for (; i + 8 <= n; i += 8) {
        std::uint64_t w;
        std::memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001b3ULL;
    }
    for (; i < n; ++i) h = (h ^ static_cast<std::uint64_t>(p[i])) * 0x100000001b3ULL;
    return h;
}

} // namespace

int main(int argc, char** argv)
{
    CLI::App app{"conveyor quickstart: read a generated ImageNet-like file set through a pipeline"};
    cv::bench::synthetic_files set{.dir = "/tmp/conveyor-quickstart", .count = 4000};
    std::size_t concurrency = 64, batch_size = 256, epochs = 2;
    app.add_option("--dir", set.dir, "where the dataset is (made there if absent)")->capture_default_str();
    app.add_option("--count", set.count, "files in the generated dataset")->capture_default_str();
    app.add_option("--concurrency", concurrency, "file reads in flight")->capture_default_str();
    app.add_option("--batch", batch_size, "samples per batch")->capture_default_str();
    app.add_option("--epochs", epochs, "passes over the dataset")->capture_default_str();
    CLI11_PARSE(app, argc, argv);

    try {
        // 1. The dataset: an ImageFolder tree of class directories.
        {
            cv::bench::progress bar("generating " + set.dir.string(), set.count);
            const auto rep = cv::bench::generate(set, [&](std::uint64_t done, std::uint64_t bytes) { bar.update(done, bytes); });
            bar.finish();
            std::printf("dataset: %llu files, %.2f GB in %s (%llu written now)\n",
                        static_cast<unsigned long long>(rep.files), rep.bytes / 1e9, set.dir.c_str(),
                        static_cast<unsigned long long>(rep.written));
        }
        const auto files = cv::file::walk(set.dir, {.extensions = {".JPEG"}, .labels = true});
        std::printf("listing: %zu files in %zu classes\n", files.size(), files.classes.size());

        // 2. The pipeline: a lazy description; nothing runs until it is iterated.
        cv::runtime rt;
        auto pipe = cv::file::files(files, {.concurrency = concurrency}).on(rt)
                  | cv::map([](cv::blob b) { return sample{b.key, b.label, b.data.size(), checksum(b.data)}; },
                            {.concurrency = 2, .where = cv::run_on::compute, .name = "checksum"})
                  | cv::shuffle({.buffer = 1000, .seed = 7})
                  | cv::batch(batch_size);

        // 3. The training loop: each `for` is one epoch (and a new shuffle order).
        for (std::size_t epoch = 0; epoch < epochs; ++epoch) {
            cv::bench::progress bar("epoch " + std::to_string(epoch), files.size());
            const auto t0 = std::chrono::steady_clock::now();
            std::uint64_t n = 0, bytes = 0, batches = 0, digest = 0;
            std::string first_key;
            for (auto& b : pipe) {
                ++batches;
                if (first_key.empty()) first_key = b.front().key;
                for (const auto& s : b) {
                    ++n;
                    bytes += s.bytes;
                    digest += s.checksum * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(s.label); // order-free
                }
                bar.update(n, bytes);
            }
            bar.finish();
            const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::printf("epoch %zu: %llu samples in %llu batches, %.2f GB, %.2f s: %.0f samples/s, %.0f MB/s; "
                        "first sample %s; digest %016llx\n",
                        epoch, static_cast<unsigned long long>(n), static_cast<unsigned long long>(batches), bytes / 1e9,
                        secs, n / secs, bytes / 1e6 / secs, first_key.c_str(), static_cast<unsigned long long>(digest));
            if (n != files.size()) {
                std::fprintf(stderr, "quickstart: expected %zu samples, got %llu\n", files.size(),
                             static_cast<unsigned long long>(n));
                return 1;
            }
        }
        std::printf("quickstart: done. Same digest every epoch = every sample read once per epoch, in a new order.\n");
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "quickstart: %s\n", e.what());
        return 1;
    }
}
