// Tests of conveyor/core/mix.hpp: several pipelines drawn from by weight (the draws, the stop
// rules, weight schedules), and the mix's resume state (exactly once, also on another
// number of ranks and across the passes of a source started again).
#include "support.hpp"

#include <conveyor/core/mix.hpp>
#include <conveyor/core/source.hpp>

#include <boost/asio/steady_timer.hpp>
#include <boost/json.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace asio = boost::asio;
namespace cv = conveyor;
using namespace std::chrono_literals;

namespace {

/// An item that carries its mix origin, and the epoch its source ran.
struct tagged {
    std::uint64_t value = 0;
    std::uint64_t epoch = 0;
    std::uint32_t source = 0;
    std::uint64_t pass = 0;
};

/// `n` tagged items 0 … n-1, each knowing the epoch its run was built for.
cv::pipeline<tagged> numbers(std::uint64_t n)
{
    return cv::pipeline<tagged>([n](const std::shared_ptr<cv::run_context>& ctx) {
        const std::uint64_t e = ctx->epoch();
        return cv::generate(n, [e](std::uint64_t i) { return tagged{.value = i, .epoch = e}; }).build(ctx);
    });
}

/// Waits `d` on the calling coroutine's executor.
asio::awaitable<void> pause(std::chrono::microseconds d)
{
    asio::steady_timer t(co_await asio::this_coro::executor, d);
    co_await t.async_wait(asio::use_awaitable);
}

/// A list source of `n` blobs keyed "<name>/<i>" (`label`: the epoch it was read in), its
/// reads delayed by up to `delay_us` when asked (so they finish out of order).
cv::pipeline<cv::blob> files(std::string name, std::uint64_t n, cv::epoch_options e = {}, unsigned delay_us = 0)
{
    return cv::keyed_source<cv::blob>(name, n, {.concurrency = 4, .epochs = std::move(e)}, [name, delay_us](cv::run_context& ctx) {
        const std::uint64_t epoch = ctx.epoch();
        return [name, epoch, delay_us](std::uint64_t i) -> asio::awaitable<cv::blob> {
            if (delay_us) co_await pause(std::chrono::microseconds(test::mix(i * 31 + epoch) % delay_us));
            cv::blob b;
            b.key = name + "/" + std::to_string(i);
            b.index = i;
            b.label = static_cast<std::int64_t>(epoch);
            co_return b;
        };
    });
}

template <class T>
std::vector<std::uint32_t> sources_of(const std::vector<T>& items)
{
    std::vector<std::uint32_t> out;
    for (const auto& x : items) out.push_back(x.source);
    return out;
}

std::string error_of(const std::function<void()>& f)
{
    try {
        f();
    } catch (const cv::error& e) {
        return e.what();
    }
    return "(no error)";
}

/// The position of the `n`-th (1-based) item of source `k` in `seq`, or seq.size().
std::size_t nth_of(const std::vector<std::uint32_t>& seq, std::uint32_t k, std::size_t n)
{
    std::size_t seen = 0;
    for (std::size_t i = 0; i < seq.size(); ++i)
        if (seq[i] == k && ++seen == n) return i;
    return seq.size();
}

} // namespace

TEST_CASE("a mix of one source is that source")
{
    cv::runtime rt({.io_threads = 1, .compute_threads = 1});
    auto p = cv::mix<tagged>({numbers(500)}, {.share = cv::split{}}).on(rt);
    const auto got = test::collect(p);
    REQUIRE(got.size() == 500);
    for (std::uint64_t i = 0; i < got.size(); ++i) {
        CHECK(got[i].value == i);
        CHECK(got[i].source == 0);
        CHECK(got[i].pass == 0);
    }
}

TEST_CASE("the draws are a pure function of the seed, the epoch and the slot, never of timing")
{
    cv::runtime rt({.io_threads = 2, .compute_threads = 1});
    auto make = [&](unsigned delay, std::uint64_t seed, cv::split share) {
        return cv::mix<cv::blob>({files("a", 300, {}, delay), files("b", 300, {}, delay), files("c", 300, {}, delay)},
                                 {.weights = {1, 2, 3}, .seed = seed, .share = share})
            .on(rt);
    };
    auto keys = [](const std::vector<cv::blob>& v) {
        std::vector<std::string> out;
        for (const auto& b : v) out.push_back(b.key);
        return out;
    };
    auto plain = make(0, 7, {});
    auto slow = make(300, 7, {}); // the sources' reads finish out of order and late
    const auto a = test::collect(plain);
    const auto b = test::collect(slow);
    REQUIRE(a.size() == 900);
    CHECK(keys(a) == keys(b));
    // Each source's items keep their order.
    std::map<std::uint32_t, std::uint64_t> next;
    for (const auto& x : a) CHECK(x.index == next[x.source]++);

    auto again = make(0, 7, {});
    CHECK(keys(test::collect(again)) == keys(a));
    auto other_seed = make(0, 8, {});
    CHECK(sources_of(test::collect(other_seed)) != sources_of(a));
    auto p = make(0, 7, {});
    std::vector<cv::blob> e1;
    for (auto& x : p.run(1)) e1.push_back(std::move(x));
    CHECK(sources_of(e1) != sources_of(a));
    auto slot1 = make(0, 7, {.rank = 1, .world_size = 2});
    CHECK(sources_of(test::collect(slot1)) != sources_of(a));
}

TEST_CASE("the sources are drawn from in proportion to their weights")
{
    cv::runtime rt({.io_threads = 1, .compute_threads = 1});
    const std::vector<double> w{0.5, 0.3, 0.2};
    for (const std::uint64_t slot : {0, 1}) {
        CAPTURE(slot);
        auto p = (cv::mix<tagged>({numbers(100'000), numbers(100'000), numbers(100'000)},
                                  {.weights = w, .seed = 11, .share = cv::split{.rank = slot, .world_size = 2}}) |
                  cv::take(30'000))
                     .on(rt);
        std::vector<double> count(3, 0);
        for (const auto& x : test::collect(p)) ++count[x.source];
        // Pearson's chi-square against the weights: 2 degrees of freedom, 13.8 at p = 0.001.
        double chi2 = 0;
        for (std::size_t k = 0; k < 3; ++k) {
            const double expected = 30'000 * w[k];
            chi2 += (count[k] - expected) * (count[k] - expected) / expected;
        }
        CHECK(chi2 < 13.8);
    }
    // A weight of 0 is never drawn.
    auto p = (cv::mix<tagged>({numbers(1000), numbers(1000)}, {.weights = {0, 1}, .share = cv::split{}}) | cv::take(500)).on(rt);
    for (const auto& x : test::collect(p)) CHECK(x.source == 1);
}

TEST_CASE("stop first ends at the first draw of a source with nothing left")
{
    cv::runtime rt({.io_threads = 1, .compute_threads = 1});
    auto forever = (cv::mix<tagged>({numbers(10), numbers(1000)}, {.stop = cv::mix_stop::never, .seed = 3, .share = cv::split{}}) |
                    cv::take(600))
                       .on(rt);
    const auto endless = sources_of(test::collect(forever));
    const std::size_t end = nth_of(endless, 0, 11); // where source 0 is drawn an 11th time
    REQUIRE(end < endless.size());
    auto first = cv::mix<tagged>({numbers(10), numbers(1000)}, {.stop = cv::mix_stop::first, .seed = 3, .share = cv::split{}}).on(rt);
    const auto got = test::collect(first);
    CHECK(sources_of(got) == std::vector<std::uint32_t>(endless.begin(), endless.begin() + static_cast<std::ptrdiff_t>(end)));
}

TEST_CASE("stop all drops a source that ran out and renormalises the weights over the others")
{
    cv::runtime rt({.io_threads = 1, .compute_threads = 1});
    const std::vector<double> w{0.8, 0.1, 0.1};
    auto forever = (cv::mix<tagged>({numbers(100), numbers(5000), numbers(5000)}, {.weights = w, .stop = cv::mix_stop::never, .seed = 5,
                                                                                  .share = cv::split{}}) |
                    cv::take(2000))
                       .on(rt);
    const auto endless = sources_of(test::collect(forever));
    const std::size_t out = nth_of(endless, 0, 101);
    REQUIRE(out < 1000);
    // From there on, the draws over sources 1 and 2 alone: those of weights {0, 0.1, 0.1}.
    auto without = (cv::mix<tagged>({numbers(100), numbers(5000), numbers(5000)}, {.weights = {0, 0.1, 0.1}, .seed = 5, .share = cv::split{}}) |
                    cv::take(2000))
                       .on(rt);
    const auto rest = sources_of(test::collect(without));
    auto all = cv::mix<tagged>({numbers(100), numbers(5000), numbers(5000)}, {.weights = w, .stop = cv::mix_stop::all, .seed = 5,
                                                                             .share = cv::split{}})
                   .on(rt);
    const auto got = test::collect(all);
    REQUIRE(got.size() == 10'100); // every item of every source
    const auto seq = sources_of(got);
    CHECK(std::equal(seq.begin(), seq.begin() + static_cast<std::ptrdiff_t>(out), endless.begin()));
    CHECK(std::equal(seq.begin() + static_cast<std::ptrdiff_t>(out), seq.begin() + 2000, rest.begin() + static_cast<std::ptrdiff_t>(out)));
    std::vector<std::uint64_t> next(3, 0);
    for (const auto& x : got) CHECK(x.value == next[x.source]++);
}

TEST_CASE("stop never starts a source that ran out again with its next epoch")
{
    cv::runtime rt({.io_threads = 1, .compute_threads = 1});
    auto p = (cv::mix<tagged>({numbers(5), numbers(100'000)}, {.stop = cv::mix_stop::never, .seed = 1, .share = cv::split{}}) | cv::take(400))
                 .on(rt);
    std::vector<tagged> got;
    for (auto& x : p.run(10)) got.push_back(x);
    REQUIRE(got.size() == 400);
    std::uint64_t pass = 0, next = 0;
    for (const auto& x : got) {
        if (x.source == 1) {
            CHECK(x.pass == 0);
            CHECK(x.epoch == 10);
            continue;
        }
        if (next == 5) {
            next = 0;
            ++pass;
        }
        CHECK(x.pass == pass);
        CHECK(x.epoch == 10 + pass); // the p-th start again reads epoch e + p
        CHECK(x.value == next++);
    }
    CHECK(pass > 30);

    // A source with nothing in a pass cannot be started again.
    auto empty = (cv::mix<tagged>({numbers(0), numbers(10)}, {.stop = cv::mix_stop::never, .share = cv::split{}}) | cv::take(100)).on(rt);
    CHECK(error_of([&] { test::collect(empty); }).find("source 0 has no items in its pass 0") != std::string::npos);
}

TEST_CASE("a schedule gives the weights by global index, asked at multiples of its step")
{
    cv::runtime rt({.io_threads = 1, .compute_threads = 1});
    auto asked = std::make_shared<std::vector<std::uint64_t>>();
    auto mu = std::make_shared<std::mutex>();
    const cv::mix_schedule switch_at_1000 = [asked, mu](std::uint64_t g) {
        std::lock_guard lk(*mu);
        asked->push_back(g);
        return g < 1000 ? std::vector<double>{1, 0} : std::vector<double>{0, 1};
    };
    for (const std::uint64_t slot : {0, 1}) {
        CAPTURE(slot);
        asked->clear();
        auto p = (cv::mix<tagged>({numbers(5000), numbers(5000)},
                                  {.schedule = switch_at_1000, .schedule_step = 100, .share = cv::split{.rank = slot, .world_size = 2}}) |
                  cv::take(1000))
                     .on(rt);
        const auto got = test::collect(p);
        // Draw i of slot s has global index 2i + s: the weights change at i = 500.
        for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i].source == (i < 500 ? 0u : 1u));
        std::lock_guard lk(*mu);
        CHECK(asked->front() == 0);
        for (const auto g : *asked) CHECK(g % 100 == 0);
        // Index 0 when built, then each multiple of 100 once as the draws pass it.
        CHECK(std::is_sorted(asked->begin() + 1, asked->end()));
        CHECK(std::adjacent_find(asked->begin() + 1, asked->end()) == asked->end());
        CHECK(asked->size() >= 21);
    }
    // A schedule that turns bad fails the run, naming the index.
    auto bad = cv::mix<tagged>({numbers(5000), numbers(5000)},
                               {.schedule = [](std::uint64_t g) { return g < 300 ? std::vector<double>{1, 1} : std::vector<double>{1, -1}; },
                                .schedule_step = 50,
                                .share = cv::split{}})
                   .on(rt);
    const auto e = error_of([&] { test::collect(bad); });
    CHECK(e.find("the schedule's weights at index 300") != std::string::npos);
    CHECK(e.find("source 1's weight is -1") != std::string::npos);
}

TEST_CASE("a mix refuses bad weights, steps, states and sources when it is built")
{
    auto one = [] { return numbers(3); };
    CHECK(error_of([&] { cv::mix<tagged>({}, {}); }).find("at least one source") != std::string::npos);
    CHECK(error_of([&] { cv::mix<tagged>({one(), one()}, {.weights = {1}}); }).find("the weights are 1 for 2 source(s)") != std::string::npos);
    CHECK(error_of([&] { cv::mix<tagged>({one(), one()}, {.weights = {1, -0.5}}); }).find("source 1's weight is -0.5") != std::string::npos);
    CHECK(error_of([&] { cv::mix<tagged>({one(), one()}, {.weights = {NAN, 1}}); }).find("source 0's weight is nan") != std::string::npos);
    CHECK(error_of([&] { cv::mix<tagged>({one(), one()}, {.weights = {INFINITY, 1}}); }).find("weight is inf") != std::string::npos);
    CHECK(error_of([&] { cv::mix<tagged>({one(), one()}, {.weights = {0, 0}}); }).find("are all 0") != std::string::npos);
    CHECK(error_of([&] { cv::mix<tagged>({one(), one()}, {.schedule_step = 0}); }).find("schedule_step") != std::string::npos);
    CHECK(error_of([&] { cv::mix<tagged>({one(), one()}, {.schedule = [](std::uint64_t) { return std::vector<double>{1, 2, 3}; }}); })
              .find("the schedule's weights at index 0 are 3 for 2") != std::string::npos);
    CHECK(error_of([&] { cv::mix<tagged>({one()}, {.share = cv::split{.rank = 2, .world_size = 2}}); }).find("not a valid share") != std::string::npos);
    CHECK(error_of([&] { cv::mix<tagged>({one()}, {.resume = std::make_shared<cv::mix_progress>(2)}); })
              .find("the resume state is for 2 source(s), the mix has 1") != std::string::npos);
    CHECK(error_of([&] { cv::mix<int>({cv::generate(3, [](std::uint64_t i) { return int(i); })}, {.resume = std::make_shared<cv::mix_progress>(1)}); })
              .find("items that carry their source") != std::string::npos);
    cv::runtime other({.io_threads = 1, .compute_threads = 1});
    CHECK(error_of([&] { cv::mix<tagged>({one(), one().on(other)}, {}); }).find("different runtimes") != std::string::npos);
    const auto e = error_of([&] { cv::mix<tagged>({}, {}); });
    CHECK(e.find("mix") != std::string::npos);
}

TEST_CASE("a source that does not keep its state in the mix's fails the run, saying so")
{
    cv::runtime rt({.io_threads = 1, .compute_threads = 1});
    auto state = std::make_shared<cv::mix_progress>(2);
    auto p = cv::mix<cv::blob>({files("a", 10, {.resume = state->source(0)}), files("b", 10)}, {.share = cv::split{}, .resume = state}).on(rt);
    CHECK(error_of([&] { test::collect(p); }).find("source 1 did not plan its run (pass 0) from its resume state") != std::string::npos);
}

TEST_CASE("a source's failure fails the mix, also in a pass started again")
{
    cv::runtime rt({.io_threads = 1, .compute_threads = 1});
    auto failing = cv::pipeline<tagged>([](const std::shared_ptr<cv::run_context>& ctx) {
        const std::uint64_t e = ctx->epoch();
        return cv::generate(4, [e](std::uint64_t i) {
                   if (e == 3 && i == 2) throw std::runtime_error("item 2 of epoch 3 is bad");
                   return tagged{.value = i, .epoch = e};
               }).build(ctx);
    });
    auto p = (cv::mix<tagged>({failing, numbers(100'000)}, {.stop = cv::mix_stop::never, .share = cv::split{}}) | cv::take(10'000)).on(rt);
    std::vector<tagged> got;
    const auto e = error_of([&] {
        for (auto& x : p.run(0)) got.push_back(x);
    });
    CHECK(e.find("item 2 of epoch 3 is bad") != std::string::npos); // the fourth pass, read in a nested run
}

TEST_CASE("breaking out of a mix stops every source, also those started again")
{
    cv::runtime rt({.io_threads = 2, .compute_threads = 1});
    auto p = cv::mix<tagged>({numbers(3), numbers(cv::endless), cv::mix<tagged>({numbers(cv::endless)}, {.share = cv::split{}})},
                             {.stop = cv::mix_stop::never, .share = cv::split{}})
                 .on(rt);
    CHECK(test::finishes_within(test::generous, "breaking out of a mix", [&] {
        std::uint64_t n = 0;
        for (auto& x : p) {
            (void)x;
            if (++n == 5000) break;
        }
    }));
    auto r = p.run(0);
    const auto snap = r.snapshot();
    CHECK(std::any_of(snap.stages.begin(), snap.stages.end(), [](const cv::stage_stats& s) { return s.name == "mix"; }));
    CHECK(snap.stages.back().name == "mix");
}

TEST_CASE("a mix resumed from its state reads each item once and draws on from where it stopped")
{
    cv::runtime rt({.io_threads = 2, .compute_threads = 1});
    const std::vector<std::uint64_t> sizes{400, 600, 800};
    auto build = [&](std::shared_ptr<cv::mix_progress> state, cv::mix_stop stop) {
        std::vector<cv::pipeline<cv::blob>> src;
        for (std::size_t k = 0; k < sizes.size(); ++k)
            src.push_back(files(std::string(1, char('a' + k)), sizes[k],
                                {.order = {.seed = 3, .shuffle = true}, .share = cv::split{}, .resume = state ? state->source(k) : nullptr}));
        return (cv::mix<cv::blob>(std::move(src), {.weights = {1, 1, 1}, .stop = stop, .seed = 9, .share = cv::split{}, .resume = state}) |
                cv::shuffle({.buffer = 16, .seed = 1}))
            .on(rt);
    };
    // The draws of an uninterrupted run, without the shuffle's reordering.
    auto plain = cv::mix<cv::blob>({files("a", 400, {.order = {.seed = 3, .shuffle = true}}), files("b", 600, {.order = {.seed = 3, .shuffle = true}}),
                                    files("c", 800, {.order = {.seed = 3, .shuffle = true}})},
                                   {.weights = {1, 1, 1}, .seed = 9, .share = cv::split{}})
                     .on(rt);
    std::vector<cv::blob> whole;
    for (auto& b : plain.run(2)) whole.push_back(std::move(b));
    const auto draws = sources_of(whole);

    auto state = std::make_shared<cv::mix_progress>(3);
    auto first = build(state, cv::mix_stop::all);
    std::multiset<std::string> used;
    {
        auto r = first.run(2);
        for (auto& b : r) {
            used.insert(b.key);
            CHECK(state->consumed(b));
            CHECK(!state->consumed(b)); // twice counts once
            if (used.size() == 100) break;
        }
    }
    CHECK(state->samples() == 100);
    const std::string text = state->to_json();
    CHECK(text.find("\"conveyor-mix-progress\"") != std::string::npos);
    CHECK(text.find("\"drawn\":[100]") != std::string::npos);
    const auto restored = cv::mix_progress::from_json(text);
    CHECK(restored.to_json() == text);

    auto state2 = std::make_shared<cv::mix_progress>(3);
    *state2 = restored;
    auto second = build(state2, cv::mix_stop::all);
    std::vector<cv::blob> rest;
    for (auto& b : second.run(2)) {
        used.insert(b.key);
        state2->consumed(b);
        rest.push_back(std::move(b));
    }
    CHECK(used.size() == 1800);
    for (const auto& k : used) CHECK(used.count(k) == 1);
    // The rest draws on from index 100, as the uninterrupted run did (the shuffle aside: its
    // buffer of 16 reorders within a window, so compare how many of each source the first
    // stretch held).
    auto unshuffled = [&] {
        auto s = std::make_shared<cv::mix_progress>(3);
        *s = restored;
        std::vector<cv::pipeline<cv::blob>> src;
        for (std::size_t k = 0; k < sizes.size(); ++k)
            src.push_back(files(std::string(1, char('a' + k)), sizes[k], {.order = {.seed = 3, .shuffle = true}, .share = cv::split{}, .resume = s->source(k)}));
        auto p = cv::mix<cv::blob>(std::move(src), {.weights = {1, 1, 1}, .seed = 9, .share = cv::split{}, .resume = s}).on(rt);
        std::vector<cv::blob> v;
        for (auto& b : p.run(2)) {
            v.push_back(std::move(b));
            if (v.size() == 200) break;
        }
        return sources_of(v);
    }();
    CHECK(std::equal(unshuffled.begin(), unshuffled.end(), draws.begin() + 100));
    CHECK(state2->samples() == 1800);
}

TEST_CASE("a mix's states of 2 ranks merged resume on 3 ranks, each item once")
{
    cv::runtime rt({.io_threads = 2, .compute_threads = 1});
    const std::vector<std::uint64_t> sizes{60, 90, 120};
    auto build = [&](std::shared_ptr<cv::mix_progress> state, cv::split share) {
        std::vector<cv::pipeline<cv::blob>> src;
        for (std::size_t k = 0; k < sizes.size(); ++k)
            src.push_back(files(std::string(1, char('a' + k)), sizes[k], {.order = {.seed = 4, .shuffle = true}, .share = share, .resume = state->source(k)}));
        return (cv::mix<cv::blob>(std::move(src), {.weights = {3, 2, 1}, .seed = 2, .share = share, .resume = state}) |
                cv::shuffle({.buffer = 8, .seed = 2}))
            .on(rt);
    };
    std::multiset<std::string> used;
    std::vector<cv::mix_progress> saved;
    for (std::uint64_t rank = 0; rank < 2; ++rank) {
        auto state = std::make_shared<cv::mix_progress>(3);
        auto p = build(state, {.rank = rank, .world_size = 2});
        std::size_t n = 0;
        for (auto& b : p.run(1)) {
            used.insert(b.key);
            state->consumed(b);
            if (++n == 40 + 25 * rank) break;
        }
        saved.push_back(cv::mix_progress::from_json(state->to_json()));
    }
    const auto merged = cv::mix_progress::merge(saved);
    CHECK(merged.samples() == 105);
    CHECK(cv::mix_progress::merge({merged, merged}).to_json() == merged.to_json());
    std::vector<std::uint64_t> firsts;
    for (std::uint64_t rank = 0; rank < 3; ++rank) {
        auto state = std::make_shared<cv::mix_progress>(3);
        *state = merged;
        auto p = build(state, {.rank = rank, .world_size = 3});
        for (auto& b : p.run(1)) {
            used.insert(b.key);
            state->consumed(b);
        }
        const auto j = state->to_json();
        firsts.push_back(j.find("\"start\":35") != std::string::npos); // ceil(105 / 3)
    }
    CHECK(firsts == std::vector<std::uint64_t>{1, 1, 1});
    CHECK(used.size() == 270);
    for (const auto& k : used) CHECK(used.count(k) == 1);

    // States of different epochs or mixes do not merge.
    auto other = std::make_shared<cv::mix_progress>(3);
    auto p = build(other, {.rank = 0, .world_size = 2});
    for (auto& b : p.run(5)) {
        other->consumed(b);
        break;
    }
    saved.push_back(*other);
    CHECK(error_of([&] { cv::mix_progress::merge(saved); }).find("different mixes") != std::string::npos);
}

TEST_CASE("a mix that starts sources again resumes each pass's rest once and keeps only the passes in use")
{
    cv::runtime rt({.io_threads = 2, .compute_threads = 1});
    // Source 0 (7 units) is read again and again; a shuffle after the mix holds items of
    // several of its passes when the job stops.
    auto build = [&](std::shared_ptr<cv::mix_progress> state, cv::split share, std::uint64_t n) {
        return (cv::mix<cv::blob>({files("small", 7, {.order = {.seed = 1, .shuffle = true}, .share = share, .resume = state->source(0)}),
                                   files("big", 100'000, {.order = {.seed = 1, .shuffle = true}, .share = share, .resume = state->source(1)})},
                                  {.stop = cv::mix_stop::never, .seed = 6, .share = share, .resume = state}) |
                cv::shuffle({.buffer = 20, .seed = 3}) | cv::take(n))
            .on(rt);
    };
    // The passes of source 0 whose 7 items were all marked.
    auto complete = [](const auto& seen) {
        std::map<std::uint64_t, int> n;
        for (const auto& [id, times] : seen)
            if (std::get<0>(id) == 0) ++n[std::get<1>(id)];
        std::set<std::uint64_t> out;
        for (const auto& [pass, k] : n)
            if (k == 7) out.insert(pass);
        return out;
    };
    std::map<std::tuple<std::uint32_t, std::uint64_t, std::string>, int> seen; // (source, pass, key) -> times
    std::uint64_t last_pass_first = 0;
    auto state = std::make_shared<cv::mix_progress>(2);
    {
        auto p = build(state, {}, 150);
        for (auto& b : p.run(0)) {
            ++seen[{b.source, b.pass, b.key}];
            CHECK(b.label == static_cast<std::int64_t>(b.pass)); // pass p reads epoch 0 + p
            if (b.source == 0) last_pass_first = std::max(last_pass_first, b.pass);
            state->consumed(b);
        }
    }
    REQUIRE(last_pass_first >= 5);
    const std::string text = state->to_json();
    // The passes from the first with an item not marked on are kept; those before it are
    // dropped: the floor is that first pass.
    const auto doc = boost::json::parse(text);
    const auto done = complete(seen);
    std::uint64_t floor = 0;
    while (done.contains(floor)) ++floor;
    CHECK(doc.at("sources").at(0).at("floor").at(0).as_int64() == static_cast<std::int64_t>(floor));
    const auto& kept = doc.at("sources").at(0).at("passes").as_array();
    REQUIRE(!kept.empty());
    CHECK(kept.front().at("pass").as_int64() == static_cast<std::int64_t>(floor));
    auto state2 = std::make_shared<cv::mix_progress>(2);
    *state2 = cv::mix_progress::from_json(text);
    {
        auto p = build(state2, {}, 400);
        for (auto& b : p.run(0)) {
            ++seen[{b.source, b.pass, b.key}];
            state2->consumed(b);
        }
    }
    for (const auto& [id, times] : seen) {
        CAPTURE(std::get<0>(id));
        CAPTURE(std::get<1>(id));
        CAPTURE(std::get<2>(id));
        CHECK(times == 1);
    }
    // The second run read the rest of the first's passes first: they are all complete.
    const auto after = complete(seen);
    for (std::uint64_t pass = 0; pass <= last_pass_first; ++pass) {
        CAPTURE(pass);
        CHECK(after.contains(pass));
    }
    // And the state says so: every pass below its floor was marked whole.
    const auto doc2 = boost::json::parse(state2->to_json());
    const auto f2 = doc2.at("sources").at(0).at("floor").at(0).as_int64();
    CHECK(f2 > static_cast<std::int64_t>(last_pass_first));
    CHECK(doc2.at("sources").at(0).at("passes").at(0).at("pass").as_int64() == f2); // the passes below it were dropped
    for (std::int64_t pass = 0; pass < f2; ++pass) CHECK(after.contains(static_cast<std::uint64_t>(pass)));
}

TEST_CASE("a mix that starts sources again resumes on another number of ranks, each item of each pass once")
{
    cv::runtime rt({.io_threads = 2, .compute_threads = 1});
    auto build = [&](std::shared_ptr<cv::mix_progress> state, cv::split share, std::uint64_t n) {
        return (cv::mix<cv::blob>({files("small", 6, {.order = {.seed = 1, .shuffle = true}, .share = share, .resume = state->source(0)}),
                                   files("big", 60'000, {.order = {.seed = 1, .shuffle = true}, .share = share, .resume = state->source(1)})},
                                  {.weights = {2, 1}, .stop = cv::mix_stop::never, .seed = 6, .share = share, .resume = state}) |
                cv::shuffle({.buffer = 5, .seed = 3}) | cv::take(n))
            .on(rt);
    };
    std::map<std::tuple<std::uint32_t, std::uint64_t, std::string>, int> seen;
    std::vector<cv::mix_progress> saved;
    for (std::uint64_t rank = 0; rank < 2; ++rank) {
        auto state = std::make_shared<cv::mix_progress>(2);
        auto p = build(state, {.rank = rank, .world_size = 2}, 40 + 30 * rank); // the ranks reach different passes
        for (auto& b : p.run(0)) {
            ++seen[{b.source, b.pass, b.key}];
            state->consumed(b);
        }
        saved.push_back(cv::mix_progress::from_json(state->to_json()));
    }
    const auto merged = cv::mix_progress::from_json(cv::mix_progress::merge(saved).to_json());
    std::vector<cv::mix_progress> finals;
    for (std::uint64_t rank = 0; rank < 3; ++rank) {
        auto state = std::make_shared<cv::mix_progress>(2);
        *state = merged;
        auto p = build(state, {.rank = rank, .world_size = 3}, 150);
        for (auto& b : p.run(0)) {
            ++seen[{b.source, b.pass, b.key}];
            state->consumed(b);
        }
        finals.push_back(*state);
    }
    for (const auto& [id, times] : seen) {
        CAPTURE(std::get<0>(id));
        CAPTURE(std::get<1>(id));
        CAPTURE(std::get<2>(id));
        CHECK(times == 1);
    }
    // The passes below every slot's floor were read whole, by someone, once: the merged
    // state of the three says which. (A rank that restored the state and saved it before
    // running holds the old division: its state, which the others contain, is left out.)
    finals.push_back(merged);
    const auto doc = boost::json::parse(cv::mix_progress::merge(finals).to_json());
    CHECK(doc.at("slots").as_int64() == 3);
    std::uint64_t done = std::numeric_limits<std::uint64_t>::max();
    for (const auto& f : doc.at("sources").at(0).at("floor").as_array()) done = std::min<std::uint64_t>(done, f.to_number<std::uint64_t>());
    REQUIRE(done >= 10);
    for (std::uint64_t pass = 0; pass < done; ++pass) {
        std::size_t n = 0;
        for (const auto& [id, times] : seen)
            if (std::get<0>(id) == 0 && std::get<1>(id) == pass) ++n;
        CAPTURE(pass);
        CHECK(n == 6);
    }
}

TEST_CASE("a mix's state is checked when read back")
{
    CHECK(cv::mix_progress::from_json(cv::mix_progress(3).to_json()).sources() == 3);
    CHECK(cv::mix_progress::from_json(cv::mix_progress(3).to_json()).empty());
    const std::string head = R"({"format":"conveyor-mix-progress","version":1,"epoch":2,"seed":1,"stop":"all","slots":2,"start":0,"drawn":[3,4],)";
    const std::string pass0 = R"({"pass":0,"progress":{"format":"conveyor-progress","version":1,"epoch":2,"seed":0,"shuffle":false,"policy":"drop","shards":10,"slots":2,"work":[],"whole":{"next":[3,4],"done":[]}}})";
    const auto good = cv::mix_progress::from_json(head + R"("sources":[{"floor":[0,0],"passes":[)" + pass0 + "]}]}");
    CHECK(good.samples() == 7);
    CHECK(good.epoch() == 2);
    for (const std::string& bad : std::vector<std::string>{"{}", "[]", head + R"("sources":{}})", head + R"("sources":[{"floor":[0],"passes":[]}]})",
                                  head + R"("sources":[{"floor":[0,0],"passes":[{"pass":1,"progress":)" + pass0.substr(21) + "]}]}",
                                  head + R"("sources":[{"floor":[0,0],"passes":[)" + pass0 + "," + pass0 + "]}]}",
                                  head + R"("sources":[{"floor":[0,0],"units":3,"passes":[]}]})",
                                  R"({"format":"conveyor-mix-progress","version":2,"sources":[]})",
                                  R"({"format":"conveyor-mix-progress","version":1,"epoch":0,"seed":0,"stop":"sometimes","slots":1,"start":0,"drawn":[0],"sources":[]})"}) {
        CAPTURE(bad);
        CHECK_THROWS_AS(cv::mix_progress::from_json(bad), cv::error);
    }
    auto s = std::make_shared<cv::mix_progress>(2);
    CHECK(error_of([&] { *s = good; }).find("1 source(s) cannot be restored into one of 2") != std::string::npos);
    CHECK(error_of([&] { s->source(2); }).find("source 2 is not one of") != std::string::npos);
    CHECK(error_of([&] { s->consumed(cv::sample_id{.source = 5}); }).find("source 5") != std::string::npos);
}
