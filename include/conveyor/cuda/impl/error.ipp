// conveyor/cuda/impl/error.ipp — the CUDA module's error category.
#ifndef CONVEYOR_CUDA_IMPL_ERROR_IPP
#define CONVEYOR_CUDA_IMPL_ERROR_IPP

#include <conveyor/cuda/error.hpp>

#include <cuda_runtime_api.h>

#include <utility>

namespace conveyor::cuda {

namespace detail {
class cuda_category_impl final : public std::error_category {
public:
    const char* name() const noexcept override { return "conveyor.cuda"; }
    std::string message(int ev) const override
    {
        switch (static_cast<errc>(ev)) {
        case errc::no_device: return "no usable CUDA device";
        case errc::cuda_failed: return "a CUDA runtime call failed";
        case errc::out_of_memory: return "out of device or pinned host memory";
        case errc::bad_options: return "invalid CUDA staging options";
        }
        return "unknown conveyor.cuda error";
    }
};
} // namespace detail

CONVEYOR_DECL const std::error_category& cuda_category() noexcept
{
    static const detail::cuda_category_impl cat;
    return cat;
}

CONVEYOR_DECL std::error_code make_error_code(errc e) noexcept
{
    return {static_cast<int>(e), cuda_category()};
}

namespace detail {

CONVEYOR_DECL void throw_cuda(int status, std::string what)
{
    const auto s = static_cast<cudaError_t>(status);
    errc code = errc::cuda_failed;
    if (s == cudaErrorMemoryAllocation) code = errc::out_of_memory;
    if (s == cudaErrorNoDevice || s == cudaErrorInsufficientDriver || s == cudaErrorInvalidDevice) code = errc::no_device;
    throw conveyor::error(make_error_code(code), {.stage = "cuda",
                                                  .detail = std::move(what) + " failed: " + cudaGetErrorName(s) + " (" +
                                                            cudaGetErrorString(s) + ")"});
}

} // namespace detail

} // namespace conveyor::cuda

#endif
