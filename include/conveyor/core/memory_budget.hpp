// conveyor/core/memory_budget.hpp — a limit on the bytes that reads hold at once, shared
// by everything that reads on a runtime.
#ifndef CONVEYOR_CORE_MEMORY_BUDGET_HPP
#define CONVEYOR_CORE_MEMORY_BUDGET_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/slice.hpp>
#include <conveyor/detail/config.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <system_error>
#include <utility>

namespace conveyor {

namespace asio = boost::asio;

namespace detail {
struct budget_state;
} // namespace detail

/** Bytes taken from a `memory_budget`: given back when the lease is destroyed (or
    `release()`d), on whatever thread. Move-only.

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe.
*/
class memory_lease {
public:
    memory_lease() noexcept = default;
    memory_lease(memory_lease&& o) noexcept : state_(std::move(o.state_)), bytes_(std::exchange(o.bytes_, 0)) {}
    memory_lease& operator=(memory_lease&& o) noexcept
    {
        if (this != &o) {
            release();
            state_ = std::move(o.state_);
            bytes_ = std::exchange(o.bytes_, 0);
        }
        return *this;
    }
    memory_lease(const memory_lease&) = delete;
    memory_lease& operator=(const memory_lease&) = delete;
    ~memory_lease() { release(); }

    /// The bytes this lease holds (0 once released, or for a lease of no budget).
    std::size_t bytes() const noexcept { return bytes_; }

    /// Gives the bytes back now; waiters that now fit are let through.
    CONVEYOR_DECL void release() noexcept;

private:
    friend class memory_budget;
    friend struct detail::budget_state;
    memory_lease(std::shared_ptr<detail::budget_state> s, std::size_t n) noexcept : state_(std::move(s)), bytes_(n) {}

    std::shared_ptr<detail::budget_state> state_;
    std::size_t bytes_ = 0;
};

/// A budget's counters at one moment.
struct memory_budget_stats {
    std::size_t limit = 0;       ///< the budget (`memory_budget::unlimited`: none)
    std::size_t in_use = 0;      ///< bytes leased now
    std::size_t peak = 0;        ///< the most bytes leased at once so far
    std::size_t waiting = 0;     ///< acquires waiting now
    std::uint64_t acquires = 0;  ///< acquires granted so far
    std::uint64_t waits = 0;     ///< acquires that had to wait for room
    std::uint64_t oversize = 0;  ///< acquires larger than the whole budget (let through alone)
};

/** A limit on the bytes in flight: the memory that reads hold between asking for data and
    the consumer letting go of it (AWS CRT's memory limit for its S3 client). Readers take a
    lease of a chunk's size before each read and keep it with the chunk's storage, so the
    bytes come back when the last slice of the chunk dies. Many prefetching readers on one
    runtime thus share one bound instead of each multiplying its own.

    Acquiring never fails for want of room and never busy-waits: it waits until the bytes
    fit. Waiters are served strictly first come, first served: a new request waits behind
    the queue even when it would fit, so that a large request is never starved by a stream
    of small ones. A request larger than the whole budget is let through alone, once
    nothing else is leased (it cannot fit otherwise, and refusing it would deadlock a reader
    whose chunk size exceeds the budget); `oversize` counts them.

    @par Thread Safety
    Safe: acquire and release from any thread.
*/
class memory_budget {
public:
    /// A budget without a limit: acquires are granted at once (and still counted).
    static constexpr std::size_t unlimited = std::numeric_limits<std::size_t>::max();

    /// A budget of `limit` bytes (`unlimited`: none; 0 is taken as 1 byte: everything one at a time).
    CONVEYOR_DECL explicit memory_budget(std::size_t limit);

    memory_budget(const memory_budget&) = delete;
    memory_budget& operator=(const memory_budget&) = delete;
    CONVEYOR_DECL ~memory_budget();

    /** The default budget of a runtime: a quarter of the memory this process may use (the
        physical memory, or the cgroup's `memory.max` where that is lower), at least
        256 MiB. A quarter leaves the rest to what the bytes become (decoded images, batches,
        the shuffle buffer) and to the model's own host memory, while still allowing
        gigabytes in flight on a training machine: at 8 MiB chunks, 64 GiB of RAM gives
        2,048 chunks, far more than a link's bandwidth-delay product needs. */
    CONVEYOR_DECL static std::size_t default_limit();

    /** Waits until `bytes` fit, then completes with a lease of them. Cancellation (the
        handler's slot) removes the waiter and completes with `operation_canceled`.
        As everywhere in conveyor, an acquire that may wait is named `async_acquire`;
        `try_acquire` and `acquire_now` never wait. This one is the primitive the others
        are built on, so it takes any Asio completion token (`as_tuple(use_awaitable)`,
        `deferred`, a handler).
        @par Completion Signature
        `void(std::error_code, memory_lease)` */
    template <class Token>
    auto async_acquire(std::size_t bytes, Token&& token)
    {
        return asio::async_initiate<Token, void(std::error_code, memory_lease)>(
            [this](auto handler, std::size_t bytes) {
                asio::any_io_executor ex = asio::get_associated_executor(handler);
                start_acquire(bytes, std::move(ex), acquire_handler(std::move(handler)));
            },
            token, bytes);
    }

    /** `async_acquire` completing on `ex`, whatever executor the token's handler has: for
        tokens whose handler has none of its own (a `deferred` operation inside a parallel
        group), which would otherwise complete on Asio's system executor, a process-wide
        pool that a forked child does not have (its threads stayed in the parent).
        @par Completion Signature
        `void(std::error_code, memory_lease)` */
    template <class Token>
    auto async_acquire(std::size_t bytes, asio::any_io_executor ex, Token&& token)
    {
        return asio::async_initiate<Token, void(std::error_code, memory_lease)>(
            [this](auto handler, std::size_t bytes, asio::any_io_executor ex) {
                start_acquire(bytes, std::move(ex), acquire_handler(std::move(handler)));
            },
            token, bytes, std::move(ex));
    }

    /// A lease of `bytes` now if they fit and nobody waits; nullopt otherwise.
    CONVEYOR_DECL std::optional<memory_lease> try_acquire(std::size_t bytes);

    /** A lease of `bytes` now, whether they fit or not: counted like any other (`in_use`
        may pass the limit until it is given back). Only for a reader that must not wait
        because what it waits on cannot free room until it gets on (see `read_priority`). */
    CONVEYOR_DECL memory_lease acquire_now(std::size_t bytes);

    CONVEYOR_DECL std::size_t limit() const noexcept;
    CONVEYOR_DECL std::size_t in_use() const noexcept;
    CONVEYOR_DECL std::size_t peak() const noexcept;
    CONVEYOR_DECL std::uint64_t waits() const noexcept;
    /// All counters, read together.
    CONVEYOR_DECL memory_budget_stats stats() const;

private:
    using acquire_handler = asio::any_completion_handler<void(std::error_code, memory_lease)>;
    CONVEYOR_DECL void start_acquire(std::size_t bytes, asio::any_io_executor ex, acquire_handler h);

    std::shared_ptr<detail::budget_state> state_;
};

/** A slice of the whole of `b` that keeps `lease` until its storage dies (the last slice
    cut from it), so that a chunk's bytes go back to the budget exactly when nobody can
    read them any more. */
CONVEYOR_DECL slice leased_slice(buffer b, memory_lease lease);

} // namespace conveyor

#if CONVEYOR_HEADER_ONLY
#include <conveyor/core/impl/memory_budget.ipp>
#endif

#endif
