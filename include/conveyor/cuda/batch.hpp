// conveyor/cuda/batch.hpp — image batches on the GPU: what `cuda::to_cuda` copies of an
// `image::image_batch`, page-locked slabs to collate them in, and the DLPack export of the
// copies. The CUDA module builds on the image module here; the image module knows nothing
// of CUDA.
#ifndef CONVEYOR_CUDA_BATCH_HPP
#define CONVEYOR_CUDA_BATCH_HPP

#include <conveyor/cuda/device.hpp>
#include <conveyor/cuda/staging.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/image/batch.hpp>
#include <conveyor/image/dlpack.hpp>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace conveyor::image {

/// The tensors `cuda::to_cuda` copies from a batch (found by argument-dependent lookup):
/// the images, then the labels.
inline std::vector<cuda::host_tensor> staging_view(const image_batch& b)
{
    auto of = [](const tensor& t) {
        const dtype_traits& d = traits_of(t.type);
        return cuda::host_tensor{t.data, t.bytes(), t.shape, cuda::element_type{static_cast<std::uint8_t>(d.kind), d.bits}};
    };
    return {of(b.images), of(b.labels)};
}

} // namespace conveyor::image

namespace conveyor::cuda {

/** Slabs in page-locked memory (`allocate_pinned`), for image batches bound for the GPU:
    `image::collate_options{.allocator = cuda::pinned_slab_allocator()}`; their copies run at
    the link's full rate and overlap the CPU's work. Allocation throws without a usable
    device. */
inline image::slab_allocator pinned_slab_allocator()
{
    return {.allocate = [](std::size_t n) { return allocate_pinned(n); },
            .deallocate = [](void* p, std::size_t) { free_pinned(p); },
            .kind = image::memory_kind::cuda_host};
}

namespace detail {

/// Tensor `i` of device batch `b` with the host tensor's type, shape and strides.
inline DLManagedTensor* device_dlpack(const device_batch<image::image_batch>& b, std::size_t i, const image::tensor& host)
{
    if (i >= b.tensors().size())
        throw std::logic_error("cuda::to_dlpack: the device batch holds " + std::to_string(b.tensors().size()) +
                               " tensors, not the images and labels of an image batch");
    image::tensor t = host;
    t.data = b.tensors()[i].data;
    return image::to_dlpack(t, b.owner(), DLDevice{kDLCUDA, b.device()});
}

} // namespace detail

/** The images of a batch that `to_cuda` copied to the GPU, as a DLPack tensor on
    `{kDLCUDA, b.device()}` (same type and shape as the host batch's), holding the batch's
    device buffers until the consumer calls the deleter (the ring gives them back after
    the work queued by then on the stream given to `done_on`).

    The copies are asynchronous: before reading the tensor, make the consumer's stream wait
    for `b.ready()` (`cudaStreamWaitEvent`), or call `b.synchronize()`. */
inline DLManagedTensor* to_dlpack(const device_batch<image::image_batch>& b)
{
    return detail::device_dlpack(b, 0, b.host().images);
}

/// The labels of a batch on the GPU as a DLPack tensor (int64, shape {n}), like `to_dlpack(b)`.
inline DLManagedTensor* labels_to_dlpack(const device_batch<image::image_batch>& b)
{
    return detail::device_dlpack(b, 1, b.host().labels);
}

} // namespace conveyor::cuda

#endif
