// conveyor/image/split.hpp — sharing a batch's images between two decoders (GPU and CPU)
// from their measured rates, so that both finish together.
#ifndef CONVEYOR_IMAGE_SPLIT_HPP
#define CONVEYOR_IMAGE_SPLIT_HPP

#include <conveyor/detail/config.hpp>

#include <cstddef>
#include <cstdint>

namespace conveyor::image {

/// What a `decode_split` has measured so far.
struct split_stats {
    double gpu_rate = 0;            ///< images/s the GPU decoder delivers (smoothed), 0 before a measurement
    double cpu_rate = 0;            ///< images/s the CPU decoders deliver together (smoothed)
    double input_rate = 0;          ///< images/s the input can deliver (smoothed), 0 before a measurement
    double cpu_share = 0;           ///< share of the last batch given to the CPU
    std::uint64_t gpu_images = 0;   ///< images decoded on the GPU so far
    std::uint64_t cpu_images = 0;   ///< images decoded on the CPU so far
    std::uint64_t batches = 0;      ///< batches recorded
};

/** Decides how many images of each batch go to the CPU decoders and how many to the GPU,
    from the rates measured on the batches before: `n * cpu_rate / (cpu_rate + gpu_rate)`
    to the CPU, so that the two sides, working at once, finish together. There is no ratio
    to tune: the rates are measured as the run goes and follow changes (a slower disk
    taking CPU time, large images, a busy GPU).

    The CPU takes no more than the GPU cannot do in the time the input takes to deliver a
    batch anyway: `n * (1 - gpu_rate / input_rate)`. Where the GPU alone keeps up with the
    input, a CPU decode would gain nothing and take cycles from the threads that read and
    shuffle, so the CPU keeps only its one measuring image. The input's rate is the images
    it delivered over the time spent waiting for them (`record_input`); where it is not
    measured, the input does not bound the split.

    The GPU's rate is its images over the wall time from starting them to their completion.
    The CPU's is its pool's: `threads` threads, each taking the measured thread time per
    image, so one image already gives an estimate. Each side keeps at least one image of
    every batch (when it is allowed any), so its rate stays measured. Rates are smoothed
    (exponentially, weight `smoothing` for the newest batch).

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe (the stage that owns one calls it from
    one coroutine).
*/
class decode_split {
public:
    /// `threads`: the CPU decoders (compute threads); `first_cpu`: images the CPU takes
    /// from the first batch, before anything is measured (default: one per thread).
    CONVEYOR_DECL explicit decode_split(std::size_t threads, double smoothing = 0.3, std::size_t first_cpu = SIZE_MAX);

    /// Of `n` images that both sides could decode, how many go to the CPU.
    CONVEYOR_DECL std::size_t cpu_count(std::size_t n) const noexcept;

    /** A batch is done. The GPU decoded `gpu_images` in `gpu_seconds` (wall time); the CPU
        decoded `cpu_images` taking `cpu_thread_seconds` of thread time in all. A side that
        had no images leaves its rate as it was. */
    CONVEYOR_DECL void record(std::size_t gpu_images, double gpu_seconds, std::size_t cpu_images, double cpu_thread_seconds) noexcept;

    /// The input delivered `images` in `seconds` of waiting for them.
    CONVEYOR_DECL void record_input(std::uint64_t images, double seconds) noexcept;

    CONVEYOR_DECL split_stats stats() const noexcept;

private:
    std::size_t threads_;
    double smoothing_;
    std::size_t first_cpu_;
    double gpu_rate_ = 0, cpu_rate_ = 0, input_rate_ = 0, last_share_ = 0;
    std::uint64_t gpu_images_ = 0, cpu_images_ = 0, batches_ = 0;
};

} // namespace conveyor::image

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/impl/split.ipp>
#endif

#endif
