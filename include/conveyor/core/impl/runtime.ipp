// conveyor/core/impl/runtime.ipp — the runtime's threads, pools and run registry.
#ifndef CONVEYOR_CORE_IMPL_RUNTIME_IPP
#define CONVEYOR_CORE_IMPL_RUNTIME_IPP

#include <conveyor/core/runtime.hpp>
// The destructor stops the runs still registered: it needs the complete run_context.
#include <conveyor/core/run_context.hpp>
#include <conveyor/core/metrics.hpp> // wait_clock, spin_budget
#include <conveyor/core/detail/environment.hpp>

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
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

namespace detail {

/* The count of tasks on this node in a Slurm tasks-per-node value: "4" (every node), or a
   list of counts per node in node order, "2(x3),1" (a count followed by "(xN)" repeats for
   N nodes): this node's entry when `node` is given, else the largest. nullopt when `value`
   is not such a list, or `node` is past its end. */
inline std::optional<std::uint64_t> slurm_tasks_on_node(std::string_view value, std::optional<std::uint64_t> node)
{
    const auto number = [](std::string_view& s) -> std::optional<std::uint64_t> {
        std::uint64_t v = 0;
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc{} || p == s.data()) return std::nullopt;
        s.remove_prefix(static_cast<std::size_t>(p - s.data()));
        return v;
    };
    std::string_view s = trim_blanks(value);
    if (std::string_view one = s; number(one) && one.empty()) return number(s);
    std::uint64_t first_node = 0, largest = 0;
    std::optional<std::uint64_t> mine;
    while (true) {
        const auto count = number(s);
        if (!count) return std::nullopt;
        std::uint64_t nodes = 1;
        if (s.starts_with("(x")) {
            s.remove_prefix(2);
            const auto n = number(s);
            if (!n || *n == 0 || !s.starts_with(')')) return std::nullopt;
            s.remove_prefix(1);
            nodes = *n;
        }
        if (node && *node >= first_node && *node - first_node < nodes) mine = count;
        first_node += nodes;
        largest = std::max(largest, *count);
        if (s.empty()) break;
        if (!s.starts_with(',')) return std::nullopt;
        s.remove_prefix(1);
    }
    return node ? mine : largest;
}

} // namespace detail

CONVEYOR_DECL std::size_t local_ranks(std::size_t devices)
{
    static constexpr std::string_view stage = "runtime";
    const auto at_least_one = [](const char* name, std::uint64_t v) {
        if (v == 0) detail::bad_environment(stage, std::string(name) + "=0: a node runs at least 1 rank");
        return static_cast<std::size_t>(v);
    };
    if (const auto n = detail::env_number("LOCAL_WORLD_SIZE", stage)) return at_least_one("LOCAL_WORLD_SIZE", *n);
    for (const char* name : {"SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
        const char* value = std::getenv(name);
        if (!value) continue;
        const auto node = detail::env_number("SLURM_NODEID", stage);
        const auto n = detail::slurm_tasks_on_node(value, node);
        if (!n) {
            if (node && detail::slurm_tasks_on_node(value, std::nullopt))
                detail::bad_environment(stage, "SLURM_NODEID=" + std::to_string(*node) + " is past the nodes that " + name + "=\"" +
                                                   detail::printable(value) + "\" counts");
            detail::bad_environment(stage, std::string(name) + "=\"" + detail::printable(value) +
                                               "\" is not a count of tasks per node (\"4\", or Slurm's list \"2(x3),1\")");
        }
        return at_least_one(name, *n);
    }
    if (const auto n = detail::env_number("OMPI_COMM_WORLD_LOCAL_SIZE", stage)) return at_least_one("OMPI_COMM_WORLD_LOCAL_SIZE", *n);
    if (std::getenv("LOCAL_RANK") && devices > 0) return devices;
    return 1;
}

CONVEYOR_DECL runtime_options runtime::resolve(runtime_options o)
{
    const std::size_t cores = usable_cpus();
    if (o.io_threads == 0) o.io_threads = std::min<std::size_t>(cores, 4);
    if (o.compute_threads == 0) o.compute_threads = std::max<std::size_t>(cores / local_ranks(o.local_devices), 1);
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
