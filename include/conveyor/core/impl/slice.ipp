// conveyor/core/impl/slice.ipp — shared, sliceable views of a buffer.
#ifndef CONVEYOR_CORE_IMPL_SLICE_IPP
#define CONVEYOR_CORE_IMPL_SLICE_IPP

#include <conveyor/core/slice.hpp>

#include <conveyor/core/error.hpp>

#include <cstring>
#include <string>

namespace conveyor {

CONVEYOR_DECL slice::slice(buffer b)
{
    if (b.empty()) return; // nothing to share: an empty slice holds no storage
    auto storage = std::make_shared<buffer>(std::move(b));
    data_ = storage->data();
    size_ = storage->size();
    storage_ = std::move(storage);
    owned_ = true;
}

CONVEYOR_DECL slice::slice(std::shared_ptr<const buffer> storage) noexcept
{
    if (!storage || storage->empty()) return;
    data_ = storage->data();
    size_ = storage->size();
    storage_ = std::move(storage);
}

CONVEYOR_DECL slice slice::sub(std::size_t offset, std::size_t length) const
{
    if (offset > size_ || length > size_ - offset)
        throw error(make_error_code(errc::invalid_argument),
                    {.detail = "slice of bytes [" + std::to_string(offset) + ", " + std::to_string(offset) + " + " +
                               std::to_string(length) + ") is outside a slice of " + std::to_string(size_) + " bytes"});
    slice s;
    if (length == 0) return s;
    s.storage_ = storage_;
    s.data_ = data_ + offset;
    s.size_ = length;
    s.owned_ = owned_;
    return s;
}

CONVEYOR_DECL slice slice::compact() const
{
    if (!storage_ || storage_->size() == size_) return *this;
    buffer own = storage_->sibling(size_);
    std::memcpy(own.data(), data_, size_);
    return slice(std::move(own));
}

CONVEYOR_DECL buffer slice::into_buffer() &&
{
    slice self = std::move(*this);
    *this = slice();
    if (!self.storage_) return buffer{};
    if (self.owned_ && self.storage_.use_count() == 1 && self.data_ == self.storage_->data() && self.size_ == self.storage_->size())
        // The only owner of a buffer that was never const (made in slice(buffer)): moving it out is ours to do.
        return std::move(const_cast<buffer&>(*self.storage_));
    buffer own = self.storage_->sibling(self.size_);
    std::memcpy(own.data(), self.data_, self.size_);
    return own;
}

CONVEYOR_DECL std::size_t slice::offset() const noexcept
{
    return storage_ ? static_cast<std::size_t>(data_ - storage_->data()) : 0;
}

} // namespace conveyor

#endif
