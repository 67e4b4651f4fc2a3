// conveyor/cuda/nvjpeg.hpp — nvJPEG, loaded at run time: is it here, which one, and its functions.
#ifndef CONVEYOR_CUDA_NVJPEG_HPP
#define CONVEYOR_CUDA_NVJPEG_HPP

#include <conveyor/cuda/detail/nvjpeg_api.hpp>
#include <conveyor/detail/config.hpp>

#include <string>

namespace conveyor::cuda {

/** What the process found when it looked for nvJPEG (once: the first call loads it and
    keeps it loaded). conveyor is built without nvJPEG's headers or library: the GPU decoder
    opens `libnvjpeg.so.13` (then `.so.12`, then `libnvjpeg.so`) with `dlopen`, through the
    usual search path and then `$CUDA_PATH/lib64` and `/usr/local/cuda/lib64`; the variable
    `CONVEYOR_NVJPEG` names a file to open instead.

    @par Thread Safety
    Safe: the library is looked for once, under a lock of the C++ runtime's. */
struct nvjpeg_library {
    /// The resolved functions; null when nvJPEG cannot be used here.
    const nvjpeg_api::functions* api = nullptr;
    /// The file that was opened ("/usr/local/cuda/lib64/libnvjpeg.so.13").
    std::string path;
    /// Its version, major.minor.patch ("13.0.1").
    std::string version;
    /// Why nvJPEG cannot be used, when `api` is null (what was tried, and dlopen's word).
    std::string reason;

    explicit operator bool() const noexcept { return api != nullptr; }
};

/// nvJPEG as this process found it (see `nvjpeg_library`). Never throws.
CONVEYOR_DECL const nvjpeg_library& nvjpeg() noexcept;

namespace detail {

/// Opens nvJPEG from the files `candidates` (tried in order) and resolves every function;
/// the result owns the handle for the life of the process. For tests and `nvjpeg()`.
CONVEYOR_DECL nvjpeg_library load_nvjpeg(const std::string* candidates, std::size_t n);

} // namespace detail

} // namespace conveyor::cuda

#if CONVEYOR_HEADER_ONLY
#include <conveyor/cuda/impl/nvjpeg.ipp>
#endif

#endif
