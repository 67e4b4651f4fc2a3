// conveyor/cuda/impl/staging.ipp — the to_cuda stage's ring of device buffers.
#ifndef CONVEYOR_CUDA_IMPL_STAGING_IPP
#define CONVEYOR_CUDA_IMPL_STAGING_IPP

#include <conveyor/cuda/staging.hpp>

#include <cuda_runtime_api.h>

#include <string>

namespace conveyor::cuda {

namespace detail {

/// Makes `device` current on the calling thread for the life of this object, then puts
/// back what was current before (the thread may be the user's own).
struct device_scope {
    int previous = -1;
    explicit device_scope(int device)
    {
        if (cudaGetDevice(&previous) != cudaSuccess) {
            (void)cudaGetLastError();
            previous = -1;
        }
        if (previous != device) check(cudaSetDevice(device), ("cudaSetDevice(" + std::to_string(device) + ")").c_str());
    }
    ~device_scope()
    {
        int now = -1;
        if (previous >= 0 && cudaGetDevice(&now) == cudaSuccess && now != previous) (void)cudaSetDevice(previous);
    }
    device_scope(const device_scope&) = delete;
    device_scope& operator=(const device_scope&) = delete;
};

/// The host function cudaLaunchHostFunc calls: its argument is what to call once the
/// stream got there.
inline void CUDART_CB run_host_function(void* p)
{
    auto* f = static_cast<std::function<void()>*>(p);
    (*f)();
    delete f;
}

CONVEYOR_DECL void synchronize_event(CUevent_st* e)
{
    if (e) check(cudaEventSynchronize(e), "cudaEventSynchronize");
}

CONVEYOR_DECL staging_ring::staging_ring(const staging_options& o)
    : device_(o.device), stream_(o.stream), free_(o.ring ? o.ring : 1)
{
    const availability a = devices();
    if (a.devices == 0)
        throw conveyor::error(make_error_code(errc::no_device), {.stage = "to_cuda", .detail = a.reason});
    if (o.device < 0 || o.device >= a.devices)
        throw conveyor::error(make_error_code(errc::bad_options),
                              {.stage = "to_cuda", .detail = "device " + std::to_string(o.device) + " asked for; this machine has " +
                                                             std::to_string(a.devices)});
    device_scope on(device_);
    if (!stream_) {
        cudaStream_t s = nullptr;
        check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
        stream_ = s;
        own_stream_ = true;
    }
    sets_.resize(o.ring ? o.ring : 1);
    for (std::size_t i = 0; i < sets_.size(); ++i) {
        cudaEvent_t e = nullptr;
        check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
        sets_[i].ready = e;
        check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
        sets_[i].released = e;
        free_sets_.push_back(sets_.size() - 1 - i);
    }
}

CONVEYOR_DECL staging_ring::~staging_ring()
{
    try {
        device_scope on(device_);
        (void)cudaStreamSynchronize(stream_); // nothing of ours may still be in flight
        for (auto& s : sets_) {
            for (void* b : s.buffers) (void)cudaFree(b);
            if (s.ready) (void)cudaEventDestroy(s.ready);
            if (s.released) (void)cudaEventDestroy(s.released);
        }
        if (own_stream_) (void)cudaStreamDestroy(stream_);
    } catch (...) {
        // A device that went away: what it held went with it.
    }
}

CONVEYOR_DECL std::size_t staging_ring::take(memory_lease lease)
{
    std::lock_guard lk(mu_);
    const std::size_t s = free_sets_.back();
    free_sets_.pop_back();
    sets_[s].lease = std::move(lease);
    return s;
}

CONVEYOR_DECL std::vector<device_tensor> staging_ring::prepare(std::size_t s, const std::vector<host_tensor>& views)
{
    device_scope on(device_);
    buffer_set& set = sets_[s];
    if (set.wait_for_release) {
        // The previous holder's work (on its stream) must be done before we overwrite.
        check(cudaStreamWaitEvent(stream_, set.released, 0), "cudaStreamWaitEvent");
        set.wait_for_release = false;
    }
    std::vector<device_tensor> out;
    out.reserve(views.size());
    set.buffers.resize(std::max(set.buffers.size(), views.size()), nullptr);
    set.capacity.resize(set.buffers.size(), 0);
    for (std::size_t i = 0; i < views.size(); ++i) {
        const host_tensor& v = views[i];
        if (set.capacity[i] < v.bytes) {
            // Grown buffers: the old one may still be read by work queued before; wait for it.
            if (set.buffers[i]) {
                check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
                (void)cudaFree(set.buffers[i]);
                set.buffers[i] = nullptr;
                set.capacity[i] = 0;
            }
            void* p = nullptr;
            check(cudaMalloc(&p, v.bytes), ("cudaMalloc of " + std::to_string(v.bytes) + " bytes").c_str());
            set.buffers[i] = p;
            set.capacity[i] = v.bytes;
        }
        out.push_back({set.buffers[i], v.bytes, v.shape, v.type, device_});
    }
    return out;
}

CONVEYOR_DECL void staging_ring::record_ready(std::size_t s)
{
    device_scope on(device_);
    check(cudaEventRecord(sets_[s].ready, stream_), "cudaEventRecord");
}

CONVEYOR_DECL std::vector<device_tensor> staging_ring::copy(std::size_t s, const std::vector<host_tensor>& views)
{
    std::vector<device_tensor> out = prepare(s, views);
    device_scope on(device_);
    for (std::size_t i = 0; i < views.size(); ++i) {
        const host_tensor& v = views[i];
        if (v.bytes)
            check(cudaMemcpyAsync(out[i].data, v.data, v.bytes, cudaMemcpyHostToDevice, stream_),
                  ("cudaMemcpyAsync of " + std::to_string(v.bytes) + " bytes to device " + std::to_string(device_)).c_str());
    }
    record_ready(s);
    return out;
}

CONVEYOR_DECL void staging_ring::when_done(std::function<void()> f)
{
    device_scope on(device_);
    auto* arg = new std::function<void()>(std::move(f));
    const cudaError_t s = cudaLaunchHostFunc(stream_, &run_host_function, arg);
    if (s != cudaSuccess) {
        delete arg;
        throw_cuda(s, "cudaLaunchHostFunc");
    }
}

CONVEYOR_DECL CUevent_st* staging_ring::ready(std::size_t s) const noexcept
{
    return sets_[s].ready;
}

CONVEYOR_DECL void staging_ring::release(std::size_t s, CUstream_st* consumer, std::function<void()> keep) noexcept
{
    if (keep) {
        // The set is still ours: its ready event is the last copy's.
        try {
            device_scope on(device_);
            if (cudaEventQuery(sets_[s].ready) != cudaSuccess) when_done(std::move(keep));
        } catch (...) {
            // A device that failed reads nothing any more: `keep` goes below.
        }
    }
    memory_lease lease;
    {
        std::lock_guard lk(mu_);
        buffer_set& set = sets_[s];
        try {
            device_scope on(device_);
            // Null is the legacy default stream: it waits for all work on blocking streams.
            set.wait_for_release = cudaEventRecord(set.released, consumer) == cudaSuccess;
            if (!set.wait_for_release) (void)cudaGetLastError();
        } catch (...) {
            set.wait_for_release = false;
        }
        lease = std::move(set.lease);
        free_sets_.push_back(s);
        ++releases_;
    }
    // The lease goes last, outside the lock: a waiting acquire may run at once. `keep`
    // (the host batch, when its copies are done) goes with it.
}

CONVEYOR_DECL std::size_t staging_ring::releases() const noexcept
{
    std::lock_guard lk(mu_);
    return releases_;
}

} // namespace detail

} // namespace conveyor::cuda

#endif
