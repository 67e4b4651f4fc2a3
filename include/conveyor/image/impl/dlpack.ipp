// conveyor/image/impl/dlpack.ipp — DLPack export.
#ifndef CONVEYOR_IMAGE_IMPL_DLPACK_IPP
#define CONVEYOR_IMAGE_IMPL_DLPACK_IPP

#include <conveyor/image/dlpack.hpp>

#include <stdexcept>
#include <string>
#include <vector>

namespace conveyor::image {

namespace detail {

/// What a managed tensor owns: the tensor first (the deleter gets its address), its shape
/// and strides (DLTensor points into them), and the owner of the memory.
struct dlpack_holder {
    DLManagedTensor managed{};
    std::vector<std::int64_t> shape;
    std::vector<std::int64_t> strides;
    std::shared_ptr<const void> owner;

    static void destroy(DLManagedTensor* self) noexcept
    {
        delete static_cast<dlpack_holder*>(self->manager_ctx);
    }
};

} // namespace detail

// `number_kind` is numbered as DLPack numbers its type codes, so a kind is its code.
static_assert(static_cast<int>(number_kind::signed_integer) == kDLInt);
static_assert(static_cast<int>(number_kind::unsigned_integer) == kDLUInt);
static_assert(static_cast<int>(number_kind::floating) == kDLFloat);

CONVEYOR_DECL DLDataType dlpack_type(dtype t) noexcept
{
    const dtype_traits& d = traits_of(t);
    return {static_cast<std::uint8_t>(d.kind), d.bits, 1};
}

CONVEYOR_DECL DLDevice dlpack_device(memory_kind) noexcept
{
    return {kDLCPU, 0};
}

CONVEYOR_DECL DLManagedTensor* to_dlpack(const tensor& t, std::shared_ptr<const void> owner, DLDevice device)
{
    auto* h = new detail::dlpack_holder;
    h->shape = t.shape;
    h->strides = t.strides;
    h->owner = std::move(owner);
    DLTensor& d = h->managed.dl_tensor;
    d.data = t.data;
    d.device = device;
    d.ndim = static_cast<int>(h->shape.size());
    d.dtype = dlpack_type(t.type);
    d.shape = h->shape.data();
    d.strides = h->strides.empty() ? nullptr : h->strides.data();
    d.byte_offset = 0;
    h->managed.manager_ctx = h;
    h->managed.deleter = &detail::dlpack_holder::destroy;
    return &h->managed;
}

CONVEYOR_DECL DLManagedTensor* to_dlpack(const image_batch& b)
{
    return to_dlpack(b.images, b.slab.owner(), dlpack_device(b.slab.kind()));
}

CONVEYOR_DECL DLManagedTensor* labels_to_dlpack(const image_batch& b)
{
    return to_dlpack(b.labels, b.slab.owner(), dlpack_device(b.slab.kind()));
}

} // namespace conveyor::image

#endif
