// conveyor/core/impl/runtime.ipp — the runtime's threads, pools and run registry.
#ifndef CONVEYOR_CORE_IMPL_RUNTIME_IPP
#define CONVEYOR_CORE_IMPL_RUNTIME_IPP

#include <conveyor/core/runtime.hpp>
// The destructor stops the runs still registered: it needs the complete run_context.
#include <conveyor/core/run_context.hpp>
#include <conveyor/core/metrics.hpp> // wait_clock, spin_budget

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace conveyor {

namespace detail {

/* Runs a lane's io_context like `run()`, but polls for a short while (`spin_budget`)
   before it sleeps for want of handlers: a handler posted from another thread (a
   channel's wake-up) is then picked up without a futex sleep and wake-up of this thread. */
inline void run_lane(asio::io_context& ctx)
{
    spin_budget budget;
    while (!ctx.stopped()) {
        if (ctx.poll() > 0) continue;
        if (ctx.stopped()) break;
        const auto until = wait_clock::now() + budget.next();
        bool got = false;
        while (!got && wait_clock::now() < until) got = ctx.poll_one() > 0;
        budget.record(got);
        if (!got) ctx.run_one();
    }
}

} // namespace detail

CONVEYOR_DECL runtime::runtime(runtime_options opts)
    : opts_(resolve(std::move(opts))), compute_(opts_.compute_threads), buffers_(opts_.buffer_pool_bytes),
      memory_(opts_.memory_limit)
{
    lanes_.reserve(opts_.io_threads);
    for (std::size_t i = 0; i < opts_.io_threads; ++i) lanes_.push_back(std::make_unique<lane>());
    for (std::size_t i = 0; i < lanes_.size(); ++i) {
        auto* l = lanes_[i].get();
        l->thread = std::thread([l, i] {
            detail::current_lane = static_cast<int>(i);
            detail::run_lane(l->ctx);
        });
    }
}

CONVEYOR_DECL runtime::~runtime()
{
    cancel_all_runs();
    for (auto& l : lanes_) l->guard.reset();
    for (auto& l : lanes_) l->ctx.stop();
    for (auto& l : lanes_)
        if (l->thread.joinable()) l->thread.join();
    compute_.join();
    if (auto* b = blocking_.load()) {
        b->join();
        delete b;
    }
}

CONVEYOR_DECL runtime& runtime::shared()
{
    static runtime rt;
    return rt;
}

CONVEYOR_DECL std::optional<std::size_t> runtime::current_io_lane() const noexcept
{
    const int lane = detail::current_lane;
    if (lane < 0 || static_cast<std::size_t>(lane) >= lanes_.size()) return std::nullopt;
    const auto i = static_cast<std::size_t>(lane);
    if (!lanes_[i]->ctx.get_executor().running_in_this_thread()) return std::nullopt;
    return i;
}

CONVEYOR_DECL runtime::pool_executor_type runtime::blocking_executor()
{
    auto* b = blocking_.load();
    if (!b) {
        std::lock_guard lk(mu_);
        b = blocking_.load();
        if (!b) {
            b = new asio::thread_pool(opts_.blocking_threads);
            blocking_.store(b);
        }
    }
    return b->get_executor();
}

CONVEYOR_DECL void runtime::log(std::string_view line) const
{
    if (opts_.log) opts_.log(line);
    else std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
}

CONVEYOR_DECL void runtime::log_once(std::string_view topic, std::string_view line)
{
    {
        std::lock_guard lk(mu_);
        if (!logged_topics_.emplace(topic).second) return;
    }
    log(line);
}

CONVEYOR_DECL void runtime::attach(const std::shared_ptr<run_context>& r)
{
    std::lock_guard lk(mu_);
    runs_.emplace_back(r);
}

CONVEYOR_DECL void runtime::detach(const run_context* r)
{
    std::lock_guard lk(mu_);
    std::erase_if(runs_, [r](const std::weak_ptr<run_context>& w) {
        auto p = w.lock();
        return !p || p.get() == r;
    });
    runs_cv_.notify_all();
}

CONVEYOR_DECL std::size_t usable_cpus() noexcept
{
    std::size_t n = std::thread::hardware_concurrency();
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof set, &set) == 0) {
        const int c = CPU_COUNT(&set);
        if (c > 0) n = static_cast<std::size_t>(c);
    }
    // cgroup v2: "max 100000" (no quota) or "<quota> <period>" in microseconds.
    if (std::FILE* f = std::fopen("/sys/fs/cgroup/cpu.max", "r")) {
        char quota[32] = {};
        unsigned long long period = 0;
        if (std::fscanf(f, "%31s %llu", quota, &period) == 2 && std::string_view(quota) != "max" && period > 0) {
            char* end = nullptr;
            const unsigned long long q = std::strtoull(quota, &end, 10);
            if (end && *end == '\0' && q > 0) n = std::min<std::size_t>(n ? n : q, (q + period - 1) / period);
        }
        std::fclose(f);
    }
    return std::max<std::size_t>(n, 1);
}

CONVEYOR_DECL runtime_options runtime::resolve(runtime_options o)
{
    const std::size_t cores = usable_cpus();
    if (o.io_threads == 0) o.io_threads = std::min<std::size_t>(cores, 4);
    if (o.compute_threads == 0) o.compute_threads = cores;
    if (o.blocking_threads == 0) o.blocking_threads = 16;
    if (o.ring_entries == 0) o.ring_entries = 256;
    if (o.memory_limit == 0) o.memory_limit = memory_budget::default_limit();
    o.ring_entries = std::max(o.ring_entries, 8u); // a linked open/read/close needs 3 at once
    if (o.ring_max_in_flight == 0) o.ring_max_in_flight = o.ring_entries;
    if (o.backend == io_backend::automatic) {
        if (const char* env = std::getenv("CONVEYOR_IO_BACKEND")) {
            const std::string_view v(env);
            if (v == "pread") o.backend = io_backend::pread;
            else if (v == "uring") o.backend = io_backend::uring;
        }
    }
    return o;
}

CONVEYOR_DECL void runtime::cancel_all_runs()
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
