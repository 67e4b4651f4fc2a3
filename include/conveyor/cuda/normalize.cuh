// conveyor/cuda/normalize.cuh — uint8 NHWC batches to normalized float NCHW, on the GPU.
// For programs compiled with nvcc: include this in a .cu file. (The C++-only path
// normalizes on the CPU while it collates: image::collate_options.)
#ifndef CONVEYOR_CUDA_NORMALIZE_CUH
#define CONVEYOR_CUDA_NORMALIZE_CUH

#include <conveyor/image/dtype.hpp>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace conveyor::cuda {

/// Per-channel mean and standard deviation, of values scaled to [0, 1] (torchvision's
/// Normalize after ToTensor). Up to 4 channels.
struct normalization {
    float mean[4] = {0.485f, 0.456f, 0.406f, 0.0f}; ///< ImageNet's
    float std[4] = {0.229f, 0.224f, 0.225f, 1.0f};
};

namespace detail {

template <class Out>
__device__ inline Out from_float(float v);
template <>
__device__ inline float from_float<float>(float v)
{
    return v;
}
template <>
__device__ inline __half from_float<__half>(float v)
{
    return __float2half_rn(v);
}

/// One thread per output element: out[n][c][y][x] = (in[n][y][x][c] / 255 - mean[c]) / std[c].
template <class Out>
__global__ void normalize_nhwc_to_nchw(const std::uint8_t* __restrict__ in, Out* __restrict__ out, std::int64_t n,
                                       std::int64_t h, std::int64_t w, std::int64_t c, normalization norm)
{
    const std::int64_t total = n * c * h * w;
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<std::int64_t>(blockDim.x) * gridDim.x) {
        const std::int64_t x = i % w, y = (i / w) % h, ch = (i / (w * h)) % c, b = i / (w * h * c);
        const float v = in[((b * h + y) * w + x) * c + ch] * (1.0f / 255.0f);
        out[i] = from_float<Out>((v - norm.mean[ch]) / norm.std[ch]);
    }
}

} // namespace detail

/// The device type the kernel writes for an element of `T`: float32 as `float`, float16 as
/// `__half` (the bits `image::host_element_t<dtype::float16>` holds on the host).
template <image::dtype T>
struct device_element;
template <>
struct device_element<image::dtype::float32> {
    using type = float;
};
template <>
struct device_element<image::dtype::float16> {
    using type = __half;
};
template <image::dtype T>
using device_element_t = typename device_element<T>::type;
static_assert(sizeof(device_element_t<image::dtype::float32>) == image::size_of(image::dtype::float32));
static_assert(sizeof(device_element_t<image::dtype::float16>) == image::size_of(image::dtype::float16));

/** Enqueues on `stream` the conversion of a uint8 NHWC batch (`n` images of `h` x `w` x
    `c` channels, contiguous, on the device) into normalized NCHW `float` or `__half` at
    `out` (n*c*h*w elements, on the device). Returns the launch's error, if any. */
template <class Out>
cudaError_t normalize_async(const std::uint8_t* in, Out* out, std::int64_t n, std::int64_t h, std::int64_t w,
                            std::int64_t c, const normalization& norm, cudaStream_t stream)
{
    if (c < 1 || c > 4) return cudaErrorInvalidValue;
    const std::int64_t total = n * c * h * w;
    if (total <= 0) return cudaSuccess;
    const int threads = 256;
    const auto blocks = static_cast<unsigned>((total + threads - 1) / threads < 65535 ? (total + threads - 1) / threads : 65535);
    detail::normalize_nhwc_to_nchw<Out><<<blocks, threads, 0, stream>>>(in, out, n, h, w, c, norm);
    return cudaGetLastError();
}

} // namespace conveyor::cuda

#endif
