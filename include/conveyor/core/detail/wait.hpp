// conveyor/core/detail/wait.hpp — suspended coroutines and how they are woken: the waiter
// type every channel queues, the batched wake-up, and the suspension that registers one.
#ifndef CONVEYOR_CORE_DETAIL_WAIT_HPP
#define CONVEYOR_CORE_DETAIL_WAIT_HPP

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/error_code.hpp>

#include <array>
#include <cstddef>
#include <utility>
#include <vector>

namespace conveyor::detail {

namespace asio = boost::asio;

/// A suspended coroutine: its completion handler and the executor it resumes on.
struct wait_handler {
    wait_handler(asio::any_io_executor e, asio::any_completion_handler<void(boost::system::error_code)> r)
        : ex(std::move(e)), resume(std::move(r))
    {
    }
    // Move-only, explicitly: a copy would make any_completion_handler wrap itself.
    wait_handler(wait_handler&&) noexcept = default;
    // Boost 1.81's any_completion_handler move assignment copies its argument as an lvalue,
    // which wraps the handler in itself without end; move-construct and swap instead.
    wait_handler& operator=(wait_handler&& o) noexcept
    {
        ex = std::move(o.ex);
        asio::any_completion_handler<void(boost::system::error_code)> taken(std::move(o.resume));
        resume.swap(taken);
        return *this;
    }
    wait_handler(const wait_handler&) = delete;
    wait_handler& operator=(const wait_handler&) = delete;

    asio::any_io_executor ex;
    asio::any_completion_handler<void(boost::system::error_code)> resume;
};

/// Resumes a waiting coroutine on its own executor (never inline: no recursion, no lock held).
inline void wake(wait_handler w)
{
    asio::post(w.ex, [h = std::move(w.resume)]() mutable { std::move(h)(boost::system::error_code{}); });
}

/* Resumes waiting coroutines (`woken`, moved from), each on its own executor: one post per
   executor for all of its waiters, resumed there in the order given, as separate posts
   would be. A consumer that frees room for many senders at once (a file source's workers
   on two lanes) pays two posts, not one per sender: each post is an allocation, a lock of
   the lane's queue and a type-erased call.
   Waiters are grouped by executor among the first few distinct ones; the rest (strands,
   say, each its own executor) are posted one by one. */
inline void wake_all(std::vector<wait_handler>& woken)
{
    if (woken.size() == 1) { // the usual case of a receiver woken for an item: nothing to group
        wake(std::move(woken.front()));
        woken.clear();
        return;
    }
    using resume_handler = asio::any_completion_handler<void(boost::system::error_code)>;
    // Resumes a batch in order. Should one throw, the rest are still resumed (posted).
    struct resume_batch {
        asio::any_io_executor ex;
        std::vector<resume_handler> handlers;
        void operator()()
        {
            std::size_t i = 0;
            try {
                for (; i < handlers.size(); ++i) std::move(handlers[i])(boost::system::error_code{});
            } catch (...) {
                for (++i; i < handlers.size(); ++i) wake(wait_handler{ex, std::move(handlers[i])});
                throw;
            }
        }
    };
    constexpr std::size_t max_groups = 4;
    std::size_t groups = 0;
    std::array<resume_batch, max_groups> batch;
    for (auto& w : woken) {
        std::size_t g = 0;
        while (g < groups && batch[g].ex != w.ex) ++g;
        if (g == groups) {
            if (groups == max_groups) {
                wake(std::move(w));
                continue;
            }
            batch[g].ex = w.ex;
            ++groups;
        }
        batch[g].handlers.push_back(std::move(w.resume));
    }
    woken.clear();
    for (std::size_t g = 0; g < groups; ++g) {
        auto& b = batch[g];
        if (b.handlers.size() == 1) {
            wake(wait_handler{std::move(b.ex), std::move(b.handlers.front())});
        } else {
            asio::any_io_executor ex = b.ex;
            asio::post(ex, std::move(b));
        }
    }
}

/// Suspends the calling coroutine until `reg` wakes or stores the waiter it is given.
template <class Register>
asio::awaitable<void> suspend_with(Register reg)
{
    co_await asio::async_initiate<const asio::use_awaitable_t<>&, void(boost::system::error_code)>(
        [&reg](auto handler) {
            asio::any_io_executor ex = asio::get_associated_executor(handler);
            reg(wait_handler{std::move(ex), std::move(handler)});
        },
        asio::use_awaitable);
}
} // namespace conveyor::detail

#endif
