// conveyor/core/detail/run_all.hpp — run N coroutines as one, the first failure stopping the rest.
#ifndef CONVEYOR_CORE_DETAIL_RUN_ALL_HPP
#define CONVEYOR_CORE_DETAIL_RUN_ALL_HPP

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/channel.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <cstddef>
#include <exception>
#include <vector>

namespace conveyor::detail {

namespace asio = boost::asio;

// Runs `n` coroutines made by `make(i)` on the current executor, waits for all of them,
// and rethrows the first exception. If the caller is cancelled, every one of them is
// cancelled too (and still waited for: they may refer to the caller's frame).
template <class Make>
asio::awaitable<void> run_all(std::size_t n, Make make)
{
    if (n == 0) co_return;
    auto ex = co_await asio::this_coro::executor;
    // Cancellation is handled here (passed on to every child, then waited out), so it must
    // not throw out of the wait. The setting belongs to the whole coroutine stack: restore it.
    const bool threw_if_cancelled = co_await asio::this_coro::throw_if_cancelled();
    co_await asio::this_coro::throw_if_cancelled(false);
    std::vector<asio::cancellation_signal> signals(n);
    asio::experimental::channel<void(boost::system::error_code)> done(ex, n);
    std::exception_ptr first;
    for (std::size_t i = 0; i < n; ++i) {
        asio::co_spawn(ex, make(i), asio::bind_cancellation_slot(signals[i].slot(), [&first, &done](std::exception_ptr e) {
                           if (e && !first) first = e;
                           done.try_send(boost::system::error_code{});
                       }));
    }
    bool cancelled = false;
    for (std::size_t left = n; left > 0;) {
        auto [ec] = co_await done.async_receive(asio::as_tuple(asio::use_awaitable));
        if (ec) {
            if (!cancelled) {
                cancelled = true;
                for (auto& s : signals) s.emit(asio::cancellation_type::terminal);
            }
            co_await asio::this_coro::reset_cancellation_state();
            continue;
        }
        --left;
        // One failure dooms the whole: stop the others early.
        if (first && !cancelled) {
            cancelled = true;
            for (auto& s : signals) s.emit(asio::cancellation_type::terminal);
        }
    }
    co_await asio::this_coro::throw_if_cancelled(threw_if_cancelled);
    if (first) std::rethrow_exception(first);
    if (cancelled) throw boost::system::system_error(asio::error::operation_aborted);
}

} // namespace conveyor::detail

#endif
