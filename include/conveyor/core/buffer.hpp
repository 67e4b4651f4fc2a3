// conveyor/core/buffer.hpp — pooled byte buffers and the blob type that sources produce.
#ifndef CONVEYOR_CORE_BUFFER_HPP
#define CONVEYOR_CORE_BUFFER_HPP

#include <conveyor/core/order.hpp>
#include <conveyor/detail/config.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace conveyor {

namespace detail {

/* Size classes: four per power of two from 4 KiB to 4 GiB, so a buffer wastes at most a
   quarter of its size (ImageNet JPEGs of ~110 KB land in a 112 KiB class, not 128 KiB; the
   unused tail of a large class is never touched, so it costs address space, not memory).
   Larger requests are allocated exactly and never cached. */
inline constexpr std::size_t min_class_shift = 12;
inline constexpr std::size_t max_class_shift = 32;
inline constexpr std::size_t class_count = (max_class_shift - min_class_shift) * 4 + 1;
inline constexpr std::size_t buffer_alignment = 4096; // page-aligned: O_DIRECT and DMA friendly

inline std::size_t class_size(std::size_t cls) noexcept
{
    const std::size_t octave = cls / 4, step = cls % 4;
    const std::size_t base = std::size_t{1} << (min_class_shift + octave);
    return base + step * (base / 4);
}

/// The smallest class that holds n bytes, or class_count if n is too large to pool.
inline std::size_t class_for(std::size_t n) noexcept
{
    if (n <= class_size(0)) return 0;
    if (n > class_size(class_count - 1)) return class_count;
    const unsigned shift = static_cast<unsigned>(std::bit_width(n - 1) - 1); // floor(log2(n-1))
    std::size_t cls = (shift - min_class_shift) * 4;
    while (class_size(cls) < n) ++cls;
    return cls;
}

// Buffers of this size or more are mapped directly, in 2 MiB huge pages where the kernel
// gives them (MADV_HUGEPAGE). Filling fresh memory costs one page fault per page, and
// faults are dear (in VMs most of all), dearer than the copy of the bytes themselves;
// huge pages take 512 times fewer faults. See docs/perf/fresh-memory.md.
inline constexpr std::size_t huge_threshold = std::size_t{2} << 20;
inline constexpr std::size_t huge_page = std::size_t{2} << 20;

inline std::size_t mapped_size(std::size_t n) noexcept { return (n + huge_page - 1) & ~(huge_page - 1); }

/// Memory for a buffer of `n` bytes, page-aligned (2 MiB-aligned when large).
CONVEYOR_DECL void* allocate_bytes(std::size_t n);

/// Frees memory from `allocate_bytes(n)`.
CONVEYOR_DECL void deallocate_bytes(void* p, std::size_t n) noexcept;

/* Buffers of a class up to this size are cut from 2 MiB slabs of huge pages (`pool_state::
   carve`) rather than allocated one by one: a fresh buffer takes one page fault per 4 KiB
   the first time it is written, a slab one fault per 2 MiB, so a reader's first pass
   over fresh memory does not pay a fault per page of every file. Pieces go up to 1 MiB,
   half a slab, so that ImageNet-sized files and the larger ones among them (a lognormal
   tail) all come from slabs (docs/perf/fresh-memory.md). A piece that does not fit in
   what is left of a slab starts a new one, so a slab may lose up to half its size at its
   end. */
inline constexpr std::size_t max_slab_piece = huge_page / 2;

/// How many classes up a request may take an idle buffer from (see `pool_state::take`).
inline constexpr std::size_t borrow_classes = 2;

/// Whether this build cuts small buffers from slabs: not under AddressSanitizer, which
/// must see each buffer as an allocation of its own to catch overruns past it.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool use_slabs = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool use_slabs = false;
#else
inline constexpr bool use_slabs = true;
#endif
#else
inline constexpr bool use_slabs = true;
#endif

struct pool_state {
    explicit pool_state(std::size_t max_cached) : max_cached_bytes(max_cached) {}
    CONVEYOR_DECL ~pool_state();

    /// Memory for a buffer of class `cls`: an idle one of that class or of one of the next
    /// `borrow_classes` (`cls` is set to the class taken), else fresh memory.
    CONVEYOR_DECL void* take(std::size_t& cls);

    CONVEYOR_DECL void give(void* p, std::size_t cls, std::size_t bytes) noexcept;

    /// Cuts `bytes` (a multiple of the page size) from the current slab, starting a new one
    /// when it is full; null when the slabs already hold half of `max_cached_bytes` (the
    /// caller allocates on its own then). Called with `mu` held.
    CONVEYOR_DECL void* carve(std::size_t bytes);
    /// Whether `p` was cut from a slab (its memory goes back only with the pool).
    CONVEYOR_DECL bool from_slab(const void* p) const noexcept;

    std::mutex mu;
    std::array<std::vector<void*>, class_count> free_lists{};
    std::size_t cached_bytes = 0;
    std::size_t max_cached_bytes;
    std::atomic<std::uint64_t> allocations{0};
    std::vector<std::byte*> slabs; // sorted; each `huge_page` bytes from allocate_bytes
    std::byte* slab_next = nullptr; // the free part of the newest slab
    std::byte* slab_end = nullptr;
};

} // namespace detail

/** A contiguous, move-only byte buffer, usually taken from a `buffer_pool`.

    Its memory is page-aligned. When destroyed it goes back to its pool (which it keeps
    alive), so blobs may outlive the runtime that read them.

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe.
*/
class buffer {
public:
    buffer() noexcept = default;
    buffer(buffer&& o) noexcept
        : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)),
          capacity_(std::exchange(o.capacity_, 0)), cls_(o.cls_), pool_(std::move(o.pool_))
    {
    }
    buffer& operator=(buffer&& o) noexcept
    {
        if (this != &o) {
            release();
            data_ = std::exchange(o.data_, nullptr);
            size_ = std::exchange(o.size_, 0);
            capacity_ = std::exchange(o.capacity_, 0);
            cls_ = o.cls_;
            pool_ = std::move(o.pool_);
        }
        return *this;
    }
    buffer(const buffer&) = delete;
    buffer& operator=(const buffer&) = delete;
    ~buffer() { release(); }

    /// Copies `bytes` into a new, unpooled buffer (for tests and small literals).
    CONVEYOR_DECL static buffer copy_of(std::span<const std::byte> bytes);
    static buffer copy_of(std::string_view s) { return copy_of(std::as_bytes(std::span(s.data(), s.size()))); }

    std::byte* data() noexcept { return data_; }
    const std::byte* data() const noexcept { return data_; }
    std::size_t size() const noexcept { return size_; }
    std::size_t capacity() const noexcept { return capacity_; }
    bool empty() const noexcept { return size_ == 0; }

    /// Sets the size; `n` must not exceed `capacity()`.
    void resize(std::size_t n) noexcept { size_ = std::min(n, capacity_); }

    std::span<std::byte> span() noexcept { return {data_, size_}; }
    std::span<const std::byte> span() const noexcept { return {data_, size_}; }
    /// The bytes as characters (handy for text members such as `cls` or `json`).
    std::string_view view() const noexcept { return {reinterpret_cast<const char*>(data_), size_}; }

    /// A new buffer of `n` bytes (contents uninitialised) from the pool this one came from;
    /// unpooled when this one has no pool.
    CONVEYOR_DECL buffer sibling(std::size_t n) const;

private:
    friend class buffer_pool;

    CONVEYOR_DECL void release() noexcept;

    std::byte* data_ = nullptr;
    std::size_t size_ = 0;
    std::size_t capacity_ = 0;
    std::size_t cls_ = detail::class_count;
    std::shared_ptr<detail::pool_state> pool_;
};

/** A cache of page-aligned buffers in size classes.

    Reusing memory matters for I/O: a freshly allocated buffer costs a page fault per
    4 KiB when the kernel first writes to it, more than the read itself when data is
    cached.
    The pool keeps at most `max_cached_bytes` of idle memory; beyond that, returned buffers
    are freed. Buffers of up to 1 MiB are cut from 2 MiB slabs of huge pages (where the
    kernel gives them), which take one page fault each instead of one per 4 KiB; slabs
    take at most half of `max_cached_bytes`, and their memory is freed with the pool (so
    idle memory may reach 1.5 times `max_cached_bytes`).

    @par Thread Safety
    Safe: buffers may be taken and returned from any thread.
*/
class buffer_pool {
public:
    explicit buffer_pool(std::size_t max_cached_bytes = std::size_t{256} << 20)
        : state_(std::make_shared<detail::pool_state>(max_cached_bytes))
    {
    }

    /// A buffer with `size() == n` and `capacity() >= n`; contents are uninitialised.
    CONVEYOR_DECL buffer acquire(std::size_t n);

    /// Bytes held idle in the pool now.
    CONVEYOR_DECL std::size_t cached_bytes() const;
    /// How many times the pool had to allocate fresh memory.
    std::uint64_t allocations() const noexcept { return state_->allocations.load(std::memory_order_relaxed); }

private:
    friend class buffer;
    explicit buffer_pool(std::shared_ptr<detail::pool_state> s) noexcept : state_(std::move(s)) {}

    std::shared_ptr<detail::pool_state> state_;
};

/** One unit of data from a source: a key, its bytes and where they came from.

    `key` is relative (a path below the root, an object key); `origin` is absolute (a full
    path or URL) and is what error messages name.
*/
struct blob {
    std::string key;          ///< relative name, e.g. "n01440764/img_0001.JPEG"
    buffer data;              ///< the bytes
    std::string origin;       ///< full path or URL
    std::int64_t label = -1;  ///< class id when the source knows one (ImageFolder), else -1
    std::uint64_t index = 0;  ///< position in the source's list
    /// Position in the epoch's work list (`conveyor::epoch_work`): what resume state keeps
    /// (`progress`); the position in the list where the run reads the list as it stands.
    std::uint64_t work = 0;
    /// The index of its source and the pass over it, set by `mix` (see `sample_id`).
    std::uint32_t source = 0;
    std::uint64_t pass = 0;
};

/// What identifies blob `b` for resume (`progress::consumed`): its whole unit, at its place
/// in the epoch (and, from a `mix`, its source and pass).
inline sample_id id_of(const blob& b) noexcept
{
    return {.work = b.work, .shard = b.index, .pass = b.pass, .source = b.source, .whole = true};
}

} // namespace conveyor

#if CONVEYOR_HEADER_ONLY
#include <conveyor/core/impl/buffer.ipp>
#endif

#endif
