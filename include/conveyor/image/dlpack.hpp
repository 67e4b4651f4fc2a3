// conveyor/image/dlpack.hpp — batches exported as DLPack tensors, so PyTorch
// (`torch.from_dlpack`), JAX and CuPy take them without a copy.
#ifndef CONVEYOR_IMAGE_DLPACK_HPP
#define CONVEYOR_IMAGE_DLPACK_HPP

#include <conveyor/detail/config.hpp>
#include <conveyor/image/batch.hpp>

#include <dlpack/dlpack.h> // Debian libdlpack-dev (DLPack 0.6: DLManagedTensor, no versioned struct)

#include <memory>

namespace conveyor::image {

/// The DLPack data type of `t` (one lane).
CONVEYOR_DECL DLDataType dlpack_type(dtype t) noexcept;

/** The DLPack device of host memory of kind `k`: `kDLCPU`, for page-locked memory too.
    Page-locked memory is CPU memory to every consumer (PyTorch sees that it is pinned by
    asking CUDA), and PyTorch 1.13 refuses `kDLCUDAHost`; a consumer that wants to be told
    can be given `{kDLCUDAHost, 0}` through the `tensor` overload of `to_dlpack`. */
CONVEYOR_DECL DLDevice dlpack_device(memory_kind k) noexcept;

/** Exports tensor `t` as a DLPack managed tensor on `device`; `owner` keeps its memory
    alive until the consumer calls the tensor's deleter, which releases `owner` and frees
    what this call allocated, exactly once.

    This is the hook for other memory: the CUDA module exports a device batch's tensors
    with `{kDLCUDA, device}` and an owner that gives its device buffers back to the ring
    (`cuda::to_dlpack`, conveyor/cuda/batch.hpp).

    Throws `std::bad_alloc` only. */
CONVEYOR_DECL DLManagedTensor* to_dlpack(const tensor& t, std::shared_ptr<const void> owner, DLDevice device);

/** The images of batch `b` as a DLPack tensor (uint8, float16 or float32; shape {n, h, w,
    c} or {n, c, h, w}), sharing the batch's slab: the slab goes back to the pool only once
    the batch and every exported tensor are gone (the deleter is one more owner).

    @code
    DLManagedTensor* t = conveyor::image::to_dlpack(batch);
    // hand `t` to a framework; it calls t->deleter(t) when done
    @endcode */
CONVEYOR_DECL DLManagedTensor* to_dlpack(const image_batch& b);

/// The labels of batch `b` as a DLPack tensor (int64, shape {n}), owning the slab like
/// `to_dlpack(b)`.
CONVEYOR_DECL DLManagedTensor* labels_to_dlpack(const image_batch& b);

} // namespace conveyor::image

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/impl/dlpack.ipp>
#endif

#endif
