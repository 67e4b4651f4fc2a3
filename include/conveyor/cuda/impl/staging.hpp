// conveyor/cuda/impl/staging.hpp — the templates of the to_cuda stage.
#ifndef CONVEYOR_CUDA_IMPL_STAGING_HPP
#define CONVEYOR_CUDA_IMPL_STAGING_HPP

#include <conveyor/cuda/staging.hpp>

#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>

namespace conveyor::cuda {

namespace detail {

/// Blocks until event `e` has happened.
CONVEYOR_DECL void synchronize_event(CUevent_st* e);

/// Makes device batches (their members are private to everyone else).
template <class T>
struct device_batch_access {
    static device_batch<T> make(std::shared_ptr<const T> host, std::vector<device_tensor> tensors,
                                std::shared_ptr<staging_ring> ring, std::size_t set, std::function<void()> keep)
    {
        device_batch<T> b;
        b.host_ = std::move(host);
        b.tensors_ = std::move(tensors);
        b.state_ = std::make_shared<typename device_batch<T>::lease>();
        b.state_->ring = std::move(ring);
        b.state_->set = set;
        b.state_->keep = std::move(keep);
        return b;
    }
};

/// Keeps a host batch alive until the stream has read it. Dropped where its device batch
/// is given back when the copies are done by then (the usual case); otherwise called on a
/// CUDA thread once they are, and it hands the release to the stage's executor (the
/// batch's memory may go back to a pool that frees pinned memory: no CUDA call there).
template <class T>
struct host_keepalive {
    std::shared_ptr<const T> host;
    asio::any_io_executor ex;
    void operator()()
    {
        asio::post(ex, [h = std::move(host)]() mutable { h.reset(); });
    }
};

} // namespace detail

template <class T>
void device_batch<T>::synchronize() const
{
    if (state_) detail::synchronize_event(ready());
}

template <stageable T>
stream<device_batch<T>> to_cuda_stage::operator()(const std::shared_ptr<run_context>& ctx, stream<T> in) const
{
    return make_stream<device_batch<T>>(
        ctx, "to_cuda", o_.capacity,
        [in, o = o_](sink<device_batch<T>>& out) mutable -> asio::awaitable<void> {
            // Made here, on the run's thread: a machine without a device fails the run now.
            auto ring = std::make_shared<detail::staging_ring>(o);
            const asio::any_io_executor ex = co_await asio::this_coro::executor;
            std::vector<T> got;
            while (co_await in.async_next_batch(got, 1)) {
                for (auto& x : got) {
                    const std::size_t set = co_await ring->async_acquire();
                    auto host = std::make_shared<const T>(std::move(x));
                    std::vector<device_tensor> tensors;
                    try {
                        tensors = ring->copy(set, staging_view(*host));
                    } catch (...) {
                        // Some copies may be queued: the batch stays until the stream is past them.
                        try {
                            ring->when_done(detail::host_keepalive<T>{host, ex});
                        } catch (...) {
                            // The device failed: nothing of it reads the batch any more.
                        }
                        ring->release(set, nullptr);
                        throw;
                    }
                    auto b = detail::device_batch_access<T>::make(host, std::move(tensors), ring, set,
                                                                  detail::host_keepalive<T>{host, ex});
                    if (!co_await out.send(std::move(b))) {
                        in.close();
                        co_return;
                    }
                }
                got.clear();
            }
        });
}

} // namespace conveyor::cuda

#endif
