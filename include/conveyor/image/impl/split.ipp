// conveyor/image/impl/split.ipp — definitions for conveyor/image/split.hpp.
#ifndef CONVEYOR_IMAGE_IMPL_SPLIT_IPP
#define CONVEYOR_IMAGE_IMPL_SPLIT_IPP

#include <conveyor/image/split.hpp>

#include <algorithm>
#include <cmath>

namespace conveyor::image {

CONVEYOR_DECL decode_split::decode_split(std::size_t threads, double smoothing, std::size_t first_cpu)
    : threads_(threads), smoothing_(std::clamp(smoothing, 0.01, 1.0)), first_cpu_(first_cpu == SIZE_MAX ? threads : first_cpu)
{
}

CONVEYOR_DECL std::size_t decode_split::cpu_count(std::size_t n) const noexcept
{
    if (n == 0 || threads_ == 0) return 0;
    if (gpu_rate_ <= 0 || cpu_rate_ <= 0) return std::min(n - 1, first_cpu_); // nothing measured yet
    double share = cpu_rate_ / (cpu_rate_ + gpu_rate_);
    if (input_rate_ > 0) share = std::min(share, std::max(0.0, 1.0 - gpu_rate_ / input_rate_)); // what the GPU cannot keep up with
    const auto c = static_cast<std::size_t>(std::llround(share * static_cast<double>(n)));
    return n == 1 ? c : std::clamp<std::size_t>(c, 1, n - 1); // both sides keep being measured
}

CONVEYOR_DECL void decode_split::record(std::size_t gpu_images, double gpu_seconds, std::size_t cpu_images,
                                        double cpu_thread_seconds) noexcept
{
    auto blend = [this](double& rate, double now) { rate = rate > 0 ? rate + smoothing_ * (now - rate) : now; };
    if (gpu_images > 0 && gpu_seconds > 0) blend(gpu_rate_, static_cast<double>(gpu_images) / gpu_seconds);
    if (cpu_images > 0 && cpu_thread_seconds > 0)
        blend(cpu_rate_, static_cast<double>(threads_) * static_cast<double>(cpu_images) / cpu_thread_seconds);
    const std::size_t n = gpu_images + cpu_images;
    last_share_ = n ? static_cast<double>(cpu_images) / static_cast<double>(n) : 0.0;
    gpu_images_ += gpu_images;
    cpu_images_ += cpu_images;
    ++batches_;
}

CONVEYOR_DECL void decode_split::record_input(std::uint64_t images, double seconds) noexcept
{
    if (images == 0 || !(seconds > 0)) return;
    const double now = static_cast<double>(images) / seconds;
    input_rate_ = input_rate_ > 0 ? input_rate_ + smoothing_ * (now - input_rate_) : now;
}

CONVEYOR_DECL split_stats decode_split::stats() const noexcept
{
    return {gpu_rate_, cpu_rate_, input_rate_, last_share_, gpu_images_, cpu_images_, batches_};
}

} // namespace conveyor::image

#endif
