// conveyor/core/impl/buffer.ipp — page-aligned memory and the buffer pool.
#ifndef CONVEYOR_CORE_IMPL_BUFFER_IPP
#define CONVEYOR_CORE_IMPL_BUFFER_IPP

#include <conveyor/core/buffer.hpp>

#include <sys/mman.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <new>

namespace conveyor {

namespace detail {

CONVEYOR_DECL void* allocate_bytes(std::size_t n)
{
    if (n < huge_threshold) return ::operator new(n, std::align_val_t{buffer_alignment});
    // Rounded up to huge pages, with one more for the alignment, a size this near the top
    // of size_t would wrap to a small mapping: no memory holds it.
    if (n > std::numeric_limits<std::size_t>::max() - 2 * huge_page) throw std::bad_alloc();
    const std::size_t size = mapped_size(n);
    // Map one huge page more than needed, then trim to a 2 MiB-aligned start.
    void* raw = ::mmap(nullptr, size + huge_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const auto start = reinterpret_cast<std::uintptr_t>(raw);
    const auto aligned = (start + huge_page - 1) & ~(std::uintptr_t{huge_page} - 1);
    if (aligned > start) ::munmap(raw, aligned - start);
    const auto end = start + size + huge_page;
    if (end > aligned + size) ::munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
    ::madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE); // a hint: ignored where THP is off
    return reinterpret_cast<void*>(aligned);
}

CONVEYOR_DECL void deallocate_bytes(void* p, std::size_t n) noexcept
{
    if (n < huge_threshold) ::operator delete(p, std::align_val_t{buffer_alignment});
    else ::munmap(p, mapped_size(n));
}

CONVEYOR_DECL pool_state::~pool_state()
{
    for (auto& l : free_lists)
        for (void* p : l)
            if (!from_slab(p)) deallocate_bytes(p, class_size(static_cast<std::size_t>(&l - free_lists.data())));
    for (std::byte* s : slabs) deallocate_bytes(s, huge_page);
}

CONVEYOR_DECL bool pool_state::from_slab(const void* p) const noexcept
{
    const auto* b = static_cast<const std::byte*>(p);
    auto it = std::upper_bound(slabs.begin(), slabs.end(), b, std::less<>{});
    return it != slabs.begin() && std::less<>{}(b, *(it - 1) + huge_page);
}

CONVEYOR_DECL void* pool_state::carve(std::size_t bytes)
{
    if (slab_next && static_cast<std::size_t>(slab_end - slab_next) >= bytes) {
        void* p = slab_next;
        slab_next += bytes;
        return p;
    }
    if ((slabs.size() + 1) * huge_page > max_cached_bytes / 2) return nullptr;
    auto* s = static_cast<std::byte*>(allocate_bytes(huge_page));
    try {
        slabs.insert(std::upper_bound(slabs.begin(), slabs.end(), s, std::less<>{}), s);
    } catch (...) {
        deallocate_bytes(s, huge_page);
        throw;
    }
    slab_next = s + bytes;
    slab_end = s + huge_page;
    return s;
}

CONVEYOR_DECL void* pool_state::take(std::size_t& cls)
{
    if (cls < class_count) {
        std::lock_guard lk(mu);
        // An idle buffer of the class, or else of one of the next classes (at most half as
        // large again): where sizes spread over many classes (JPEGs of 10 KB to 1 MB), each
        // class otherwise keeps buffers for its own peak, and the pool holds (and touches
        // fresh) far more memory than is ever in use at once.
        const std::size_t last = std::min(cls + borrow_classes, class_count - 1);
        for (std::size_t c = cls; c <= last; ++c) {
            auto& l = free_lists[c];
            if (l.empty()) continue;
            void* p = l.back();
            l.pop_back();
            cached_bytes -= class_size(c);
            cls = c;
            return p;
        }
        if (use_slabs && class_size(cls) <= max_slab_piece) {
            const std::size_t bytes = (class_size(cls) + buffer_alignment - 1) & ~(buffer_alignment - 1);
            if (void* p = carve(bytes)) {
                allocations.fetch_add(1, std::memory_order_relaxed);
                return p;
            }
        }
    }
    allocations.fetch_add(1, std::memory_order_relaxed);
    return allocate_bytes(cls < class_count ? class_size(cls) : 0);
}

CONVEYOR_DECL void pool_state::give(void* p, std::size_t cls, std::size_t bytes) noexcept
{
    if (cls < class_count) {
        std::lock_guard lk(mu);
        // Slab memory cannot be freed piece by piece: it stays idle here whatever the cap
        // says. It counts toward the cap, so other buffers are freed first, and the slabs
        // are at most half of it: idle memory stays under 1.5 times the cap.
        const bool slab = from_slab(p);
        if (cached_bytes + bytes <= max_cached_bytes || slab) {
            try {
                free_lists[cls].push_back(p);
                cached_bytes += bytes;
                return;
            } catch (...) {
            }
            if (slab) return; // unlisted, it is freed with its slab
        }
    }
    deallocate_bytes(p, bytes);
}

} // namespace detail

CONVEYOR_DECL buffer buffer::copy_of(std::span<const std::byte> bytes)
{
    buffer b;
    b.cls_ = detail::class_count;
    b.capacity_ = bytes.size();
    b.data_ = static_cast<std::byte*>(::operator new(std::max<std::size_t>(bytes.size(), 1),
                                                     std::align_val_t{detail::buffer_alignment}));
    if (!bytes.empty()) std::memcpy(b.data_, bytes.data(), bytes.size());
    b.size_ = bytes.size();
    return b;
}

CONVEYOR_DECL void buffer::release() noexcept
{
    if (!data_) return;
    if (pool_) pool_->give(data_, cls_, capacity_);
    else ::operator delete(data_, std::align_val_t{detail::buffer_alignment});
    data_ = nullptr;
    size_ = capacity_ = 0;
}

CONVEYOR_DECL buffer buffer::sibling(std::size_t n) const
{
    if (pool_) return buffer_pool(pool_).acquire(n);
    buffer b;
    b.cls_ = detail::class_count;
    b.capacity_ = n;
    b.size_ = n;
    b.data_ = static_cast<std::byte*>(::operator new(std::max<std::size_t>(n, 1), std::align_val_t{detail::buffer_alignment}));
    return b;
}

CONVEYOR_DECL buffer buffer_pool::acquire(std::size_t n)
{
    buffer b;
    std::size_t cls = detail::class_for(n);
    if (cls < detail::class_count) {
        b.data_ = static_cast<std::byte*>(state_->take(cls));
        b.capacity_ = detail::class_size(cls);
    } else {
        b.data_ = static_cast<std::byte*>(detail::allocate_bytes(n));
        b.capacity_ = n;
    }
    b.cls_ = cls;
    b.size_ = n;
    b.pool_ = state_;
    return b;
}

CONVEYOR_DECL std::size_t buffer_pool::cached_bytes() const
{
    std::lock_guard lk(state_->mu);
    return state_->cached_bytes;
}

} // namespace conveyor

#endif
