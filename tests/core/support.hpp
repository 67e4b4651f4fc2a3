// tests/core/support.hpp — helpers shared by the core tests (not a translation unit).
#ifndef CONVEYOR_TESTS_CORE_SUPPORT_HPP
#define CONVEYOR_TESTS_CORE_SUPPORT_HPP

#include <conveyor/core/stages.hpp>

#include <doctest/doctest.h>

#include "../support/common.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace test {

using namespace conveyor_test; // finishes_within, eventually, log_capture, run_probe, mix

namespace asio = boost::asio;
using namespace std::chrono_literals;

/// How long something that must happen promptly may take before the test calls it a hang.
/// Generous on purpose: the sanitizer builds run on a shared two-core machine.
inline constexpr std::chrono::seconds generous{30};
/// The limit for tests that reproduce a known hang (a bug): long enough to be sure, short
/// enough that the suite stays usable while the bug is open.
inline constexpr std::chrono::seconds known_hang{5};



/// Reads a pipeline to its end (on a helper thread, bounded) and returns what it produced.
template <class T>
std::vector<T> collect(conveyor::pipeline<T>& p, const char* what = "reading a pipeline")
{
    std::vector<T> out;
    finishes_within(generous, what, [&] {
        for (auto& x : p) out.push_back(std::move(x));
    });
    return out;
}

/// Reads a started run to its end (bounded).
template <class T>
std::vector<T> collect(conveyor::range<T>& r, const char* what = "reading a run")
{
    std::vector<T> out;
    finishes_within(generous, what, [&] {
        for (auto& x : r) out.push_back(std::move(x));
    });
    return out;
}



/// Runs what is ready on `io` until nothing is: after it, every coroutine on `io` has run as
/// far as it can.
inline void settle(asio::io_context& io)
{
    // poll() also stops early when the io_context runs out of counted work (a coroutine
    // parked in a channel's waiter list is not counted), so go on until nothing is ready.
    do {
        io.restart();
    } while (io.poll() > 0);
}

/// 0, 1, ..., n-1 (shifted by `from`).
inline std::vector<int> iota(int n, int from = 0)
{
    std::vector<int> v(static_cast<std::size_t>(n));
    std::iota(v.begin(), v.end(), from);
    return v;
}

/// A `generate` function that counts its calls in `calls`.
inline auto count_calls(std::shared_ptr<std::atomic<std::uint64_t>> calls)
{
    return [calls](std::uint64_t i) {
        ++*calls;
        return static_cast<int>(i);
    };
}

/// The threads of a runtime's I/O lanes.
inline std::vector<std::thread::id> lane_threads(conveyor::runtime& rt)
{
    std::vector<std::thread::id> ids;
    for (std::size_t i = 0; i < rt.io_lanes(); ++i) {
        std::promise<std::thread::id> p;
        auto f = p.get_future();
        asio::post(rt.io_executor(i), [&p] { p.set_value(std::this_thread::get_id()); });
        REQUIRE(f.wait_for(generous) == std::future_status::ready);
        ids.push_back(f.get());
    }
    return ids;
}

/// True when `text` holds a byte that a terminal or a log reader would act on or hide: a C0

/// An item with a key, as sources produce (errors name the key).
struct sample {
    std::string key;
    int value = 0;
    friend bool operator==(const sample&, const sample&) = default;
};

inline std::vector<sample> samples(int n)
{
    std::vector<sample> v;
    for (int i = 0; i < n; ++i) v.push_back({"k" + std::to_string(i), i});
    return v;
}

/// An item that counts how many of its kind exist, to see what a run still holds.
struct tracked {
    explicit tracked(std::shared_ptr<std::atomic<int>> l, int v = 0) : live(std::move(l)), value(v) { ++*live; }
    tracked(const tracked& o) : live(o.live), value(o.value) { ++*live; }
    tracked(tracked&& o) noexcept : live(o.live), value(o.value) { ++*live; }
    tracked& operator=(const tracked&) = default;
    tracked& operator=(tracked&&) noexcept = default;
    ~tracked() { --*live; }
    std::shared_ptr<std::atomic<int>> live;
    int value;
};


} // namespace test

#endif
