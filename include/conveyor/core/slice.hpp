// conveyor/core/slice.hpp — shared, sliceable views of a buffer: zero-copy parts of one read.
#ifndef CONVEYOR_CORE_SLICE_HPP
#define CONVEYOR_CORE_SLICE_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/detail/config.hpp>

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

namespace conveyor {

/** A read-only view of `size()` bytes of a buffer whose storage it shares.

    Cutting a slice out of another (`sub`) copies no bytes: both point into the same
    storage, which goes back to its pool when the last slice of it is destroyed. This is
    how the parts of one read (the members of a tar shard read in 8 MiB chunks) travel on
    as separate items without a copy and without keeping track of who frees what.

    A slice is cheap to copy (a reference count and two words). Its bytes never change
    while any slice of them lives: the storage is handed over whole, and a slice gives no
    way to write to it.

    @par Thread Safety
    Distinct objects: safe, also when they share storage (the last one to go, on whatever
    thread, returns it). Shared objects: unsafe.
*/
class slice {
public:
    /// An empty slice that shares nothing.
    slice() noexcept = default;

    /// The whole of `b` (its `size()` bytes), whose storage the slice now owns.
    CONVEYOR_DECL explicit slice(buffer b);

    /// The whole of `*storage` (its `size()` bytes), sharing it. For storage that must keep
    /// something else alive as long as its bytes (an aliasing `shared_ptr` into a larger
    /// object: a chunk's buffer with its memory-budget lease, see `leased_slice`).
    CONVEYOR_DECL explicit slice(std::shared_ptr<const buffer> storage) noexcept;

    /** Bytes [`offset`, `offset + length`) of this slice, sharing its storage. Throws
        `conveyor::error` (`errc::invalid_argument`) when they are not all inside it,
        naming both ranges: a part past the end is a bug or corrupt input, never silently
        shortened. */
    CONVEYOR_DECL slice sub(std::size_t offset, std::size_t length) const;
    /// Bytes from `offset` to the end of this slice (see the other overload).
    slice sub(std::size_t offset) const { return sub(offset, offset <= size_ ? size_ - offset : 0); }

    const std::byte* data() const noexcept { return data_; }
    std::size_t size() const noexcept { return size_; }
    bool empty() const noexcept { return size_ == 0; }
    std::span<const std::byte> span() const noexcept { return {data_, size_}; }
    /// The bytes as characters (handy for text fields such as `cls` or `json`).
    std::string_view view() const noexcept { return {reinterpret_cast<const char*>(data_), size_}; }

    /// Where this slice starts in its storage (the offset of a member in its shard chunk).
    CONVEYOR_DECL std::size_t offset() const noexcept;
    /// Bytes of the storage this slice is a view of (0 for a slice that has none).
    std::size_t storage_size() const noexcept { return storage_ ? storage_->size() : 0; }
    /** These bytes in storage of their own (a buffer from the storage's pool), or this slice
        itself when it already spans its whole storage. For holding a small slice for long
        without keeping a large storage alive: a shard member kept in a shuffle buffer
        otherwise pins its whole chunk. */
    CONVEYOR_DECL slice compact() const;
    /** These bytes as a buffer of their own, for a consumer that owns its bytes (a blob):
        the storage itself, without a copy, when this slice spans all of it, is its only
        owner and was made from a buffer (`slice(buffer)`); a copy otherwise. Leaves this
        slice empty. */
    CONVEYOR_DECL buffer into_buffer() &&;
    /// How many slices share this one's storage (0 for a slice that has none).
    long use_count() const noexcept { return storage_.use_count(); }
    /// True when `a` and `b` share storage (one was cut from the other, or both from one).
    friend bool share_storage(const slice& a, const slice& b) noexcept
    {
        return a.storage_ && a.storage_ == b.storage_;
    }

private:
    std::shared_ptr<const buffer> storage_;
    const std::byte* data_ = nullptr;
    std::size_t size_ = 0;
    bool owned_ = false; // storage_ was made by slice(buffer): a buffer of ours, not a const one shared in
};

} // namespace conveyor

#if CONVEYOR_HEADER_ONLY
#include <conveyor/core/impl/slice.ipp>
#endif

#endif
