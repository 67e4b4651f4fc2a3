// conveyor-python-reference: the C++ pipeline that tests/python/test_pipeline.py builds with
// the Python builder, run from C++ for the test to compare the two byte for byte:
//
//   shard::shards(SPEC..., {.order = {.seed = SEED}}) | shuffle(BUFFER, SEED)
//     | image::decode_batches(random_resized crop to SIZE x SIZE, flip 0.5, seed SEED; BATCH a batch)
//
// run for epoch EPOCH as rank 0 of 1, which is what
//
//   conveyor.shards(SPEC, seed=SEED, rank=0, world_size=1).shuffle(BUFFER)
//       .decode(SIZE, crop="random_resized", flip=True).batch(BATCH)
//
// describes. Writes OUT.bin (every batch's uint8 nhwc pixels, one after the other) and
// OUT.txt (per batch a line "batch N", then a line "KEY LABEL" per image).
//
//   conveyor-python-reference OUT SEED BUFFER SIZE BATCH EPOCH SPEC...
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/stages.hpp>
#include <conveyor/image/batch.hpp>
#include <conveyor/shard/list.hpp>
#include <conveyor/core/order.hpp>
#include <conveyor/shard/source.hpp>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace cv = conveyor;

int main(int argc, char** argv)
{
    if (argc < 8) {
        std::fprintf(stderr, "usage: %s OUT SEED BUFFER SIZE BATCH EPOCH SPEC...\n", argv[0]);
        return 2;
    }
    try {
        const std::string out = argv[1];
        const std::uint64_t seed = std::stoull(argv[2]);
        const std::size_t buffer = std::stoull(argv[3]);
        const auto size = static_cast<std::uint32_t>(std::stoul(argv[4]));
        const std::size_t batch = std::stoull(argv[5]);
        const std::uint64_t epoch = std::stoull(argv[6]);
        const std::vector<std::string> specs(argv + 7, argv + argc);

        cv::runtime rt({.io_threads = 1, .compute_threads = 2});
        cv::shard::source_options so{.order = {.seed = seed}, .share = cv::split{}};
        so.resume = std::make_shared<cv::progress>(); // as the Python module runs it
        auto samples = cv::shard::shards(cv::shard::resolve(specs), so).on(rt) | cv::shuffle({.buffer = buffer, .seed = seed});
        cv::image::decode_image_options d;
        d.decode.size = {size, size};
        d.decode.crop = cv::image::crop_mode::random_resized;
        d.decode.flip = 0.5;
        d.decode.seed = seed;
        auto pipe = std::move(samples) | cv::image::decode_batches(d, {.size = batch});

        std::ofstream pixels(out + ".bin", std::ios::binary);
        std::ofstream meta(out + ".txt");
        std::size_t n = 0;
        for (auto& b : pipe.run(epoch)) {
            meta << "batch " << b.size() << '\n';
            pixels.write(reinterpret_cast<const char*>(b.images.data), static_cast<std::streamsize>(b.images.bytes()));
            const auto* labels = static_cast<const std::int64_t*>(b.labels.data);
            for (std::size_t i = 0; i < b.size(); ++i) meta << b.keys[i] << ' ' << labels[i] << '\n';
            n += b.size();
        }
        if (!pixels || !meta) {
            std::fprintf(stderr, "cannot write %s.bin or %s.txt\n", out.c_str(), out.c_str());
            return 1;
        }
        std::printf("%zu images\n", n);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
}
