// conveyor/core/detail/offload.hpp — running blocking or CPU work on a thread pool from a coroutine.
#ifndef CONVEYOR_CORE_DETAIL_OFFLOAD_HPP
#define CONVEYOR_CORE_DETAIL_OFFLOAD_HPP

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>

namespace conveyor::detail {

namespace asio = boost::asio;

/** Runs `f()` on `ex` (a thread pool) and resumes the awaiting coroutine on its own
    executor with the result, or the exception `f` threw.
    @par Completion Signature
    `std::invoke_result_t<F&>` */
template <class Executor, class F>
auto offload(Executor ex, F f) -> asio::awaitable<std::invoke_result_t<F&>>
{
    using R = std::invoke_result_t<F&>;
    using value = std::conditional_t<std::is_void_v<R>, bool, R>;
    auto [ep, r] = co_await asio::async_initiate<const asio::use_awaitable_t<>&, void(std::tuple<std::exception_ptr, std::optional<value>>)>(
        [&f, ex](auto handler) {
            asio::any_io_executor back = asio::get_associated_executor(handler);
            asio::post(ex, [f = std::move(f), h = std::move(handler), back]() mutable {
                std::exception_ptr ep;
                std::optional<value> r;
                try {
                    if constexpr (std::is_void_v<R>) {
                        f();
                        r.emplace(true);
                    } else {
                        r.emplace(f());
                    }
                } catch (...) {
                    ep = std::current_exception();
                }
                // Moved, not copied: the exception is released where it is consumed, not
                // raced between the pool thread and the awaiting one.
                asio::post(back, [h = std::move(h), ep = std::move(ep), r = std::move(r)]() mutable {
                    std::move(h)(std::tuple<std::exception_ptr, std::optional<value>>(std::move(ep), std::move(r)));
                });
            });
        },
        asio::use_awaitable);
    if (ep) std::rethrow_exception(ep);
    if constexpr (!std::is_void_v<R>) co_return std::move(*r);
}

/** Like `offload`, for blocking calls that may never return (a read on a hung network
    mount): a cancellation of the operation (Asio's per-operation cancellation, e.g. the run
    being stopped or a deadline) completes it at once with an `operation_canceled`
    `system_error` and leaves `f` to finish on its own, its result dropped. `f` must
    therefore own everything it uses: capture by value, never a reference into the caller.
    `f`'s result type must be default-constructible.

    Not a coroutine on purpose: GCC 12 destroys a closure passed by value to a coroutine
    twice, which a closure owning strings or pointers does not survive.
    @par Completion Signature
    `void(std::exception_ptr, std::invoke_result_t<F&>)` */
template <class Executor, class F, class Token>
auto async_offload_abandonable(Executor ex, F f, Token&& token)
{
    using R = std::invoke_result_t<F&>;
    return asio::async_initiate<Token, void(std::exception_ptr, R)>(
        [](auto handler, Executor ex, F f) {
            using handler_type = decltype(handler);
            // Whoever comes first (the call's result, or a cancellation) takes the handler.
            struct state {
                std::mutex mu;
                std::optional<handler_type> h;
            };
            auto st = std::make_shared<state>();
            asio::any_io_executor back = asio::get_associated_executor(handler);
            auto slot = asio::get_associated_cancellation_slot(handler);
            st->h.emplace(std::move(handler));
            // Hands the outcome to the handler on its own executor, unless someone already
            // did. Moved, not copied: an exception is released where it is consumed.
            auto deliver = [st, back](std::exception_ptr e, R r) {
                std::optional<handler_type> h;
                {
                    std::lock_guard lk(st->mu);
                    if (st->h) {
                        h.emplace(std::move(*st->h));
                        st->h.reset();
                    }
                }
                if (!h) return;
                asio::post(back, [h = std::move(*h), e = std::move(e), r = std::move(r)]() mutable {
                    auto s = asio::get_associated_cancellation_slot(h);
                    if (s.is_connected()) s.clear();
                    std::move(h)(std::move(e), std::move(r));
                });
            };
            if (slot.is_connected())
                slot.assign([deliver](asio::cancellation_type_t type) {
                    if (type == asio::cancellation_type::none) return;
                    deliver(std::make_exception_ptr(std::system_error(std::make_error_code(std::errc::operation_canceled))), R{});
                });
            asio::post(ex, [f = std::move(f), deliver]() mutable {
                std::exception_ptr e;
                R r{};
                try {
                    r = f();
                } catch (...) {
                    e = std::current_exception();
                }
                deliver(std::move(e), std::move(r));
            });
        },
        token, std::move(ex), std::move(f));
}

} // namespace conveyor::detail

#endif
