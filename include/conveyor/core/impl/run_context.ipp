// conveyor/core/impl/run_context.ipp — a run's bookkeeping: failure, cancellation, waiting.
#ifndef CONVEYOR_CORE_IMPL_RUN_CONTEXT_IPP
#define CONVEYOR_CORE_IMPL_RUN_CONTEXT_IPP

#include <conveyor/core/run_context.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/system_error.hpp>

namespace conveyor {

namespace detail {

CONVEYOR_DECL std::string what_arg_of(std::string_view what, std::string_view message)
{
    const auto pos = message.empty() ? std::string_view::npos : what.find(message);
    if (pos == 0) return {};
    if (pos == std::string_view::npos) return std::string(what);
    return std::string(what.substr(0, pos + message.size()));
}

CONVEYOR_DECL std::exception_ptr with_context(std::exception_ptr e, std::string_view stage, std::string_view key)
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

} // namespace detail

CONVEYOR_DECL run_context::run_context(runtime& rt, std::uint64_t epoch)
    : rt_(&rt), home_(rt.next_io_executor()), epoch_(epoch), budget_waits_at_start_(rt.memory().stats().waits)
{
}

CONVEYOR_DECL run_context::run_context(const std::shared_ptr<run_context>& parent, std::uint64_t epoch)
    : rt_(parent->rt_.load()), home_(parent->home_), epoch_(epoch), budget_waits_at_start_(parent->budget_waits_at_start_),
      gate_(parent->gate_), parent_(parent)
{
}

CONVEYOR_DECL std::shared_ptr<run_context> run_context::nested(std::uint64_t epoch)
{
    std::shared_ptr<run_context> child(new run_context(shared_from_this(), epoch));
    bool cancel_now;
    {
        std::lock_guard lk(mu_);
        std::erase_if(children_, [](const std::weak_ptr<run_context>& w) { return w.expired(); });
        children_.push_back(child);
        cancel_now = stopping_;
    }
    // Attached too, so that a runtime going away cancels it, waits for it and orphans it.
    if (auto* r = rt_.load()) r->attach(child);
    if (cancel_now) child->cancel();
    return child;
}

CONVEYOR_DECL run_context::~run_context()
{
    if (auto* r = rt_.load()) r->detach(this);
}

CONVEYOR_DECL void run_context::spawn(asio::awaitable<void> task, std::string stage)
{
    spawn(home_, std::move(task), std::move(stage));
}

CONVEYOR_DECL void run_context::set_sink(std::shared_ptr<detail::channel_base> ch)
{
    std::lock_guard lk(mu_);
    sink_ = std::move(ch);
}

CONVEYOR_DECL void run_context::remove_on_cancel(std::uint64_t id)
{
    if (id == 0) return;
    std::lock_guard lk(mu_);
    std::erase_if(hooks_, [id](const cancel_hook& h) { return h.id == id; });
}

CONVEYOR_DECL void run_context::fail(std::exception_ptr e, std::string_view stage, std::string_view key)
{
    std::shared_ptr<detail::channel_base> sink;
    std::exception_ptr error;
    {
        std::lock_guard lk(mu_);
        if (stopping_) return;
        error_ = detail::with_context(std::move(e), stage, key);
        stopping_ = true; // the first failure wins; cancel() below still runs once
        sink = sink_;
        error = error_;
    }
    if (sink) sink->fail(error);
    if (parent_) parent_->fail(error, stage, key); // it names its stage already: passed on as it is
    cancel();
}

CONVEYOR_DECL void run_context::cancel()
{
    std::vector<std::shared_ptr<detail::channel_base>> channels;
    std::vector<cancel_hook> hooks;
    std::vector<signal_entry> signals;
    std::vector<std::weak_ptr<run_context>> children;
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
        children = children_;
        if (error_) keep = sink_;
    }
    for (auto& w : children)
        if (auto c = w.lock()) c->cancel();
    for (auto& c : channels)
        if (c != keep) c->cancel();
    for (auto& h : hooks) asio::post(h.ex, std::move(h.fn));
    // A signal must be emitted on its task's executor. Copies: the list keeps them alive.
    for (auto& s : signals) asio::post(s.ex, [sig = s.signal] { sig->cancel(); });
}

CONVEYOR_DECL std::exception_ptr run_context::failure() const
{
    std::lock_guard lk(mu_);
    return error_;
}

CONVEYOR_DECL void run_context::wait_idle()
{
    if (detail::current_lane >= 0) return;
    std::unique_lock lk(gate_->mu);
    gate_->cv.wait(lk, [&] { return gate_->active == 0; });
}

CONVEYOR_DECL void run_context::note_skip(std::string_view message)
{
    if (parent_) {
        parent_->note_skip(message);
        return;
    }
    const auto n = stats_.skipped.fetch_add(1) + 1;
    if (n <= max_logged_skips) log("conveyor: skipped: " + detail::printable(message, detail::sentence_max));
    else if (n == max_logged_skips + 1) log("conveyor: further skipped items are counted but not shown");
}

CONVEYOR_DECL void run_context::report()
{
    if (reported_.exchange(true)) return;
    if (auto n = stats_.skipped.load())
        log("conveyor: run finished with " + std::to_string(n) + " item(s) skipped on error");
    // Reads that waited for the memory budget (counted runtime-wide: runs at the same time
    // share it): said once per run, with what to change if the wait was not meant.
    if (auto* r = rt_.load()) {
        const auto m = r->memory().stats();
        auto size = [](std::size_t n) {
            return n >= (std::size_t{1} << 30) ? std::to_string(n >> 30) + " GiB"
                   : n >= (std::size_t{1} << 20) ? std::to_string(n >> 20) + " MiB"
                                                  : std::to_string(n >> 10) + " KiB";
        };
        if (m.waits > budget_waits_at_start_)
            log("conveyor: reads waited " + std::to_string(m.waits - budget_waits_at_start_) + " time(s) for room in the memory budget (limit " +
                size(m.limit) + ", peak " + size(m.peak) +
                "); raise runtime_options::memory_limit, or read fewer or smaller chunks at once, if that was not meant");
    }
}

CONVEYOR_DECL void run_context::log(std::string_view line)
{
    if (auto* r = rt_.load()) r->log(line);
}

CONVEYOR_DECL void run_context::task_signal::cancel()
    {
        if (running) signal.emit(asio::cancellation_type::terminal);
        else pending = true;
    }

CONVEYOR_DECL asio::awaitable<void> run_context::started(std::shared_ptr<task_signal> sig, asio::awaitable<void> task)
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

CONVEYOR_DECL void run_context::register_stage(std::string name, std::shared_ptr<detail::channel_base> out, std::size_t workers)
{
    if (!out || !out->mark_registered()) return;
    out->set_producers(workers);
    std::lock_guard lk(mu_);
    stages_.push_back({std::move(name), std::move(out), nullptr, nullptr});
}

CONVEYOR_DECL void run_context::link_stage(const std::shared_ptr<detail::channel_base>& in, const std::shared_ptr<detail::channel_base>& out)
{
    if (!out) return;
    if (out->mark_registered()) {
        // A stage that registered nothing itself: named after its last task. Its
        // producers are taken to be one (their number is not known here).
        std::lock_guard lk(mu_);
        stages_.push_back({last_spawned_.empty() ? std::string("stage") : last_spawned_, out, nullptr, nullptr});
    }
    if (!in || in == out) return;
    std::lock_guard lk(mu_);
    for (auto& e : stages_)
        if (e.out == out) {
            if (!e.in) e.in = in;
            return;
        }
}

CONVEYOR_DECL std::shared_ptr<source_metrics> run_context::source_metrics_of(const std::shared_ptr<detail::channel_base>& out)
{
    link_stage(nullptr, out);
    std::lock_guard lk(mu_);
    for (auto& e : stages_)
        if (e.out == out) {
            if (!e.source) e.source = std::make_shared<source_metrics>();
            return e.source;
        }
    return std::make_shared<source_metrics>(); // not reached: link_stage registered it
}

CONVEYOR_DECL stats_snapshot run_context::snapshot() const
{
    std::vector<stage_entry> entries;
    std::shared_ptr<detail::channel_base> sink;
    {
        std::lock_guard lk(mu_);
        entries = stages_;
        sink = sink_;
    }
    using ns = std::chrono::nanoseconds;
    const auto now = detail::now_ns();
    stats_snapshot snap;
    snap.elapsed = ns(now - started_ns_);
    snap.skipped = stats_.skipped.load();
    snap.stages.reserve(entries.size());
    for (const auto& e : entries) {
        stage_stats st;
        st.name = e.name;
        const auto c = e.out->counters();
        const auto w = e.out->waits();
        const auto end = e.out->ended_ns();
        st.workers = e.out->producers();
        st.finished = end != 0;
        st.items = c.items;
        st.bytes = c.bytes;
        st.bytes_known = c.bytes_known;
        st.elapsed = ns(std::max<std::int64_t>(0, (end ? end : now) - e.out->created_ns()));
        st.active = ns(std::max<std::int64_t>(0, e.out->producer_time(now)));
        st.blocked = ns(std::max<std::int64_t>(0, w.send_ns));
        st.starved = ns(e.in ? std::max<std::int64_t>(0, e.in->waits().recv_ns) : 0);
        // Waits are read a moment after the active time: keep the parts within the whole.
        if (st.blocked + st.starved > st.active) {
            const double k = static_cast<double>(st.active.count()) / static_cast<double>((st.blocked + st.starved).count());
            st.blocked = ns(static_cast<std::int64_t>(static_cast<double>(st.blocked.count()) * k));
            st.starved = st.active - st.blocked < st.starved ? st.active - st.blocked : st.starved;
        }
        st.busy = st.active - st.blocked - st.starved;
        st.queue_capacity = c.capacity;
        st.queue_size = c.size;
        st.queue_histogram = c.occupancy;
        std::uint64_t samples = 0;
        for (auto n : c.occupancy) samples += n;
        st.queue_mean = samples ? static_cast<double>(c.occupancy_sum) / static_cast<double>(samples) : 0.0;
        if (e.source) {
            st.is_source = true;
            st.in_flight = e.source->in_flight();
            st.retries = e.source->retries();
            st.latency = e.source->latency().read();
        }
        snap.stages.push_back(std::move(st));
    }
    if (sink) {
        snap.delivered = sink->counters().delivered;
        snap.consumer_waited = ns(std::max<std::int64_t>(0, sink->waits().recv_ns));
    }
    return snap;
}

struct run_context::stats_ticker {
    stats_ticker(std::chrono::nanoseconds every, stats_callback f) : interval(every), fn(std::move(f)) {}
    std::mutex mu; // held while the callback runs; `done` is set under it
    bool done = false;
    std::chrono::nanoseconds interval;
    stats_callback fn;
    // The ticking coroutine's timer while it runs: touched only on the run's executor (one
    // thread). The timer lives in the coroutine, never in the run, which may outlive the
    // runtime whose I/O context the timer belongs to.
    asio::steady_timer* timer = nullptr;
};

CONVEYOR_DECL void run_context::start_stats(std::chrono::nanoseconds interval, stats_callback fn)
{
    if (!fn) return;
    if (interval <= std::chrono::nanoseconds(0)) interval = std::chrono::seconds(1);
    auto t = std::make_shared<stats_ticker>(interval, std::move(fn));
    {
        std::lock_guard lk(mu_);
        if (ticker_) return;
        ticker_ = t;
    }
    // Not a task of the run: the run's end does not wait for it; stop_stats ends it.
    asio::co_spawn(home_, tick(weak_from_this(), std::move(t)), asio::detached);
}

namespace detail {
/// Sets a pointer to a timer back to null when it goes out of scope. A named type at
/// namespace scope: a local one in the frame of a compiled coroutine has no linkage, and
/// GCC warns about it (-Wsubobject-linkage).
struct timer_pointer_reset {
    asio::steady_timer*& p;
    ~timer_pointer_reset() { p = nullptr; }
};
} // namespace detail

CONVEYOR_DECL asio::awaitable<void> run_context::tick(std::weak_ptr<run_context> self, std::shared_ptr<stats_ticker> t)
{
    const auto ex = co_await asio::this_coro::executor; // its own statement (GCC 12)
    asio::steady_timer timer(ex);
    detail::timer_pointer_reset forget_timer{t->timer};
    t->timer = &timer;
    for (;;) {
        timer.expires_after(t->interval);
        boost::system::error_code ec;
        co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        std::lock_guard lk(t->mu);
        if (t->done) co_return;
        auto ctx = self.lock();
        if (!ctx) co_return;
        try {
            t->fn(ctx->snapshot());
        } catch (...) {
            // A progress display that fails must not fail the run.
        }
    }
}

CONVEYOR_DECL void run_context::stop_stats()
{
    std::shared_ptr<stats_ticker> t;
    {
        std::lock_guard lk(mu_);
        t = ticker_;
    }
    if (!t) return;
    {
        std::lock_guard lk(t->mu);
        if (t->done) return;
        t->done = true;
        try {
            t->fn(snapshot());
        } catch (...) {
        }
    }
    // Ends the ticking coroutine now rather than at its next tick.
    asio::post(home_, [t] {
        if (t->timer) t->timer->cancel();
    });
}

CONVEYOR_DECL void run_context::task_done(idle_gate& gate)
{
    std::lock_guard lk(gate.mu);
    if (--gate.active == 0) gate.cv.notify_all();
}

} // namespace conveyor

#endif
