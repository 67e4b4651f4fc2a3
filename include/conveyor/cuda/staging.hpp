// conveyor/cuda/staging.hpp — the to_cuda stage: batches copied to the GPU asynchronously,
// through a ring of device buffers, while the CPU prepares the next ones.
#ifndef CONVEYOR_CUDA_STAGING_HPP
#define CONVEYOR_CUDA_STAGING_HPP

#include <conveyor/core/memory_budget.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/cuda/device.hpp>
#include <conveyor/cuda/error.hpp>
#include <conveyor/detail/config.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

// The CUDA runtime's handle types (cudaStream_t and cudaEvent_t are pointers to these), so
// that this header does not need cuda_runtime_api.h.
struct CUstream_st;
struct CUevent_st;

namespace conveyor::cuda {

/// An element type, as DLPack writes it: a type code (0 int, 1 uint, 2 float, 4 bfloat)
/// and its bits. An image batch's tensors get theirs from `image::dtype_table`.
struct element_type {
    std::uint8_t code = 1;
    std::uint8_t bits = 8;
    friend bool operator==(const element_type&, const element_type&) = default;
};

/// A contiguous tensor in host memory, to be copied to the device.
struct host_tensor {
    const void* data = nullptr;
    std::size_t bytes = 0;
    std::vector<std::int64_t> shape; ///< row-major, contiguous
    element_type type{};
};

/// A contiguous tensor in device memory: the copy of a `host_tensor`.
struct device_tensor {
    void* data = nullptr;
    std::size_t bytes = 0;
    std::vector<std::int64_t> shape;
    element_type type{};
    int device = 0;
};

/// Settings of `to_cuda`.
struct staging_options {
    /// The CUDA device to copy to.
    int device = 0;
    /// The stream the copies go on; null: the stage makes a non-blocking stream of its own.
    CUstream_st* stream = nullptr;
    /// Sets of device buffers: batches being copied plus batches the consumer holds. When
    /// all are in use the stage waits (backpressure) for the consumer to drop one.
    std::size_t ring = 3;
    /// Device batches waiting for the consumer.
    std::size_t capacity = 1;
};

namespace detail {

/// The shared state of one `to_cuda` stage's run: its stream, its device buffers and
/// their events, and the semaphore of free buffer sets. Device memory is taken on first
/// use and grown when a larger batch comes; all of it is freed when the last batch that
/// uses it and the stage are gone.
class staging_ring : public std::enable_shared_from_this<staging_ring> {
public:
    CONVEYOR_DECL explicit staging_ring(const staging_options& o);
    CONVEYOR_DECL ~staging_ring();
    staging_ring(const staging_ring&) = delete;
    staging_ring& operator=(const staging_ring&) = delete;

    /// Waits for a free set of buffers (without blocking a thread) and takes it.
    asio::awaitable<std::size_t> async_acquire()
    {
        auto [ec, lease] = co_await free_.async_acquire(1, asio::as_tuple(asio::use_awaitable));
        if (ec) throw conveyor::error(ec, {.stage = "to_cuda", .detail = "waiting for a free device buffer"});
        co_return take(std::move(lease));
    }

    /** Enqueues the copies of `views` into buffer set `s` on the stream (after the work
        that used the set before, if its last holder said when that ends), records the
        set's `ready` event after them, and returns the device tensors. */
    CONVEYOR_DECL std::vector<device_tensor> copy(std::size_t s, const std::vector<host_tensor>& views);

    /** The device buffers of set `s`, grown to hold tensors of `views`' sizes (their data
        is not read), for work that writes them itself on the stream (the GPU decoder);
        the stream first waits for the set's previous holder. Call `record_ready(s)` after
        that work is enqueued. */
    CONVEYOR_DECL std::vector<device_tensor> prepare(std::size_t s, const std::vector<host_tensor>& views);

    /// Records set `s`'s `ready` event on the stream, after the work enqueued so far.
    CONVEYOR_DECL void record_ready(std::size_t s);

    /// Calls `f` on a CUDA thread once everything enqueued so far on the stream is done
    /// (`cudaLaunchHostFunc`: the stream waits for `f` to return). `f` must not call CUDA.
    CONVEYOR_DECL void when_done(std::function<void()> f);

    /// The event recorded after set `s`'s copies.
    CONVEYOR_DECL CUevent_st* ready(std::size_t s) const noexcept;
    CUstream_st* stream() const noexcept { return stream_; }
    int device() const noexcept { return device_; }

    /** Gives set `s` back. Work queued before this call on `consumer` (or, when null, on
        the legacy default stream, which waits for every blocking stream: PyTorch's
        default stream included) finishes before the next copy into the set.

        `keep` holds what the set's copies read (the host batch): it is destroyed here if
        they are done (`ready(s)` has happened: the consumer waited for them, as it must
        before using the tensors), else called on a CUDA thread once they are (see
        `when_done`). So a copy costs no host function on the stream unless its batch is
        dropped unread. */
    CONVEYOR_DECL void release(std::size_t s, CUstream_st* consumer, std::function<void()> keep = {}) noexcept;

    /// Sets given back so far (for tests).
    CONVEYOR_DECL std::size_t releases() const noexcept;

private:
    struct buffer_set {
        std::vector<void*> buffers;
        std::vector<std::size_t> capacity;
        CUevent_st* ready = nullptr;
        CUevent_st* released = nullptr;
        bool wait_for_release = false;
        memory_lease lease; // held while the set is out
    };
    CONVEYOR_DECL std::size_t take(memory_lease lease);

    int device_;
    CUstream_st* stream_ = nullptr;
    bool own_stream_ = false;
    memory_budget free_;
    mutable std::mutex mu_;
    std::vector<buffer_set> sets_;
    std::vector<std::size_t> free_sets_;
    std::size_t releases_ = 0;
};

template <class T>
struct device_batch_access;

} // namespace detail

/** A batch on the device: the host batch it was copied from (its labels, keys and other
    fields stay readable), the device copies of its tensors, and the event to wait on
    before using them. Holding it holds its device buffers; dropping it gives them back to
    the stage's ring.

    The copies are asynchronous: before GPU work reads the tensors, make its stream wait
    for `ready()` (`cudaStreamWaitEvent`), or call `synchronize()` on the host. When it is
    dropped, the buffers are reused only after the work then queued on the stream given to
    `done_on()` (default: the legacy default stream) is done.

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe.
*/
template <class T>
class device_batch {
public:
    device_batch() = default;
    device_batch(device_batch&&) noexcept = default;
    device_batch& operator=(device_batch&&) noexcept = default;

    /// The host batch the tensors were copied from.
    const T& host() const noexcept { return *host_; }
    /// The device tensors, in the order `staging_view` gave the host ones.
    const std::vector<device_tensor>& tensors() const noexcept { return tensors_; }
    /// Recorded on the stage's stream after the copies.
    CUevent_st* ready() const noexcept { return state_ ? state_->ring->ready(state_->set) : nullptr; }
    /// The stream the copies were made on.
    CUstream_st* stream() const noexcept { return state_ ? state_->ring->stream() : nullptr; }
    int device() const noexcept { return state_ ? state_->ring->device() : 0; }
    /// Blocks the calling thread until the copies are done.
    void synchronize() const;
    /// Says which stream the work that reads these tensors runs on: when the batch is
    /// dropped, the buffers wait for that stream's work queued by then.
    void done_on(CUstream_st* consumer) noexcept
    {
        if (state_) state_->consumer = consumer;
    }

    /** The batch's shared ownership, for holders that know nothing of device batches (a
        DLPack deleter): the host batch and the device buffers stay taken while any of
        these lives, as if the batch itself were still held. */
    std::shared_ptr<const void> owner() const
    {
        using both = std::pair<std::shared_ptr<const T>, std::shared_ptr<lease>>;
        return std::make_shared<const both>(host_, state_);
    }

private:
    friend struct detail::device_batch_access<T>;
    struct lease {
        std::shared_ptr<detail::staging_ring> ring;
        std::size_t set = 0;
        CUstream_st* consumer = nullptr;
        std::function<void()> keep; // the host batch, until the copies are done
        ~lease()
        {
            if (ring) ring->release(set, consumer, std::move(keep));
        }
    };
    std::shared_ptr<const T> host_;
    std::vector<device_tensor> tensors_;
    std::shared_ptr<lease> state_;
};

/** The host tensors of batch `b` that `to_cuda` copies: a customization point found by
    argument-dependent lookup, `std::vector<host_tensor> staging_view(const T&)`. Image
    batches provide it (images and labels); give your own batch type one to stage it. */
template <class T>
concept stageable = requires(const T& b) {
    { staging_view(b) } -> std::convertible_to<std::vector<host_tensor>>;
};

/// The `to_cuda` stage; see `conveyor::cuda::to_cuda`.
class to_cuda_stage {
public:
    explicit to_cuda_stage(staging_options o) : o_(o)
    {
        if (o_.ring == 0)
            throw conveyor::error(make_error_code(errc::bad_options), {.stage = "to_cuda", .detail = "ring must be at least 1"});
    }

    template <stageable T>
    stream<device_batch<T>> operator()(const std::shared_ptr<run_context>& ctx, stream<T> in) const;

private:
    staging_options o_;
};

/** Copies each batch to device `o.device`: a stage taking batches (anything `stageable`)
    and giving `device_batch`es. The copies are `cudaMemcpyAsync` on one stream (the
    stage's own, or `o.stream`), up to `o.ring` batches in flight or held downstream; the
    stage never blocks a thread: it waits for free device buffers as a coroutine, and learns
    that a copy is done from a host function the stream calls (`cudaLaunchHostFunc`), which
    posts the host batch's release to the stage's executor. Copies from pinned memory (batch
    slabs made with `allocate_pinned`) overlap the CPU's work; from pageable memory they
    are staged by the driver and overlap less.

    The stream and buffers are set up when a run starts; a run on a machine without a usable
    device fails at once with `errc::no_device`, saying why.

    @code
    auto pipe = conveyor::shard::shards(list).on(rt)
              | conveyor::image::decode_batches({}, {.size = 256})
              | conveyor::cuda::to_cuda({.device = 0});
    for (auto& b : pipe) {
        cudaStreamWaitEvent(my_stream, b.ready(), 0);
        train_step(b.tensors()[0], b.tensors()[1], my_stream);
        b.done_on(my_stream);
    }
    @endcode */
inline to_cuda_stage to_cuda(staging_options o = {})
{
    return to_cuda_stage(o);
}

} // namespace conveyor::cuda

#include <conveyor/cuda/impl/staging.hpp>

#if CONVEYOR_HEADER_ONLY
#include <conveyor/cuda/impl/staging.ipp>
#endif

#endif
