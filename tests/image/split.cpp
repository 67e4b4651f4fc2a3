// decode_split: the share of each batch given to the CPU decoders converges, with fake
// decoders of set speeds, to the one that makes GPU and CPU finish together.
#include <conveyor/image/split.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace ci = conveyor::image;

namespace {

/// A fake pair of decoders: the GPU takes `gpu_overhead` + n / `gpu_rate` seconds for a batch
/// part of n images; each CPU thread `cpu_image` seconds per image, `threads` of them at once.
/// `noise` (0..1) scales each batch's times by a deterministic factor in [1 - noise, 1 + noise].
struct fake_decoders {
    double gpu_rate = 4000, gpu_overhead = 0.002, cpu_image = 1.0 / 150;
    std::size_t threads = 8;
    double noise = 0;
    std::uint64_t state = 7;

    double jitter()
    {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        return 1.0 + noise * (static_cast<double>(state >> 11) / 9007199254740992.0 * 2 - 1);
    }
    double gpu_seconds(std::size_t n) { return n ? (gpu_overhead + n / gpu_rate) * jitter() : 0.0; }
    /// Wall time of n images on the pool: whole rounds of `threads` images.
    double cpu_wall(std::size_t n) const { return std::ceil(double(n) / threads) * cpu_image; }
};

/// Runs `batches` batches of `n`; returns the last batch's wall times {gpu, cpu}.
std::pair<double, double> run(ci::decode_split& s, fake_decoders& f, std::size_t n, int batches)
{
    double g = 0, c = 0;
    for (int i = 0; i < batches; ++i) {
        const std::size_t cpu = s.cpu_count(n), gpu = n - cpu;
        g = f.gpu_seconds(gpu);
        c = f.cpu_wall(cpu);
        s.record(gpu, g, cpu, cpu * f.cpu_image * f.jitter());
    }
    return {g, c};
}

} // namespace

TEST_CASE("decode_split: converges to the split where both sides finish together")
{
    fake_decoders f;
    ci::decode_split s(f.threads);
    CHECK(s.cpu_count(256) == 8); // before measuring: one image per CPU thread
    const auto [g, c] = run(s, f, 256, 30);
    // Ideal: n_c / (8 * 150) = 0.002 + (256 - n_c) / 4000  =>  n_c ≈ 60.9.
    const std::size_t cpu = s.cpu_count(256);
    CHECK(cpu >= 55);
    CHECK(cpu <= 67);
    CHECK(std::abs(g - c) / std::max(g, c) < 0.10);
    const auto st = s.stats();
    CHECK(st.batches == 30);
    CHECK(st.cpu_rate == doctest::Approx(1200).epsilon(0.01));
    CHECK(st.gpu_images + st.cpu_images == 30u * 256u);
}

TEST_CASE("decode_split: follows a change of speed, and holds under noisy timings")
{
    fake_decoders f;
    f.noise = 0.1;
    ci::decode_split s(f.threads);
    run(s, f, 256, 30);
    const std::size_t before = s.cpu_count(256);
    f.gpu_rate = 1000; // the GPU slows down (another job on it): the CPU must take more
    const auto [g, c] = run(s, f, 256, 40);
    const std::size_t after = s.cpu_count(256);
    CHECK(after > before + 40);
    // Ideal now: n_c / 1200 = 0.002 + (256 - n_c) / 1000  =>  n_c ≈ 140.7
    CHECK(after >= 127);
    CHECK(after <= 155);
    CHECK(std::abs(g - c) / std::max(g, c) < 0.2); // one noisy batch: within the noise
}

TEST_CASE("decode_split: a much faster GPU leaves the CPU one image to keep measuring; no CPU, none")
{
    fake_decoders f;
    f.gpu_rate = 1e6;
    f.gpu_overhead = 0;
    f.cpu_image = 0.1;
    ci::decode_split s(f.threads);
    run(s, f, 256, 10);
    CHECK(s.cpu_count(256) == 1);
    ci::decode_split none(0);
    CHECK(none.cpu_count(256) == 0);
    CHECK(none.cpu_count(0) == 0);
    ci::decode_split one(4);
    CHECK(one.cpu_count(1) == 0); // a batch of one image before measuring: the GPU takes it
}

TEST_CASE("decode_split: the CPU takes only what the GPU cannot keep up with while the input delivers")
{
    // GPU 4000 images/s, 8 CPU threads at 150 each: balanced, the CPU would take ~61 of 256.
    fake_decoders f;
    f.gpu_overhead = 0;
    ci::decode_split s(f.threads);
    run(s, f, 256, 20);
    const std::size_t balanced = s.cpu_count(256);
    CHECK(balanced >= 55);
    // An input slower than the GPU alone: decoding more on the CPU gains nothing.
    s.record_input(256, 256.0 / 3000);
    CHECK(s.stats().input_rate == doctest::Approx(3000));
    CHECK(s.cpu_count(256) == 1);
    // An input a quarter faster than the GPU: the CPU takes the fifth the GPU cannot do.
    ci::decode_split t(f.threads);
    run(t, f, 256, 20);
    for (int i = 0; i < 30; ++i) t.record_input(256, 256.0 / 5000);
    const std::size_t capped = t.cpu_count(256); // 256 * (1 - 4000 / 5000) = 51.2
    CHECK(capped >= 48);
    CHECK(capped <= 54);
    // An input much faster than both: the balanced split again.
    ci::decode_split u(f.threads);
    run(u, f, 256, 20);
    u.record_input(256, 256.0 / 1e6);
    CHECK(u.cpu_count(256) == balanced);
    u.record_input(0, 1.0); // nothing delivered: no measurement
    u.record_input(10, 0.0);
    CHECK(u.stats().input_rate == doctest::Approx(1e6));
}
