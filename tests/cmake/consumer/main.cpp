// Builds a small pipeline through the umbrella header and checks what comes out.
#include <conveyor/conveyor.hpp>

#include <cstdint>
#include <cstdio>

std::size_t consumer_second_lanes(conveyor::runtime& rt); // second.cpp

int main()
{
    namespace cv = conveyor;
    cv::runtime rt({.io_threads = 1, .compute_threads = 2});
    if (consumer_second_lanes(rt) != 1) {
        std::fprintf(stderr, "consumer: the second translation unit sees %zu lanes, want 1\n", consumer_second_lanes(rt));
        return 1;
    }
    auto pipe = cv::generate(100, [](std::uint64_t i) { return i; }).on(rt)
              | cv::map([](std::uint64_t x) { return 2 * x; })
              | cv::batch(10);

    std::uint64_t sum = 0, batches = 0, items = 0;
    for (auto& b : pipe) {
        ++batches;
        items += b.size();
        for (auto x : b) sum += x;
    }
    const std::uint64_t want = 2 * (99 * 100 / 2); // 2 * (0 + 1 + ... + 99)
    if (sum != want || batches != 10 || items != 100) {
        std::fprintf(stderr, "consumer: got sum %llu in %llu batches of %llu items; want %llu in 10 of 100\n",
                     static_cast<unsigned long long>(sum), static_cast<unsigned long long>(batches),
                     static_cast<unsigned long long>(items), static_cast<unsigned long long>(want));
        return 1;
    }
    std::printf("consumer: ok, sum %llu over %llu batches\n", static_cast<unsigned long long>(sum),
                static_cast<unsigned long long>(batches));
    return 0;
}
