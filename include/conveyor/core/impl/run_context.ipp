// conveyor/core/impl/run_context.ipp — a run's bookkeeping: failure, cancellation, waiting.
#ifndef CONVEYOR_CORE_IMPL_RUN_CONTEXT_IPP
#define CONVEYOR_CORE_IMPL_RUN_CONTEXT_IPP

#include <conveyor/core/run_context.hpp>

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

CONVEYOR_DECL void run_context::cancel()
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

CONVEYOR_DECL std::exception_ptr run_context::failure() const
{
    std::lock_guard lk(mu_);
    return error_;
}

CONVEYOR_DECL void run_context::wait_idle()
{
    if (detail::current_lane >= 0) return;
    std::unique_lock lk(mu_);
    idle_cv_.wait(lk, [&] { return active_ == 0; });
}

CONVEYOR_DECL void run_context::note_skip(std::string_view message)
{
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

CONVEYOR_DECL void run_context::task_done()
{
    std::lock_guard lk(mu_);
    if (--active_ == 0) idle_cv_.notify_all();
}

} // namespace conveyor

#endif
