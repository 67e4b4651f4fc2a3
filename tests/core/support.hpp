// tests/core/support.hpp — helpers shared by the core tests (not a translation unit).
#ifndef CONVEYOR_TESTS_CORE_SUPPORT_HPP
#define CONVEYOR_TESTS_CORE_SUPPORT_HPP

#include <conveyor/core/stages.hpp>

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

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
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace test {

namespace asio = boost::asio;
using namespace std::chrono_literals;

/// How long something that must happen promptly may take before the test calls it a hang.
/// Generous on purpose: the sanitizer builds run on a shared two-core machine.
inline constexpr std::chrono::seconds generous{30};
/// The limit for tests that reproduce a known hang (a bug): long enough to be sure, short
/// enough that the suite stays usable while the bug is open.
inline constexpr std::chrono::seconds known_hang{5};

/** Runs `f` on a thread of its own and waits at most `limit` for it.

    Returns true when `f` finished (its exception, if any, is rethrown here). Returns false
    when it did not: `rescue` is then called to unstick it (e.g. cancel the run by hand) and
    `f`'s outcome is ignored. If there is no rescue, or `f` is still stuck after it, the
    process ends with a message: a stuck thread holding the test's state cannot be left
    behind, and hanging until ctest's timeout says less. */
template <class F>
bool finishes_within(std::chrono::seconds limit, const char* what, F f, const std::function<void()>& rescue = {})
{
    std::packaged_task<void()> task(std::move(f));
    auto done = task.get_future();
    std::thread runner(std::move(task));
    if (done.wait_for(limit) == std::future_status::ready) {
        runner.join();
        done.get();
        return true;
    }
    if (rescue) {
        rescue();
        if (done.wait_for(limit) == std::future_status::ready) {
            runner.join();
            try {
                done.get();
            } catch (...) {
            }
            return false;
        }
    }
    std::fprintf(stderr, "\nFATAL: '%s' did not finish within %llds%s; ending the test run\n", what,
                 static_cast<long long>(limit.count()), rescue ? " even after the rescue" : "");
    std::fflush(stderr);
    std::_Exit(3);
}

/// Polls `pred` until it is true or `limit` passes; returns its last value.
template <class Pred>
bool eventually(Pred pred, std::chrono::seconds limit = generous)
{
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!pred()) {
        if (std::chrono::steady_clock::now() > deadline) return pred();
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

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

/// Collects the lines a runtime logs.
class log_capture {
public:
    std::function<void(std::string_view)> sink() const
    {
        return [s = s_](std::string_view line) {
            std::lock_guard lk(s->mu);
            s->lines.emplace_back(line);
        };
    }
    std::vector<std::string> lines() const
    {
        std::lock_guard lk(s_->mu);
        return s_->lines;
    }

private:
    struct state {
        std::mutex mu;
        std::vector<std::string> lines;
    };
    std::shared_ptr<state> s_ = std::make_shared<state>();
};

/** An identity stage that remembers the run it was built into and the stream it passes
    on (the sink, when it is the last stage): tests use it to watch a run, and to rescue one
    that a bug left stuck. Holds only weak references. */
class run_probe {
public:
    template <class T>
    conveyor::stream<T> operator()(const std::shared_ptr<conveyor::run_context>& ctx, conveyor::stream<T> in) const
    {
        std::lock_guard lk(s_->mu);
        s_->ctx = ctx;
        s_->out = in.channel();
        return in;
    }
    std::shared_ptr<conveyor::run_context> run() const
    {
        std::lock_guard lk(s_->mu);
        return s_->ctx.lock();
    }
    /// Cancels the whole run (what destroying its range does).
    void cancel_run() const
    {
        if (auto c = run()) c->cancel();
    }
    /// Cancels the stream this probe passed on, even where the run would keep it.
    void cancel_stream() const
    {
        std::shared_ptr<conveyor::detail::channel_base> ch;
        {
            std::lock_guard lk(s_->mu);
            ch = s_->out.lock();
        }
        if (ch) ch->cancel();
    }

private:
    struct state {
        std::mutex mu;
        std::weak_ptr<conveyor::run_context> ctx;
        std::weak_ptr<conveyor::detail::channel_base> out;
    };
    std::shared_ptr<state> s_ = std::make_shared<state>();
};

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

/// A 64-bit mix of `x` (SplitMix64's finaliser), for deterministic pseudo-random delays.
inline std::uint64_t mix(std::uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

} // namespace test

#endif
