// conveyor/core/run_context.hpp — one run of a pipeline: its tasks, channels, errors, stats.
#ifndef CONVEYOR_CORE_RUN_CONTEXT_HPP
#define CONVEYOR_CORE_RUN_CONTEXT_HPP

#include <conveyor/core/channel.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/runtime.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <tuple>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <vector>

namespace conveyor {

namespace detail {

/// The key of an item, for error messages: `x.key` if it has one, else empty.
template <class T>
std::string item_key(const T& x)
{
    if constexpr (requires { std::string(x.key); }) return std::string(x.key);
    else return {};
}

/// A system_error's `what()` as a detail: empty when it says no more than the code's
/// message; else up to and including that message ("GET /b/k: Connection reset by peer"),
/// without what Boost appends after it (" [system:104 at file:line]").
inline std::string what_arg_of(std::string_view what, std::string_view message)
{
    const auto pos = message.empty() ? std::string_view::npos : what.find(message);
    if (pos == 0) return {};
    if (pos == std::string_view::npos) return std::string(what);
    return std::string(what.substr(0, pos + message.size()));
}

/// Rethrows `e` as a `conveyor::error` that names `stage` and `key` (unless it already
/// names a stage), keeping the original as the nested exception.
inline std::exception_ptr with_context(std::exception_ptr e, std::string_view stage, std::string_view key)
{
    auto make = [&](std::error_code ec, error::context c) {
        if (c.stage.empty()) c.stage = stage;
        if (c.key.empty()) c.key = key;
        try {
            std::throw_with_nested(error(ec, std::move(c)));
        } catch (...) {
            return std::current_exception();
        }
    };
    try {
        std::rethrow_exception(e);
    } catch (const error& x) {
        if (!x.stage().empty()) return e;
        return make(x.code(), x.ctx());
    } catch (const boost::system::system_error& x) {
        return make(static_cast<std::error_code>(x.code()), {.detail = what_arg_of(x.what(), x.code().message())});
    } catch (const std::system_error& x) {
        return make(x.code(), {.detail = what_arg_of(x.what(), x.code().message())});
    } catch (const std::exception& x) {
        return make(make_error_code(errc::stage_failed), {.detail = x.what()});
    } catch (...) {
        return make(make_error_code(errc::stage_failed), {.detail = "unknown exception"});
    }
}

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

} // namespace detail

/// Counters of one run, readable while it runs.
struct run_stats {
    std::atomic<std::uint64_t> skipped{0}; ///< items dropped under `on_error::skip`
};

/// What a source or stage does with bad input.
enum class on_error {
    fail, ///< end the pipeline; the consumer's iteration throws
    skip, ///< drop the item, count it and log it (the first few in full)
};

/** One run of a pipeline: the tasks it spawned, the channels between them, its first
    error and its counters. Stages receive it when the pipeline is built.

    A failure anywhere records the first error (with the stage and item that failed),
    hands it to the sink channel for the consumer to throw, and cancels everything else.
    `cancel()` (the consumer went away) stops every task: channels wake their waiters and
    each task's pending asynchronous operation gets a terminal cancellation.

    @par Thread Safety
    Safe.
*/
class run_context : public std::enable_shared_from_this<run_context> {
public:
    run_context(runtime& rt, std::uint64_t epoch)
        : rt_(&rt), home_(rt.next_io_executor()), epoch_(epoch)
    {
    }
    ~run_context()
    {
        if (auto* r = rt_.load()) r->detach(this);
    }

    run_context(const run_context&) = delete;
    run_context& operator=(const run_context&) = delete;

    /// The runtime this run uses. Only valid while the runtime lives: a run whose runtime
    /// was destroyed is cancelled and never calls it again.
    runtime& rt() noexcept { return *rt_.load(); }
    /// The I/O executor this run's stage coroutines share.
    runtime::io_executor_type executor() const noexcept { return home_; }
    /// The epoch this run belongs to (shuffles mix it into their seed).
    std::uint64_t epoch() const noexcept { return epoch_; }
    run_stats& stats() noexcept { return stats_; }

    /// A new channel that this run cancels when it stops.
    template <class T>
    std::shared_ptr<detail::channel<T>> make_channel(std::size_t capacity)
    {
        auto ch = std::make_shared<detail::channel<T>>(capacity);
        std::lock_guard lk(mu_);
        channels_.push_back(ch);
        if (stopping_) ch->cancel();
        return ch;
    }

    /// Marks `ch` as the channel the consumer reads: errors go there.
    void set_sink(std::shared_ptr<detail::channel_base> ch)
    {
        std::lock_guard lk(mu_);
        sink_ = std::move(ch);
    }

    /// Runs `task` on `ex`, tracked: its exception fails the run (naming `stage`),
    /// `wait_idle()` waits for it, and `cancel()` delivers a terminal Asio cancellation to
    /// whatever it is awaiting (a timer, a socket, a user's coroutine).
    template <class Executor>
    void spawn(const Executor& ex, asio::awaitable<void> task, std::string stage)
    {
        // The signal lives as long as the run, never shorter than the task bound to it:
        // destroying a signal while its operation runs is undefined.
        auto sig = std::make_shared<task_signal>();
        bool cancel_now;
        {
            std::lock_guard lk(mu_);
            ++active_;
            signals_.push_back({asio::any_io_executor(ex), sig});
            cancel_now = stopping_;
        }
        asio::co_spawn(ex, started(sig, std::move(task)),
                       asio::bind_cancellation_slot(sig->signal.slot(), [self = shared_from_this(), stage = std::move(stage)](std::exception_ptr e) {
                           if (e) self->fail(e, stage);
                           self->task_done();
                       }));
        if (cancel_now) asio::post(ex, [sig] { sig->cancel(); });
    }

    /** Registers `fn` to run on `ex` when the run is cancelled (at once, if it already is).
        I/O operations use this to cancel what is in flight (an io_uring cancel, closing a
        socket). Returns an id for `remove_on_cancel`. */
    template <class Executor>
    std::uint64_t on_cancel(const Executor& ex, std::function<void()> fn)
    {
        std::unique_lock lk(mu_);
        if (stopping_) {
            lk.unlock();
            asio::post(ex, std::move(fn));
            return 0;
        }
        const auto id = ++next_hook_;
        hooks_.push_back({id, asio::any_io_executor(ex), std::move(fn)});
        return id;
    }

    /// Forgets a hook registered by `on_cancel` (the operation finished).
    void remove_on_cancel(std::uint64_t id)
    {
        if (id == 0) return;
        std::lock_guard lk(mu_);
        std::erase_if(hooks_, [id](const cancel_hook& h) { return h.id == id; });
    }

    /// Spawns on the run's own executor.
    void spawn(asio::awaitable<void> task, std::string stage) { spawn(home_, std::move(task), std::move(stage)); }

    /// Records a failure (the first one wins) and stops the run. Failures after the run
    /// was cancelled are the consequence of cancelling and are ignored.
    void fail(std::exception_ptr e, std::string_view stage, std::string_view key = {})
    {
        std::shared_ptr<detail::channel_base> sink;
        {
            std::lock_guard lk(mu_);
            if (stopping_) return;
            error_ = detail::with_context(std::move(e), stage, key);
            stopping_ = true; // the first failure wins; cancel() below still runs once
            sink = sink_;
        }
        if (sink) sink->fail(error_);
        cancel();
    }

    /// Stops the run: cancels channels and pending operations. Idempotent.
    void cancel()
    {
        std::vector<std::shared_ptr<detail::channel_base>> channels;
        std::vector<cancel_hook> hooks;
        std::vector<signal_entry> signals;
        std::shared_ptr<detail::channel_base> keep; // the sink keeps its error for the consumer
        {
            std::lock_guard lk(mu_);
            if (stopping_ && cancel_sent_) return;
            stopping_ = true;
            cancel_sent_ = true;
            signals = signals_;
            channels = channels_;
            hooks = std::move(hooks_);
            hooks_.clear();
            if (error_) keep = sink_;
        }
        for (auto& c : channels)
            if (c != keep) c->cancel();
        for (auto& h : hooks) asio::post(h.ex, std::move(h.fn));
        // A signal must be emitted on its task's executor. Copies: the list keeps them alive.
        for (auto& s : signals) asio::post(s.ex, [sig = s.signal] { sig->cancel(); });
    }

    /// True once the run failed or was cancelled.
    bool stopping() const noexcept { return stopping_.load(); }

    /// The run's error, if it failed.
    std::exception_ptr failure() const
    {
        std::lock_guard lk(mu_);
        return error_;
    }

    /// Blocks until every task has finished. Returns at once on an I/O thread (where
    /// waiting would deadlock); the tasks then finish on their own.
    void wait_idle()
    {
        if (detail::current_lane >= 0) return;
        std::unique_lock lk(mu_);
        idle_cv_.wait(lk, [&] { return active_ == 0; });
    }

    /// Counts a skipped item and logs it (the first ten; each escaped and shortened, as it
    /// names a user's key or path).
    void note_skip(std::string_view message)
    {
        const auto n = stats_.skipped.fetch_add(1) + 1;
        if (n <= max_logged_skips) log("conveyor: skipped: " + detail::printable(message, detail::sentence_max));
        else if (n == max_logged_skips + 1) log("conveyor: further skipped items are counted but not shown");
    }

    /// Logs the run's totals where there is something to say (called when a run ends).
    void report()
    {
        if (reported_.exchange(true)) return;
        if (auto n = stats_.skipped.load())
            log("conveyor: run finished with " + std::to_string(n) + " item(s) skipped on error");
    }

    /// Called by a dying runtime after it cancelled this run and waited for it.
    void orphan() noexcept { rt_.store(nullptr); }

private:
    static constexpr std::uint64_t max_logged_skips = 10;

    void log(std::string_view line)
    {
        if (auto* r = rt_.load()) r->log(line);
    }

    /* A task's cancellation signal, and whether the task has started. A cancellation
       that comes before the task's first step waits for it: Boost 1.81's co_spawn checks
       the cancellation state once more between its own first step and the task's, and
       throws there, outside of its try block, so the exception escaped io_context::run
       (std::terminate; seen under TSan in about one run in four of the pread fallback
       test, where a failing worker cancels workers on the other lane before they run).
       Touched only on the task's executor, which runs one handler at a time. */
    struct task_signal {
        asio::cancellation_signal signal;
        bool running = false;
        bool pending = false;
        void cancel()
        {
            if (running) signal.emit(asio::cancellation_type::terminal);
            else pending = true;
        }
    };

    /* The task, marked as started first (and cancelled then, if that was asked before).
       On the way out, throw_if_cancelled is turned off: co_spawn's entry point posts once
       more after a task that never suspended, and a cancellation emitted meanwhile made
       that post throw outside of co_spawn's try block too. */
    static asio::awaitable<void> started(std::shared_ptr<task_signal> sig, asio::awaitable<void> task)
    {
        sig->running = true;
        if (sig->pending) sig->signal.emit(asio::cancellation_type::terminal);
        std::exception_ptr e;
        try {
            co_await std::move(task);
        } catch (...) {
            e = std::current_exception();
        }
        co_await asio::this_coro::throw_if_cancelled(false);
        if (e) std::rethrow_exception(e);
    }

    struct signal_entry {
        asio::any_io_executor ex;
        std::shared_ptr<task_signal> signal;
    };

    struct cancel_hook {
        std::uint64_t id;
        asio::any_io_executor ex;
        std::function<void()> fn;
    };

    void task_done()
    {
        std::lock_guard lk(mu_);
        if (--active_ == 0) idle_cv_.notify_all();
    }

    std::atomic<runtime*> rt_;
    runtime::io_executor_type home_;
    std::uint64_t epoch_;
    run_stats stats_;
    mutable std::mutex mu_;
    std::condition_variable idle_cv_;
    std::size_t active_ = 0;
    std::atomic<bool> stopping_{false};
    std::atomic<bool> reported_{false};
    std::exception_ptr error_;
    std::shared_ptr<detail::channel_base> sink_;
    std::vector<std::shared_ptr<detail::channel_base>> channels_;
    std::vector<cancel_hook> hooks_;
    std::vector<signal_entry> signals_;
    bool cancel_sent_ = false;
    std::uint64_t next_hook_ = 0;
};


namespace detail {

/** Closes a source's stream when the last of its workers ends, however it ends. Each
    worker holds one; `left` starts at the number of workers. */
template <class T>
struct last_worker_closes {
    std::atomic<std::size_t>& left;
    channel<T>& out;
    ~last_worker_closes()
    {
        if (left.fetch_sub(1) == 1) out.close();
    }
};

/** What a source worker does with item `i` that could not be read: fail the run (naming
    `stage` and `key`), or count it, log `what`, and leave its place in an ordered stream
    empty. Completes with whether the worker should go on. */
template <class T>
asio::awaitable<bool> source_item_failed(run_context& ctx, channel<T>& out, on_error errors, bool ordered, std::uint64_t i,
                                         std::exception_ptr e, std::string_view what, std::string_view stage, std::string_view key)
{
    if (errors == on_error::fail) {
        // Fail the run before the worker's exit can close the stream: closing first would
        // let the consumer see a clean end and lose the error.
        ctx.fail(std::move(e), stage, key);
        co_return false;
    }
    ctx.note_skip(what);
    if (ordered) co_return co_await out.skip_at(i);
    co_return true;
}

/// Sends item `i` of a source: in its place (ordered) or as it comes. Completes with
/// whether anyone still listens.
template <class T>
asio::awaitable<bool> source_deliver(channel<T>& out, bool ordered, std::uint64_t i, T item)
{
    if (ordered) co_return co_await out.send_at(i, std::move(item));
    co_return co_await out.send(std::move(item));
}

} // namespace detail

inline void runtime::cancel_all_runs()
{
    std::vector<std::shared_ptr<run_context>> live;
    {
        std::lock_guard lk(mu_);
        for (auto& w : runs_)
            if (auto r = w.lock()) live.push_back(std::move(r));
    }
    for (auto& r : live) r->cancel();
    for (auto& r : live) {
        r->wait_idle();
        r->orphan();
    }
}

} // namespace conveyor

#endif
