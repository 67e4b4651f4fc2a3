// conveyor/cuda/detail/kernels.hpp — the GPU decoder's kernels, as plain C++ declarations:
// decoded images (planar, on the device) resampled into their slots of a batch tensor. The
// definitions are CUDA (src/cuda_kernels.cu, the target conveyor_cuda_kernels); a build
// that has them defines CONVEYOR_WITH_GPU_KERNELS=1.
#ifndef CONVEYOR_CUDA_DETAIL_KERNELS_HPP
#define CONVEYOR_CUDA_DETAIL_KERNELS_HPP

#include <cstdint>

// The CUDA runtime's stream type (cudaStream_t is a pointer to it), so that this header does
// not need cuda_runtime_api.h.
struct CUstream_st;

namespace conveyor::cuda::detail {

/** One decoded image on the device (planar, 8-bit) and the region of it that goes to one
    batch slot. The region follows `image::detail::resample`'s rule: clamped to the image,
    filtered over its whole-pixel bounding box, copied as it is when that box is exactly the
    output's size. */
struct resample_job {
    const std::uint8_t* planes[3] = {};  ///< device memory: the target's channels planes (1: gray; 3: R, G, B)
    std::uint32_t pitch = 0;             ///< bytes from one row of a plane to the next
    std::uint32_t width = 0, height = 0; ///< pixels in each plane
    /// The region resampled, in source pixels (fractional allowed).
    double left = 0, top = 0, region_width = 0, region_height = 0;
    std::uint32_t flip = 0; ///< 1: mirror left to right after resampling
    std::uint32_t slot = 0; ///< index of the output image in the batch
};

/// The element type of a batch tensor.
enum class element_kind : std::uint8_t { uint8, float32, float16 };

/** The batch tensor the jobs write: slot i is the contiguous item at `images + i *
    item_bytes`, item_bytes = height * width * channels * the element's size. */
struct batch_target {
    void* images = nullptr;              ///< device memory: the batch tensor
    std::uint32_t width = 0, height = 0; ///< output image size
    std::uint32_t channels = 3;          ///< 1 or 3; equals the jobs' planes
    bool planar = false;                 ///< NCHW (true) or NHWC
    element_kind type = element_kind::uint8;
    bool swap_rb = false; ///< write channel order B, G, R (from R, G, B planes)
    /** Device memory, float types only: [3][256] float32, or [3][256] uint16 (half bits): the
        value of each byte for each OUTPUT channel (indexed by the output channel's position,
        as `image::detail::convert_image` indexes its HWC image; a gray image uses row 0). */
    const void* table = nullptr;
};

/** Enqueues on `stream` the resampling of `jobs[0..n)` (an array in DEVICE memory, read by
    the kernel) into `out`: each job's region is resampled to `out`'s size by
    `image::detail::resample`'s filter and fixed-point arithmetic (the same bytes), mirrored
    if it asks, and written to its slot converted as `out` says. Jobs whose image is empty
    are skipped (their slots are left as they were). Never synchronizes, allocates nothing.

    @return the `cudaError_t` of the launch as an int (0: launched); `cudaErrorInvalidValue`
    (1) for a target it cannot write (no memory, channels not 1 or 3, a float type without a
    table). Errors of the kernel itself show on the stream, as CUDA reports them.

    @par Thread Safety
    Safe: no state of its own. */
int launch_resample(const resample_job* jobs, std::uint32_t n, const batch_target& out, CUstream_st* stream) noexcept;

} // namespace conveyor::cuda::detail

#endif
