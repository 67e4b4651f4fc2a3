// conveyor/core/chunks.hpp — one object's bytes read as a sequence of chunks: how a shard
// on disk, in a bucket or behind a URL reaches the tar reader without being held whole.
#ifndef CONVEYOR_CORE_CHUNKS_HPP
#define CONVEYOR_CORE_CHUNKS_HPP

#include <conveyor/core/memory_budget.hpp>
#include <conveyor/core/slice.hpp>
#include <conveyor/detail/config.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/post.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace conveyor {

namespace asio = boost::asio;

/// Bytes [`offset`, `offset + bytes.size()`) of an object.
struct chunk {
    slice bytes;
    std::uint64_t offset = 0;
};

/** Lets the consumer of several readers hurry the one it waits on past the memory budget.

    A source that merges several readers' items in a fixed order waits on one reader at a
    time while the others' items wait for their turn, holding their chunks' memory (and the
    consumer may hold earlier items' chunks). Were that reader to wait for room in the
    budget, nothing might ever make room: the memory comes back only when the merge takes
    the other readers' items, and the merge waits for this reader. So while the merge waits
    on a reader it marks the reader urgent: a chunk the reader wants is then granted at once
    (`memory_budget::acquire_now`: counted, past the limit if need be), and a wait for room
    already begun ends granted. While the mark is up every chunk the reader asks for is
    granted; the merge lowers it as soon as it has the item, so what goes past the limit
    is held by items the merge has passed on (until the consumer lets go of them) and by
    what the reader read while marked; it comes back as the consumer moves on.
    `sequence_source` keeps it inside the run's own share of the runtime's budget
    (`sequence_settings::memory_per_sequence`), so the runtime's limit holds.

    @par Thread Safety
    Safe: marked from the merge's thread, read from the readers' lanes.
*/
class read_priority {
public:
    /// True while the consumer waits on this reader alone.
    bool urgent() const noexcept { return urgent_.load(std::memory_order_acquire); }

    /// Marks the reader urgent (waking its waits for memory, each on its own executor) or not.
    void set_urgent(bool on)
    {
        if (!on) {
            urgent_.store(false, std::memory_order_release);
            return;
        }
        std::vector<wake> woken;
        {
            std::lock_guard lk(mu_);
            urgent_.store(true, std::memory_order_release);
            woken.swap(wakes_);
        }
        for (auto& w : woken) asio::post(w.ex, std::move(w.fn));
    }

    /** Calls `fn` on `ex` the next time the reader is marked urgent; returns an id for
        `forget`, or 0 (and keeps nothing) when it is urgent already. */
    std::uint64_t on_urgent(asio::any_io_executor ex, std::function<void()> fn)
    {
        std::lock_guard lk(mu_);
        if (urgent_.load(std::memory_order_acquire)) return 0;
        wakes_.push_back({++next_id_, std::move(ex), std::move(fn)});
        return next_id_;
    }

    /// Drops the call registered as `id` if it has not been made.
    void forget(std::uint64_t id)
    {
        if (id == 0) return;
        std::lock_guard lk(mu_);
        std::erase_if(wakes_, [id](const wake& w) { return w.id == id; });
    }

private:
    struct wake {
        std::uint64_t id;
        asio::any_io_executor ex;
        std::function<void()> fn;
    };
    std::atomic<bool> urgent_{false};
    std::mutex mu_;
    std::uint64_t next_id_ = 0;
    std::vector<wake> wakes_;
};

/// How an object is read in chunks.
struct chunk_options {
    /** Bytes per chunk (the last one may be shorter). Also the pooled buffer size.
        Small enough that the kernel copies into a buffer that is still in cache (for a warm
        local read the copy is most of the cost), large enough that a chunk is worth its
        bookkeeping. A streamed GET is one request whatever the chunk size, so the size costs
        no round trips over the network. */
    std::size_t chunk_size = std::size_t{2} << 20;
    /// Chunks requested ahead of the consumer (prefetch): reads of chunks k+1 … k+n are in
    /// flight while chunk k is being consumed. At least 1.
    unsigned chunks_in_flight = 2;
    /// Where to start (resume, or a ranged read of part of a shard).
    std::uint64_t offset = 0;
    /// How many bytes to read from `offset` at most (the rest of the object by default).
    std::uint64_t length = std::numeric_limits<std::uint64_t>::max();
    /** Take each chunk's bytes from the runtime's memory budget before reading it (given
        back when the chunk's last slice is gone). False: the caller accounts for them. */
    bool use_memory_budget = true;
    /** The budget to take the chunks' bytes from; null: the runtime's. A source that takes
        its readers' share of the runtime's budget in one piece gives them that share here
        (`sequence_lane::chunks`). */
    std::shared_ptr<memory_budget> budget;
    /** Set by a source that merges several readers in a fixed order (`sequence_source`):
        while the merge waits on this reader alone, its chunks do not wait for the budget
        (see `read_priority`). Null: the reader waits for room like any other. */
    std::shared_ptr<read_priority> priority;
};

namespace detail {

/// The budget a chunk reader with options `o` takes its chunks from (`runtime_budget`: its runtime's).
inline memory_budget& chunk_budget(memory_budget& runtime_budget, const chunk_options& o) noexcept
{
    return o.budget ? *o.budget : runtime_budget;
}

/** The memory for a chunk of `bytes`, now, by the rule every chunk reader follows: nothing
    to take when the reader does not use the budget; a lease when the bytes fit and nobody
    waits, or when the reader is urgent (`read_priority`); else nullopt (wait with
    `async_wait_chunk_memory`). */
inline std::optional<memory_lease> chunk_memory_now(memory_budget& runtime_budget, std::size_t bytes, const chunk_options& o)
{
    if (!o.use_memory_budget) return memory_lease{};
    memory_budget& budget = chunk_budget(runtime_budget, o);
    if (auto l = budget.try_acquire(bytes)) return l;
    if (o.priority && o.priority->urgent()) return budget.acquire_now(bytes);
    return std::nullopt;
}

/// What one wait for a chunk's memory shares with the calls that may end it. Touched on
/// the wait's executor only.
struct chunk_memory_wait {
    asio::cancellation_signal signal; // the budget wait's
    bool done = false;                // the wait completed
    bool urged = false;               // ended because the reader became urgent
    std::uint64_t ticket = 0;         // its call registered with the read_priority
};

/** Ends a wait for a chunk's memory because its reader became urgent. The merge marks a
    lane urgent around each take, also when the lane has items ready and the mark lasts an
    instant: a call that finds the mark gone by the time it runs registers again rather
    than granting memory the merge no longer waits for. */
struct chunk_memory_urge {
    std::shared_ptr<chunk_memory_wait> w;
    std::shared_ptr<read_priority> prio;
    asio::any_io_executor ex;

    void operator()() const
    {
        if (w->done) return;
        if (!prio->urgent()) {
            w->ticket = prio->on_urgent(ex, *this);
            if (w->ticket != 0) return; // (0: urgent again meanwhile)
        }
        w->ticket = 0;
        w->urged = true;
        w->signal.emit(asio::cancellation_type::terminal);
    }
};

/** Waits until a chunk of `bytes` fits in `budget`, or until the reader becomes urgent
    (`o.priority`), and completes with its lease (taken past the limit in the second
    case). Cancellation: the handler's slot (completes with `operation_canceled`). The
    handler's executor is where the urgency's wake runs: the reader's lane.
    @par Completion Signature
    `void(std::error_code, memory_lease)` */
template <class Token>
auto async_wait_chunk_memory(memory_budget& runtime_budget, std::size_t bytes, const chunk_options& o, Token&& token)
{
    return asio::async_initiate<Token, void(std::error_code, memory_lease)>(
        [budget_ptr = &chunk_budget(runtime_budget, o), keep = o.budget](auto handler, std::size_t bytes, std::shared_ptr<read_priority> prio) {
            memory_budget& budget = *budget_ptr;
            auto w = std::make_shared<chunk_memory_wait>();
            asio::any_io_executor ex = asio::get_associated_executor(handler);
            auto outer = asio::get_associated_cancellation_slot(handler);
            if (outer.is_connected())
                outer.assign([w](asio::cancellation_type_t t) {
                    if (!w->done) w->signal.emit(t);
                });
            if (prio) {
                w->ticket = prio->on_urgent(ex, chunk_memory_urge{w, prio, ex});
                if (w->ticket == 0) { // urgent already: no wait
                    w->done = true;
                    if (outer.is_connected()) outer.clear();
                    asio::post(ex, [h = std::move(handler), l = budget.acquire_now(bytes)]() mutable {
                        std::move(h)(std::error_code{}, std::move(l));
                    });
                    return;
                }
            }
            budget.async_acquire(
                bytes, asio::bind_cancellation_slot(
                           w->signal.slot(),
                           asio::bind_executor(ex, [w, budget_ptr, keep, bytes, prio, h = std::move(handler)](std::error_code ec,
                                                                                                                 memory_lease l) mutable {
                               w->done = true;
                               if (prio) prio->forget(w->ticket);
                               auto slot = asio::get_associated_cancellation_slot(h);
                               if (slot.is_connected()) slot.clear();
                               if (ec && w->urged) {
                                   ec = {};
                                   l = budget_ptr->acquire_now(bytes);
                               }
                               std::move(h)(ec, std::move(l));
                           })));
        },
        token, bytes, o.priority);
}

} // namespace detail

/** A sequential reader of one object's bytes in chunks, with prefetch and backpressure:
    at most `chunks_in_flight` chunks are read ahead of the consumer, so a slow consumer
    stops the reads and memory stays bounded whatever the object's size.
    Chunks come in order, contiguous, starting at `chunk_options::offset`. A reader is used
    by one coroutine at a time, on one of its runtime's I/O threads; destroying it cancels
    what is in flight.
*/
class chunk_reader {
public:
    virtual ~chunk_reader() = default;

    /** The next chunk, or nullopt after the last one.
        Throws `conveyor::error` naming `url()` and the byte offset when the object cannot
        be read (after the source's own retries).
        @par Completion Signature
        `std::optional<chunk>` */
    [[nodiscard]] virtual asio::awaitable<std::optional<chunk>> async_next() = 0;

    /// The object's full name: a path, `s3://bucket/key` or an `http(s)://` URL.
    virtual const std::string& url() const noexcept = 0;

    /// The object's total size in bytes when known (after the first chunk at the latest),
    /// else -1.
    virtual std::int64_t size() const noexcept = 0;
};

} // namespace conveyor

#endif
