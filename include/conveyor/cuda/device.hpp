// conveyor/cuda/device.hpp — is there a GPU here, and page-locked host memory for copies to it.
#ifndef CONVEYOR_CUDA_DEVICE_HPP
#define CONVEYOR_CUDA_DEVICE_HPP

#include <conveyor/cuda/error.hpp>
#include <conveyor/detail/config.hpp>

#include <cstddef>
#include <string>
#include <utility>

namespace conveyor::cuda {

/// Whether CUDA devices can be used here, and how many.
struct availability {
    int devices = 0;     ///< usable devices (0: none)
    std::string reason;  ///< why none, when `devices` is 0 ("no CUDA-capable device is detected", ...)
};

/** The CUDA devices this process can use. Never throws: a machine without a GPU or a
    driver answers 0 devices and says why. */
CONVEYOR_DECL availability devices() noexcept;

/** Page-locked ("pinned") host memory: the kind a host-to-device copy reads without the
    driver staging it through a buffer of its own, so `cudaMemcpyAsync` from it is truly
    asynchronous and runs at the link's full rate. Move-only; freed when destroyed.

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe.
*/
class pinned_memory {
public:
    pinned_memory() noexcept = default;
    /// `bytes` of pinned memory, usable from every device (`cudaHostAllocPortable`). Throws
    /// `conveyor::error` (`errc::out_of_memory`, `errc::no_device`) if it cannot be had.
    CONVEYOR_DECL explicit pinned_memory(std::size_t bytes);
    pinned_memory(pinned_memory&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
    pinned_memory& operator=(pinned_memory&& o) noexcept
    {
        if (this != &o) {
            reset();
            data_ = std::exchange(o.data_, nullptr);
            size_ = std::exchange(o.size_, 0);
        }
        return *this;
    }
    pinned_memory(const pinned_memory&) = delete;
    pinned_memory& operator=(const pinned_memory&) = delete;
    ~pinned_memory() { reset(); }

    void* data() const noexcept { return data_; }
    std::size_t size() const noexcept { return size_; }
    /// Frees the memory now.
    CONVEYOR_DECL void reset() noexcept;

private:
    void* data_ = nullptr;
    std::size_t size_ = 0;
};

/// `bytes` of pinned host memory (see `pinned_memory`), for allocators that hand out raw
/// pointers (batch slabs); give it back with `free_pinned`.
CONVEYOR_DECL void* allocate_pinned(std::size_t bytes);
/// Frees memory from `allocate_pinned`.
CONVEYOR_DECL void free_pinned(void* p) noexcept;

/// True when `p` points into page-locked memory that CUDA knows of (pinned here or
/// registered); false for ordinary (pageable) memory and when there is no device.
CONVEYOR_DECL bool is_pinned(const void* p) noexcept;

} // namespace conveyor::cuda

#if CONVEYOR_HEADER_ONLY
#include <conveyor/cuda/impl/device.ipp>
#endif

#endif
