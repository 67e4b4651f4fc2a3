// conveyor/core/run_context.hpp — one run of a pipeline: its tasks, channels, errors, stats.
#ifndef CONVEYOR_CORE_RUN_CONTEXT_HPP
#define CONVEYOR_CORE_RUN_CONTEXT_HPP

#include <conveyor/core/detail/channel.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/metrics.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/sink.hpp>
#include <conveyor/detail/config.hpp>

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
#include <chrono>
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

class run_context;

namespace detail {

struct run_access;

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
CONVEYOR_DECL std::string what_arg_of(std::string_view what, std::string_view message);

/// Rethrows `e` as a `conveyor::error` that names `stage` and `key` (unless it already
/// names a stage), keeping the original as the nested exception.
CONVEYOR_DECL std::exception_ptr with_context(std::exception_ptr e, std::string_view stage, std::string_view key);

} // namespace detail

/// Counters of one run, readable while it runs. The per-stage metrics are in
/// `range::snapshot()` (`stats_snapshot`, conveyor/core/metrics.hpp).
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
    CONVEYOR_DECL run_context(runtime& rt, std::uint64_t epoch);
    CONVEYOR_DECL ~run_context();

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

    // ---- metrics (see conveyor/core/metrics.hpp) ------------------------------------------

    /** The source metrics of the stage sending to `out` (created on first call): requests
        in flight, retries, latency. For sources not built on `keyed_source` (which keeps
        its own): a `make_stream` body asks with its sink. */
    template <class T>
    std::shared_ptr<source_metrics> source_metrics_of(const sink<T>& out)
    {
        return source_metrics_of(detail::channel_of(out));
    }

    /** A snapshot of every registered stage and of the consumer.
        @par Thread Safety
        Safe, from any thread, at any time (also after the run ended). */
    CONVEYOR_DECL stats_snapshot snapshot() const;

    /** Calls `fn` with a snapshot every `interval` on the run's I/O thread while the run
        goes, and once more with the final one when `stop_stats()` is called (when the
        consumer saw the end or stopped the run). `fn` must be quick: it runs on an I/O
        thread that the run's stages also use. */
    CONVEYOR_DECL void start_stats(std::chrono::nanoseconds interval, stats_callback fn);

    /** Stops the periodic snapshots (after delivering the final one); no call of the
        callback starts after it returns, and one in progress has finished. Idempotent. */
    CONVEYOR_DECL void stop_stats();

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
            signals_.push_back({asio::any_io_executor(ex), sig});
            cancel_now = stopping_;
            last_spawned_ = stage;
        }
        {
            std::lock_guard lk(gate_->mu);
            ++gate_->active;
        }
        // The handler lets go of the run, and counts the task out only once co_spawn is
        // done with it (see idle_gate).
        asio::co_spawn(ex, started(sig, std::move(task)),
                       asio::bind_cancellation_slot(sig->signal.slot(), [self = shared_from_this(), gate = gate_, ex,
                                                                         stage = std::move(stage)](std::exception_ptr e) mutable {
                           if (e) self->fail(e, stage);
                           self.reset();
                           asio::post(ex, [gate = std::move(gate)] { task_done(*gate); });
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
    CONVEYOR_DECL void remove_on_cancel(std::uint64_t id);

    /// Spawns on the run's own executor.
    CONVEYOR_DECL void spawn(asio::awaitable<void> task, std::string stage);

    /// Records a failure (the first one wins) and stops the run. Failures after the run
    /// was cancelled are the consequence of cancelling and are ignored.
    CONVEYOR_DECL void fail(std::exception_ptr e, std::string_view stage, std::string_view key = {});

    /// Stops the run: cancels channels and pending operations. Idempotent.
    CONVEYOR_DECL void cancel();

    /// True once the run failed or was cancelled.
    bool stopping() const noexcept { return stopping_.load(); }

    /// The run's error, if it failed.
    CONVEYOR_DECL std::exception_ptr failure() const;

    /** A run nested in this one, for epoch `epoch`: what a stage that reads a nested
        pipeline at another epoch than its own builds it on (a `mix` starting a source's
        next epoch). Its tasks count as this run's (`wait_idle()` waits for them), a failure
        in it fails this run (the consumer throws its error), and cancelling this run
        cancels it; cancelling the nested run leaves this one going. It counts its skipped
        items in this run's stats; its stages are not in this run's snapshot. */
    CONVEYOR_DECL std::shared_ptr<run_context> nested(std::uint64_t epoch);

    /// Blocks until every task has finished. Returns at once on an I/O thread (where
    /// waiting would deadlock); the tasks then finish on their own.
    CONVEYOR_DECL void wait_idle();

    /// Counts a skipped item and logs it (the first ten; each escaped and shortened, as it
    /// names a user's key or path).
    CONVEYOR_DECL void note_skip(std::string_view message);

    /// Logs the run's totals where there is something to say (called when a run ends).
    CONVEYOR_DECL void report();

    /// Called by a dying runtime after it cancelled this run and waited for it.
    void orphan() noexcept { rt_.store(nullptr); }

private:
    // The plumbing between stages, for the library's own stages: reached through
    // detail::make_channel, register_stage, link_stage, source_metrics_of and set_sink
    // (after this class).
    friend struct detail::run_access;

    /** Registers `out` as the output of a stage called `name` with `workers` tasks
        producing into it; stages are listed in the order they register, which is pipeline
        order (a stage is built after its input). A channel registers once; later calls
        are no-ops. `make_stream`, `keyed_source` and `map` register their outputs; `|`
        registers any other stage's output under the name its last task was spawned with. */
    CONVEYOR_DECL void register_stage(std::string name, std::shared_ptr<detail::channel_base> out, std::size_t workers = 1);

    /** Registers `out` (if it is not yet) under the name of the last task spawned, and
        notes that its stage reads `in` (null for a source): the time `in`'s receivers
        wait is that stage's starved time. Called by `|` and `pipeline::run`. */
    CONVEYOR_DECL void link_stage(const std::shared_ptr<detail::channel_base>& in, const std::shared_ptr<detail::channel_base>& out);

    /// The source metrics of the stage writing `out` (see the public overload).
    CONVEYOR_DECL std::shared_ptr<source_metrics> source_metrics_of(const std::shared_ptr<detail::channel_base>& out);

    /// A new channel that this run cancels when it stops.
    template <class T>
    std::shared_ptr<detail::channel<T>> make_channel(std::size_t capacity, std::size_t max_room = 0)
    {
        auto ch = std::make_shared<detail::channel<T>>(capacity, max_room);
        std::lock_guard lk(mu_);
        channels_.push_back(ch);
        if (stopping_) ch->cancel();
        return ch;
    }

    /// Marks `ch` as the channel the consumer reads: errors go there.
    CONVEYOR_DECL void set_sink(std::shared_ptr<detail::channel_base> ch);

    static constexpr std::uint64_t max_logged_skips = 10;

    CONVEYOR_DECL void log(std::string_view line);

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
        CONVEYOR_DECL void cancel();
    };

    /* The task, marked as started first (and cancelled then, if that was asked before).
       On the way out, throw_if_cancelled is turned off: co_spawn's entry point posts once
       more after a task that never suspended, and a cancellation emitted meanwhile made
       that post throw outside of co_spawn's try block too. */
    CONVEYOR_DECL static asio::awaitable<void> started(std::shared_ptr<task_signal> sig, asio::awaitable<void> task);

    struct signal_entry {
        asio::any_io_executor ex;
        std::shared_ptr<task_signal> signal;
    };

    struct cancel_hook {
        std::uint64_t id;
        asio::any_io_executor ex;
        std::function<void()> fn;
    };

    /* The count of the run's unfinished tasks, kept apart from the run. A task's
       completion handler drops its reference to the run first and counts itself out
       after, so that once wait_idle() returns no task holds the run any more: its last
       reference (with the channels, items, hooks and stage state it owns) is the waiter's
       to drop, on the waiter's thread, not an I/O thread's a moment after a range's
       destructor returned. It counts itself out in a handler posted to the task's
       executor (an I/O lane: one thread), which runs once co_spawn has finished with the
       task and with its cancellation signal, which the run owns: the waiter may destroy
       the run as soon as it wakes. */
    struct idle_gate {
        std::mutex mu;
        std::condition_variable cv;
        std::size_t active = 0;
    };

    CONVEYOR_DECL static void task_done(idle_gate& gate);

    struct stage_entry {
        std::string name;
        std::shared_ptr<detail::channel_base> out;
        std::shared_ptr<detail::channel_base> in; // null for a source
        std::shared_ptr<source_metrics> source;
    };
    struct stats_ticker;
    CONVEYOR_DECL static asio::awaitable<void> tick(std::weak_ptr<run_context> self, std::shared_ptr<stats_ticker> t);

    // A nested run (see `nested`): shares the parent's idle gate and executor.
    CONVEYOR_DECL run_context(const std::shared_ptr<run_context>& parent, std::uint64_t epoch);

    std::atomic<runtime*> rt_;
    runtime::io_executor_type home_;
    std::uint64_t epoch_;
    std::uint64_t budget_waits_at_start_ = 0; // the runtime's memory budget waits when the run began
    run_stats stats_;
    mutable std::mutex mu_;
    std::shared_ptr<idle_gate> gate_ = std::make_shared<idle_gate>();
    std::atomic<bool> stopping_{false};
    std::atomic<bool> reported_{false};
    std::exception_ptr error_;
    std::shared_ptr<detail::channel_base> sink_;
    std::vector<std::shared_ptr<detail::channel_base>> channels_;
    std::vector<cancel_hook> hooks_;
    std::vector<signal_entry> signals_;
    bool cancel_sent_ = false;
    std::uint64_t next_hook_ = 0;
    const std::int64_t started_ns_ = detail::now_ns();
    std::string last_spawned_;       // the stage name of the last task spawned
    std::vector<stage_entry> stages_; // in registration order
    std::shared_ptr<stats_ticker> ticker_;
    std::shared_ptr<run_context> parent_;              // a nested run's parent, else null
    std::vector<std::weak_ptr<run_context>> children_; // the runs nested in this one
};

namespace detail {

/// Reaches the members of `run_context` that name channels (see the functions below).
struct run_access {
    template <class T>
    static std::shared_ptr<channel<T>> make_channel(run_context& ctx, std::size_t capacity, std::size_t max_room)
    {
        return ctx.make_channel<T>(capacity, max_room);
    }
    static void register_stage(run_context& ctx, std::string name, std::shared_ptr<channel_base> out, std::size_t workers)
    {
        ctx.register_stage(std::move(name), std::move(out), workers);
    }
    static void link_stage(run_context& ctx, const std::shared_ptr<channel_base>& in, const std::shared_ptr<channel_base>& out)
    {
        ctx.link_stage(in, out);
    }
    static std::shared_ptr<source_metrics> source_metrics_of(run_context& ctx, const std::shared_ptr<channel_base>& out)
    {
        return ctx.source_metrics_of(out);
    }
    static void set_sink(run_context& ctx, std::shared_ptr<channel_base> ch) { ctx.set_sink(std::move(ch)); }
};

/// A new channel of run `ctx`, cancelled when the run stops; `max_room` as for `channel`.
template <class T>
std::shared_ptr<channel<T>> make_channel(run_context& ctx, std::size_t capacity, std::size_t max_room = 0)
{
    return run_access::make_channel<T>(ctx, capacity, max_room);
}

/// Registers `out` as the output of a stage called `name` with `workers` tasks (see
/// `run_context::register_stage`).
inline void register_stage(run_context& ctx, std::string name, std::shared_ptr<channel_base> out, std::size_t workers = 1)
{
    run_access::register_stage(ctx, std::move(name), std::move(out), workers);
}

/// Notes that the stage writing `out` reads `in` (see `run_context::link_stage`).
inline void link_stage(run_context& ctx, const std::shared_ptr<channel_base>& in, const std::shared_ptr<channel_base>& out)
{
    run_access::link_stage(ctx, in, out);
}

/// The source metrics of the stage writing `out`.
inline std::shared_ptr<source_metrics> source_metrics_of(run_context& ctx, const std::shared_ptr<channel_base>& out)
{
    return run_access::source_metrics_of(ctx, out);
}

/// Marks `ch` as the channel the consumer of run `ctx` reads: errors go there.
inline void set_sink(run_context& ctx, std::shared_ptr<channel_base> ch)
{
    run_access::set_sink(ctx, std::move(ch));
}

} // namespace detail


} // namespace conveyor

#if CONVEYOR_HEADER_ONLY
#include <conveyor/core/impl/run_context.ipp>
#include <conveyor/core/impl/runtime.ipp>
#endif

#endif
