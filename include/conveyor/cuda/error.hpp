// conveyor/cuda/error.hpp — errors of the CUDA staging module.
#ifndef CONVEYOR_CUDA_ERROR_HPP
#define CONVEYOR_CUDA_ERROR_HPP

#include <conveyor/core/error.hpp>
#include <conveyor/detail/config.hpp>

#include <string>
#include <system_error>

namespace conveyor::cuda {

/// What went wrong in the CUDA module.
enum class errc {
    /// No CUDA device can be used here: no GPU, no driver, or a driver older than the
    /// runtime conveyor was built with. The message says which.
    no_device = 1,
    /// A CUDA runtime call failed; the message names the call and CUDA's own error.
    cuda_failed,
    /// Device or pinned host memory could not be had.
    out_of_memory,
    /// Options that cannot work (a device that does not exist, a ring of zero buffers).
    bad_options,
};

/// The category of `conveyor::cuda::errc`.
CONVEYOR_DECL const std::error_category& cuda_category() noexcept;

/// Makes a `std::error_code` from a CUDA module error value.
CONVEYOR_DECL std::error_code make_error_code(errc e) noexcept;

namespace detail {

/** Throws `conveyor::error` for a failed CUDA runtime call: `what` names the call (and its
    arguments where they help), `status` is its `cudaError_t`. Out-of-memory statuses map
    to `errc::out_of_memory`, missing devices and drivers to `errc::no_device`. */
[[noreturn]] CONVEYOR_DECL void throw_cuda(int status, std::string what);

/// `throw_cuda(status, what)` unless `status` is cudaSuccess (0).
inline void check(int status, const char* what)
{
    if (status != 0) throw_cuda(status, what);
}

} // namespace detail

} // namespace conveyor::cuda

template <>
struct std::is_error_code_enum<conveyor::cuda::errc> : std::true_type {};

#if CONVEYOR_HEADER_ONLY
#include <conveyor/cuda/impl/error.ipp>
#endif

#endif
