// conveyor/cuda/impl/device.ipp — device discovery and pinned host memory.
#ifndef CONVEYOR_CUDA_IMPL_DEVICE_IPP
#define CONVEYOR_CUDA_IMPL_DEVICE_IPP

#include <conveyor/cuda/device.hpp>

#include <cuda_runtime_api.h>

#include <string>

namespace conveyor::cuda {

CONVEYOR_DECL availability devices() noexcept
{
    int n = 0;
    const cudaError_t s = cudaGetDeviceCount(&n);
    if (s != cudaSuccess) {
        (void)cudaGetLastError(); // not sticky, but leave nothing behind
        return {0, std::string(cudaGetErrorString(s)) + " (" + cudaGetErrorName(s) + ")"};
    }
    if (n == 0) return {0, "the CUDA runtime reports no devices"};
    return {n, {}};
}

CONVEYOR_DECL void* allocate_pinned(std::size_t bytes)
{
    void* p = nullptr;
    detail::check(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable),
                  ("cudaHostAlloc of " + std::to_string(bytes) + " bytes").c_str());
    return p;
}

CONVEYOR_DECL void free_pinned(void* p) noexcept
{
    if (p) (void)cudaFreeHost(p);
}

CONVEYOR_DECL bool is_pinned(const void* p) noexcept
{
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeHost;
}

CONVEYOR_DECL pinned_memory::pinned_memory(std::size_t bytes) : data_(allocate_pinned(bytes)), size_(bytes) {}

CONVEYOR_DECL void pinned_memory::reset() noexcept
{
    free_pinned(data_);
    data_ = nullptr;
    size_ = 0;
}

} // namespace conveyor::cuda

#endif
