// Tests of conveyor/core/runtime.hpp: the runtime's lanes, pools, options, log and buffer
// pool, and destroying a runtime while a run is in flight.
#include "support.hpp"
#include "../support/env_guard.hpp"

#include <sched.h>

#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/stages.hpp>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <stdexcept>

namespace asio = boost::asio;
namespace cv = conveyor;
using namespace std::chrono_literals;
using test::iota;
using test::code_of;

TEST_CASE("a runtime has the I/O lanes it was asked for, each knowing its index")
{
    cv::runtime rt(cv::runtime_options{.io_threads = 3, .compute_threads = 2});
    CHECK(rt.io_lanes() == 3);
    CHECK(rt.options().io_threads == 3);
    CHECK(rt.options().compute_threads == 2);
    CHECK(cv::detail::current_lane == -1); // not an I/O thread
    std::set<std::thread::id> threads;
    for (std::size_t i = 0; i < 3; ++i) {
        std::promise<std::pair<int, std::thread::id>> where;
        auto f = where.get_future();
        asio::post(rt.io_executor(i), [&where] { where.set_value({cv::detail::current_lane, std::this_thread::get_id()}); });
        REQUIRE(f.wait_for(test::generous) == std::future_status::ready);
        const auto [lane, id] = f.get();
        CHECK(lane == static_cast<int>(i));
        CHECK(id != std::this_thread::get_id());
        threads.insert(id);
        CHECK(&rt.io_context(i) == &rt.io_executor(i).context());
    }
    CHECK(threads.size() == 3);
    CHECK_THROWS_AS(rt.io_executor(3), std::out_of_range);
    // next_io_executor() goes round the lanes.
    std::vector<std::size_t> order;
    for (int k = 0; k < 6; ++k) {
        auto ex = rt.next_io_executor();
        for (std::size_t i = 0; i < 3; ++i)
            if (ex == rt.io_executor(i)) order.push_back(i);
    }
    REQUIRE(order.size() == 6);
    for (std::size_t k = 1; k < 6; ++k) CHECK(order[k] == (order[k - 1] + 1) % 3);
}

namespace {

// The variables local_ranks() reads, all unset: a test run under a launcher (torchrun,
// srun, mpirun) sees the same as one run by hand.
struct no_launcher : conveyor_test::env_guard {
    no_launcher()
    {
        for (const char* n : {"LOCAL_WORLD_SIZE", "LOCAL_RANK", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NODEID",
                              "OMPI_COMM_WORLD_LOCAL_SIZE"})
            unset(n);
    }
};

std::string local_ranks_error(std::size_t devices = 0)
{
    try {
        (void)cv::local_ranks(devices);
    } catch (const cv::error& e) {
        CHECK(e.code() == cv::errc::invalid_argument);
        return e.what();
    }
    return "(no error)";
}

// `message` is the runtime's error saying `part`.
void check_says(const std::string& message, const std::string& part)
{
    CHECK_MESSAGE(message.starts_with("conveyor: stage 'runtime': " + part), message);
}

} // namespace

TEST_CASE("a runtime's zero options are chosen for the machine")
{
    no_launcher env;
    cv::runtime rt;
    const std::size_t cores = cv::usable_cpus();
    CHECK(rt.io_lanes() == std::min<std::size_t>(cores, 4));
    CHECK(rt.options().compute_threads == cores);
    CHECK(rt.options().blocking_threads == 16);
    CHECK(rt.options().ring_entries == 256);
    cv::runtime r2(cv::runtime_options{.io_threads = 1, .ring_entries = 0, .ring_max_in_flight = 0});
    CHECK(r2.options().ring_entries == 256);
    CHECK(r2.options().ring_max_in_flight == 256);
}

TEST_CASE("usable_cpus follows the affinity mask, and a runtime's default threads follow it")
{
    cpu_set_t all;
    CPU_ZERO(&all);
    REQUIRE(::sched_getaffinity(0, sizeof all, &all) == 0);
    const std::size_t allowed = static_cast<std::size_t>(CPU_COUNT(&all));
    CHECK(cv::usable_cpus() >= 1);
    CHECK(cv::usable_cpus() <= allowed);
    CHECK(cv::usable_cpus() <= std::max(1u, std::thread::hardware_concurrency()));
    // Narrowed to one CPU, as `taskset -c N` would: one core, one lane, one compute thread.
    int first = 0;
    while (!CPU_ISSET(first, &all)) ++first;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    REQUIRE(::sched_setaffinity(0, sizeof one, &one) == 0);
    struct restore {
        cpu_set_t mask;
        ~restore() { (void)::sched_setaffinity(0, sizeof mask, &mask); }
    } back{all};
    CHECK(cv::usable_cpus() == 1);
    {
        no_launcher env;
        cv::runtime rt;
        CHECK(rt.io_lanes() == 1);
        CHECK(rt.options().compute_threads == 1);
    }
}

TEST_CASE("local_ranks reads the ranks on this node from torchrun, Slurm or Open MPI, in that order")
{
    no_launcher env;
    CHECK(cv::local_ranks() == 1);
    CHECK(cv::local_ranks(8) == 1); // devices count only where a launcher set LOCAL_RANK
    env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "3");
    CHECK(cv::local_ranks() == 3);
    env.set("SLURM_TASKS_PER_NODE", "2(x3),1");
    CHECK(cv::local_ranks() == 2); // no SLURM_NODEID: the largest entry
    env.set("SLURM_NODEID", "3");
    CHECK(cv::local_ranks() == 1);
    env.set("SLURM_NODEID", "1");
    CHECK(cv::local_ranks() == 2);
    env.set("SLURM_TASKS_PER_NODE", "4,2(x2),7");
    env.set("SLURM_NODEID", "2");
    CHECK(cv::local_ranks() == 2);
    env.set("SLURM_NODEID", "3");
    CHECK(cv::local_ranks() == 7);
    env.set("SLURM_NTASKS_PER_NODE", " 4\n"); // the request, before the step's list; every node
    env.set("SLURM_NODEID", "9");
    CHECK(cv::local_ranks() == 4);
    env.set("LOCAL_WORLD_SIZE", "8");
    CHECK(cv::local_ranks() == 8);
    env.set("LOCAL_RANK", "5");
    CHECK(cv::local_ranks(2) == 8);
}

TEST_CASE("local_ranks counts the devices where a launcher set LOCAL_RANK and no count of the node's ranks")
{
    no_launcher env;
    env.set("LOCAL_RANK", "1");
    CHECK(cv::local_ranks(4) == 4);
    CHECK(cv::local_ranks() == 1); // devices not known
    env.set("SLURM_NTASKS_PER_NODE", "2");
    CHECK(cv::local_ranks(4) == 2); // a launcher's count comes first
}

TEST_CASE("a malformed count of the node's ranks is an error that names the variable")
{
    no_launcher env;
    env.set("LOCAL_WORLD_SIZE", "eight");
    check_says(local_ranks_error(), "LOCAL_WORLD_SIZE=\"eight\" is not a whole number");
    env.set("LOCAL_WORLD_SIZE", "0");
    check_says(local_ranks_error(), "LOCAL_WORLD_SIZE=0: a node runs at least 1 rank");
    env.unset("LOCAL_WORLD_SIZE");
    for (const char* bad : {"", "x", "2(x", "2(x0)", "2(x3", "2(3)", "2,", ",2", "2(x3),,1", "-1", "4 4"}) {
        CAPTURE(bad);
        env.set("SLURM_NTASKS_PER_NODE", bad);
        check_says(local_ranks_error(), std::string("SLURM_NTASKS_PER_NODE=\"") + bad + "\" is not a count of tasks per node (\"4\", or Slurm's list \"2(x3),1\")");
    }
    env.unset("SLURM_NTASKS_PER_NODE");
    env.set("SLURM_TASKS_PER_NODE", "2(x3),1");
    env.set("SLURM_NODEID", "4");
    check_says(local_ranks_error(), "SLURM_NODEID=4 is past the nodes that SLURM_TASKS_PER_NODE=\"2(x3),1\" counts");
    env.set("SLURM_NODEID", "first");
    check_says(local_ranks_error(), "SLURM_NODEID=\"first\" is not a whole number");
    env.set("SLURM_NODEID", "0");
    env.set("SLURM_TASKS_PER_NODE", "0(x2)");
    check_says(local_ranks_error(), "SLURM_TASKS_PER_NODE=0: a node runs at least 1 rank");
    env.unset("SLURM_TASKS_PER_NODE");
    env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "2.5");
    check_says(local_ranks_error(), "OMPI_COMM_WORLD_LOCAL_SIZE=\"2.5\" is not a whole number");
}

TEST_CASE("a runtime's default compute threads are this rank's share of the usable cores")
{
    no_launcher env;
    const std::size_t cores = cv::usable_cpus();
    env.set("LOCAL_WORLD_SIZE", "2");
    {
        cv::runtime rt(cv::runtime_options{.io_threads = 1});
        CHECK(rt.options().compute_threads == std::max<std::size_t>(cores / 2, 1));
    }
    env.set("LOCAL_WORLD_SIZE", std::to_string(cores * 4 + 3)); // more ranks than cores: one thread each
    {
        cv::runtime rt(cv::runtime_options{.io_threads = 1});
        CHECK(rt.options().compute_threads == 1);
    }
    env.unset("LOCAL_WORLD_SIZE");
    env.set("LOCAL_RANK", "0");
    {
        cv::runtime rt(cv::runtime_options{.io_threads = 1, .local_devices = 2});
        CHECK(rt.options().compute_threads == std::max<std::size_t>(cores / 2, 1));
    }
    // Threads asked for are taken as given, and the environment is not read for them.
    env.set("LOCAL_WORLD_SIZE", "not a number");
    {
        cv::runtime rt(cv::runtime_options{.io_threads = 1, .compute_threads = 3});
        CHECK(rt.options().compute_threads == 3);
    }
    CHECK_THROWS_AS(cv::runtime(cv::runtime_options{.io_threads = 1}), cv::error);
}

TEST_CASE("CONVEYOR_IO_BACKEND chooses the file backend only when the options leave it automatic")
{
    const char* old = std::getenv("CONVEYOR_IO_BACKEND");
    const std::string saved = old ? old : "";
    ::setenv("CONVEYOR_IO_BACKEND", "pread", 1);
    {
        cv::runtime rt(cv::runtime_options{.io_threads = 1, .compute_threads = 1});
        CHECK(rt.options().backend == cv::io_backend::pread);
        cv::runtime explicit_uring(cv::runtime_options{.io_threads = 1, .compute_threads = 1, .backend = cv::io_backend::uring});
        CHECK(explicit_uring.options().backend == cv::io_backend::uring);
    }
    ::setenv("CONVEYOR_IO_BACKEND", "uring", 1);
    {
        cv::runtime rt(cv::runtime_options{.io_threads = 1, .compute_threads = 1});
        CHECK(rt.options().backend == cv::io_backend::uring);
    }
    ::setenv("CONVEYOR_IO_BACKEND", "nonsense", 1);
    {
        cv::runtime rt(cv::runtime_options{.io_threads = 1, .compute_threads = 1});
        CHECK(rt.options().backend == cv::io_backend::automatic);
    }
    if (old) ::setenv("CONVEYOR_IO_BACKEND", saved.c_str(), 1);
    else ::unsetenv("CONVEYOR_IO_BACKEND");
}

TEST_CASE("the compute and blocking pools run work off the I/O threads")
{
    cv::runtime rt(cv::runtime_options{.io_threads = 2, .compute_threads = 2, .blocking_threads = 2});
    const auto lanes = test::lane_threads(rt);
    for (bool blocking : {false, true}) {
        CAPTURE(blocking);
        std::promise<std::pair<int, std::thread::id>> where;
        auto f = where.get_future();
        auto work = [&where] { where.set_value({cv::detail::current_lane, std::this_thread::get_id()}); };
        if (blocking) asio::post(rt.blocking_executor(), work);
        else asio::post(rt.compute_executor(), work);
        REQUIRE(f.wait_for(test::generous) == std::future_status::ready);
        const auto [lane, id] = f.get();
        CHECK(lane == -1);
        CHECK(std::find(lanes.begin(), lanes.end(), id) == lanes.end());
    }
    CHECK(rt.blocking_executor() == rt.blocking_executor()); // created once
}

TEST_CASE("a runtime logs through its log option, and log_once once per topic")
{
    test::log_capture log;
    cv::runtime rt(cv::runtime_options{.io_threads = 1, .compute_threads = 1, .log = log.sink()});
    rt.log("hello");
    rt.log_once("uring", "io_uring unavailable, using pread");
    rt.log_once("uring", "io_uring unavailable, using pread (again)");
    rt.log_once("other", "another topic");
    rt.log_once("uring", "still not");
    CHECK(log.lines() == std::vector<std::string>{"hello", "io_uring unavailable, using pread", "another topic"});
    cv::runtime fresh(cv::runtime_options{.io_threads = 1, .compute_threads = 1, .log = log.sink()});
    fresh.log_once("uring", "per runtime");
    CHECK(log.lines().back() == "per runtime");
}

TEST_CASE("a runtime's buffer pool follows its options")
{
    cv::runtime rt(cv::runtime_options{.io_threads = 1, .compute_threads = 1, .buffer_pool_bytes = 0});
    { auto b = rt.buffers().acquire(10'000); CHECK(b.size() == 10'000); }
    CHECK(rt.buffers().cached_bytes() == 0);
    cv::runtime caching(cv::runtime_options{.io_threads = 1, .compute_threads = 1});
    { auto b = caching.buffers().acquire(10'000); }
    CHECK(caching.buffers().cached_bytes() > 0);
}

// ==== cancellation and shutdown ===============================================================

TEST_CASE("destroying the runtime while a coroutine map waits on a long timer returns promptly")
{
    std::optional<cv::runtime> rt(std::in_place, cv::runtime_options{.io_threads = 1, .compute_threads = 1});
    auto waiting = std::make_shared<std::atomic<int>>(0);
    auto p = cv::from_range(iota(100)).on(*rt) | cv::map(
                                                     [waiting](int x) -> asio::awaitable<int> {
                                                         asio::steady_timer t(co_await asio::this_coro::executor, 1h);
                                                         ++*waiting;
                                                         co_await t.async_wait(asio::use_awaitable);
                                                         co_return x;
                                                     },
                                                     {.concurrency = 4});
    auto r = p.run();
    REQUIRE(test::eventually([&] { return *waiting == 4; }));
    test::finishes_within(test::generous, "destroying a runtime whose run waits on 1-hour timers", [&] { rt.reset(); });
    std::exception_ptr caught;
    test::finishes_within(test::generous, "reading a run whose runtime is gone", [&] {
        try {
            (void)r.next();
        } catch (...) {
            caught = std::current_exception();
        }
    });
    CHECK(code_of(caught) == cv::errc::cancelled);
}

TEST_CASE("destroying the runtime while a run is in flight neither hangs nor crashes")
{
    std::optional<cv::range<int>> r;
    std::vector<int> before;
    test::finishes_within(test::generous, "destroying a runtime with a run in flight", [&] {
        cv::runtime rt(cv::runtime_options{.io_threads = 2, .compute_threads = 2});
        auto p = cv::generate(1'000'000'000, [](std::uint64_t i) { return static_cast<int>(i); }).on(rt) |
                 cv::map([](int x) { return x * 2; }, {.concurrency = 8, .where = cv::run_on::compute});
        r.emplace(p.run());
        for (int i = 0; i < 10; ++i) before.push_back(r->next().value());
    }); // the runtime goes first; the range lives on
    std::vector<int> expected;
    for (int i = 0; i < 10; ++i) expected.push_back(2 * i);
    CHECK(before == expected);

    // What the range had already taken can still be read; then it says it was cancelled.
    int more = 0;
    std::exception_ptr caught;
    test::finishes_within(test::generous, "reading a run whose runtime is gone", [&] {
        try {
            while (r->next()) ++more;
        } catch (...) {
            caught = std::current_exception();
        }
    });
    CHECK(more < 1000); // only what the range had already taken from the sink
    REQUIRE(caught);
    CHECK(code_of(caught) == cv::errc::cancelled);
    test::finishes_within(test::generous, "destroying a range after its runtime", [&] { r.reset(); });
}

TEST_CASE("a consumer blocked in next() wakes with errc::cancelled when the runtime is destroyed")
{
    std::optional<cv::runtime> rt(std::in_place, cv::runtime_options{.io_threads = 1, .compute_threads = 1});
    // A run that never produces anything: the consumer waits.
    auto p = cv::generate(1'000'000'000, [](std::uint64_t i) { return static_cast<int>(i); }).on(*rt) |
             cv::filter([](const int&) { return false; });
    auto r = p.run();
    std::exception_ptr caught;
    std::atomic<bool> returned{false};
    std::thread consumer([&] {
        try {
            (void)r.next();
            returned = true;
        } catch (...) {
            caught = std::current_exception();
        }
    });
    std::this_thread::sleep_for(20ms); // most likely blocked by now; either way it must wake
    test::finishes_within(test::generous, "destroying a runtime with a blocked consumer", [&] { rt.reset(); });
    test::finishes_within(test::generous, "the consumer to wake", [&] { consumer.join(); });
    CHECK_FALSE(returned);
    REQUIRE(caught);
    CHECK(code_of(caught) == cv::errc::cancelled);
}
