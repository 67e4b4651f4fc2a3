// micro_stream.cpp — what one item costs in conveyor's stream machinery (Google Benchmark).
//
// Each benchmark moves `items` ints through a freshly built pipeline per iteration and
// reports `per_item` (wall time per item) and `cpu_ns_per_item` (CPU time of all threads
// per item). The cost of one trivial stage is
//   (generate_map4_on_lane - generate_on_lane) / 4
// per item; the target is at most 250 ns per item per trivial stage. The plain
// `generate*` variants drain with range-for on the benchmark's thread (what users write):
// they add the cost of handing items from an I/O thread to a blocking consumer.
// Every run counts per-stage metrics (conveyor/core/metrics.hpp) whether or not anyone
// reads them; `generate_map4_stats_1ms` also takes a snapshot every millisecond
// (`pipeline::on_stats`), the most a progress display would ask for.
// The channel benchmarks measure `detail::channel` alone: a coroutine sending batches
// (`send_all`) to another receiving them (`receive_some`), on one I/O thread or two.

#include <conveyor/core/detail/channel.hpp>
#include <conveyor/core/metrics.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/stages.hpp>
#include "support/timer.hpp"

#include <benchmark/benchmark.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <future>
#include <memory>
#include <vector>

namespace {

namespace cv = conveyor;
namespace asio = boost::asio;
namespace cb = conveyor::bench;

// One runtime for every benchmark: threads are started once, not per iteration.
cv::runtime& rt()
{
    static cv::runtime r;
    return r;
}

/* Reports wall time per item (`per_item`) and CPU time per item of the whole process,
   all threads (`cpu_per_item`, in ns): Google Benchmark's own CPU column counts only the
   benchmark's thread, which mostly waits here. */
void set_per_item(benchmark::State& state, std::int64_t items_per_iteration, const cb::resource_usage& before)
{
    const double cpu_s = (cb::usage_now() - before).cpu_s();
    const double total = static_cast<double>(state.iterations()) * static_cast<double>(items_per_iteration);
    state.SetItemsProcessed(state.iterations() * items_per_iteration);
    state.counters["per_item"] = benchmark::Counter(static_cast<double>(items_per_iteration),
                                                    benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
    state.counters["cpu_ns_per_item"] = benchmark::Counter(total > 0 ? cpu_s * 1e9 / total : 0.0);
}

template <class Pipeline>
std::int64_t drain(Pipeline& p)
{
    std::int64_t sum = 0;
    for (int x : p) sum += x;
    return sum;
}

/* Drains a run of `p` with a coroutine on the run's own I/O thread, where its stages run:
   no thread hand-off at all, so this is the machinery's own cost per item (channels,
   batching, coroutine switches), without the wake-ups a blocking consumer pays. */
template <class Pipeline>
std::int64_t drain_on_lane(Pipeline& p)
{
    using T = typename Pipeline::value_type;
    auto ctx = std::make_shared<cv::run_context>(p.rt(), 0);
    p.rt().attach(ctx);
    cv::stream<T> s = p.build(ctx);
    cv::detail::set_sink(*ctx, cv::detail::channel_of(s));
    std::promise<std::int64_t> done;
    auto result = done.get_future();
    auto consumer = [](cv::stream<T> s) -> asio::awaitable<std::int64_t> {
        std::vector<T> got;
        std::int64_t sum = 0;
        while (co_await s.async_next_batch(got, 256)) {
            for (auto& x : got) sum += x;
            got.clear();
        }
        co_return sum;
    };
    asio::co_spawn(ctx->executor(), consumer(s), [&done](std::exception_ptr e, std::int64_t sum) {
        if (e) done.set_exception(e);
        else done.set_value(sum);
    });
    const auto sum = result.get();
    ctx->wait_idle();
    return sum;
}

auto source(std::int64_t n)
{
    return cv::generate(static_cast<std::uint64_t>(n), [](std::uint64_t i) { return static_cast<int>(i); }).on(rt());
}

constexpr auto inc = [](int x) { return x + 1; };

// Times `drain_with(make(n))` per item: every benchmark below is this loop with another
// pipeline or another way of draining it.
template <class Make, class Drain>
void per_item(benchmark::State& state, Make make, Drain drain_with)
{
    const auto n = state.range(0);
    const auto before = cb::usage_now();
    for (auto _ : state) {
        auto p = make(n);
        benchmark::DoNotOptimize(drain_with(p));
    }
    set_per_item(state, n, before);
}

auto alone = [](std::int64_t n) { return source(n); };
auto one_map = [](std::int64_t n) { return source(n) | cv::map(inc); };
auto four_maps = [](std::int64_t n) { return source(n) | cv::map(inc) | cv::map(inc) | cv::map(inc) | cv::map(inc); };
auto by_range_for = [](auto& p) { return drain(p); };
auto on_lane = [](auto& p) { return drain_on_lane(p); };

// (a) (b) (c): generate alone, with one map(x + 1), with four; drained by range-for on the
// calling thread.
void generate(benchmark::State& state) { per_item(state, alone, by_range_for); }
void generate_map1(benchmark::State& state) { per_item(state, one_map, by_range_for); }
void generate_map4(benchmark::State& state) { per_item(state, four_maps, by_range_for); }

// (c) again, with a snapshot of the run's metrics taken every millisecond on its I/O thread.
void generate_map4_stats_1ms(benchmark::State& state)
{
    auto watched = [](std::int64_t n) {
        return four_maps(n).on_stats(std::chrono::milliseconds(1),
                                     [](const cv::stats_snapshot& s) { benchmark::DoNotOptimize(s.stages.size()); });
    };
    per_item(state, watched, by_range_for);
}

// (a') (b') (c'): the same pipelines drained by a coroutine on the stages' own I/O thread.
void generate_on_lane(benchmark::State& state) { per_item(state, alone, on_lane); }
void generate_map1_on_lane(benchmark::State& state) { per_item(state, one_map, on_lane); }
void generate_map4_on_lane(benchmark::State& state) { per_item(state, four_maps, on_lane); }

// (d) generate | map(x + 1, concurrency 4): the parallel map's per-item path (one
//     receive and one ordered send per item), for comparison with the batched inline map.
void generate_map_parallel4(benchmark::State& state)
{
    per_item(state, [](std::int64_t n) { return source(n) | cv::map(inc, {.concurrency = 4}); }, by_range_for);
}

// (d') the same map on the compute pool (run_on::compute): each call leaves the I/O thread
//      for a pool thread and comes back, the path of decode and other CPU work.
void generate_map_compute4(benchmark::State& state)
{
    per_item(state, [](std::int64_t n) { return source(n) | cv::map(inc, {.concurrency = 4, .where = cv::run_on::compute}); },
             by_range_for);
}

// The channel alone: a producer coroutine sends batches of 64 with send_all, a consumer
// coroutine takes up to 256 at a time with receive_some. `state.range(1)` says whether
// they run on the same I/O thread (0) or on two (1).
void channel_send_all_receive_some(benchmark::State& state)
{
    const auto n = state.range(0);
    const bool two_lanes = state.range(1) != 0 && rt().io_lanes() > 1;
    const auto before = cb::usage_now();
    for (auto _ : state) {
        auto ch = std::make_shared<cv::detail::channel<int>>(cv::default_stream_capacity);
        std::promise<std::int64_t> done;
        auto result = done.get_future();
        auto producer = [](std::shared_ptr<cv::detail::channel<int>> ch, std::int64_t n) -> asio::awaitable<void> {
            std::vector<int> chunk;
            for (std::int64_t i = 0; i < n;) {
                for (int k = 0; k < 64 && i < n; ++k) chunk.push_back(static_cast<int>(i++));
                if (!co_await ch->send_all(chunk)) co_return;
            }
            ch->close();
        };
        auto consumer = [](std::shared_ptr<cv::detail::channel<int>> ch) -> asio::awaitable<std::int64_t> {
            std::vector<int> got;
            std::int64_t sum = 0;
            while (co_await ch->receive_some(got, 256)) {
                for (int x : got) sum += x;
                got.clear();
            }
            co_return sum;
        };
        asio::co_spawn(rt().io_executor(0), producer(ch, n), asio::detached);
        asio::co_spawn(rt().io_executor(two_lanes ? 1 : 0), consumer(ch),
                       [&done](std::exception_ptr e, std::int64_t sum) {
                           if (e) done.set_exception(e);
                           else done.set_value(sum);
                       });
        benchmark::DoNotOptimize(result.get());
    }
    set_per_item(state, n, before);
    state.SetLabel(two_lanes ? "two I/O threads" : "one I/O thread");
}

constexpr std::int64_t items = 1 << 20;

BENCHMARK(generate)->Arg(items)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(generate_map1)->Arg(items)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(generate_map4)->Arg(items)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(generate_on_lane)->Arg(items)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(generate_map1_on_lane)->Arg(items)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(generate_map4_on_lane)->Arg(items)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(generate_map_parallel4)->Arg(items / 8)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(generate_map_compute4)->Arg(items / 8)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(channel_send_all_receive_some)->Args({items, 0})->Args({items, 1})->Unit(benchmark::kMillisecond)->UseRealTime();

// Last: its ticker's timer is the first I/O object on lane 0's io_context, which gives that
// context a reactor for the rest of the process, and from then on Asio's scheduler calls
// epoll_wait (timeout 0) between handlers, which makes every later case slower per item. Real pipelines (sockets, timers) have the reactor;
// the cases above measure the channel machinery without it, as they always have.
BENCHMARK(generate_map4_stats_1ms)->Arg(items)->Unit(benchmark::kMillisecond)->UseRealTime();

} // namespace

BENCHMARK_MAIN();
