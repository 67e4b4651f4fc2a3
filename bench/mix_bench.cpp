// mix_bench.cpp — conveyor-bench mix: the same number of items read from one source, and
// drawn from three by `conveyor::mix`, alternated round by round. Synthetic sources (tiny
// items at the rate the stream hands them on: the mixer's own cost shows), or tar shard
// sets (one source over all their shards against a mix of one source each).
#include "mix_bench.hpp"

#include "support/bench.hpp"
#include <conveyor/core/mix.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/shard/list.hpp>
#include <conveyor/shard/source.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace cv = conveyor;
namespace cb = conveyor::bench;

struct mix_args {
    std::uint64_t items = 30'000'000;     // synthetic: items per pass, in all
    std::size_t rounds = 5;               // passes of each case, alternated
    std::vector<std::string> shards;      // three shard sets (specs): the shards case
    unsigned shards_in_flight = 2;        // per source of the mix; the one source gets 3x
    std::size_t io_threads = 0;
};

/// A synthetic item that carries its mix origin, as `blob` and `shard::sample` do.
struct item {
    std::uint64_t value = 0;
    std::uint32_t source = 0;
    std::uint64_t pass = 0;
};

cv::pipeline<item> numbers(std::uint64_t n, std::uint64_t base)
{
    return cv::generate(n, [base](std::uint64_t i) { return item{.value = base + i}; });
}

struct pass_result {
    std::uint64_t items = 0;
    double seconds = 0;
    std::uint64_t check = 0; // the values summed: every item was read
    cb::resource_usage usage;
};

template <class T, class Value>
pass_result drain(cv::pipeline<T>& p, Value value)
{
    pass_result r;
    const auto before = cb::usage_now();
    cb::stopwatch clock;
    for (auto& x : p) {
        ++r.items;
        r.check += value(x);
    }
    r.seconds = clock.seconds();
    r.usage = cb::usage_now() - before;
    return r;
}

void print_summary(const char* what, const std::vector<double>& one, const std::vector<double>& three)
{
    std::vector<double> ratio;
    for (std::size_t i = 0; i < one.size() && i < three.size(); ++i) ratio.push_back(three[i] / one[i]);
    auto lo = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
    auto hi = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
    std::fprintf(stderr,
                 "mix (%s), %zu rounds alternated: one source %.3g items/s median [%.3g, %.3g] | mix of three %.3g items/s median [%.3g, %.3g] | "
                 "mix / one: median of the rounds %.3f [%.3f, %.3f], of the medians %.3f\n",
                 what, one.size(), cb::median(one), lo(one), hi(one), cb::median(three), lo(three), hi(three), cb::median(ratio), lo(ratio),
                 hi(ratio), cb::median(three) / cb::median(one));
    cb::json_line()
        .add("bench", "mix")
        .add("case", "summary")
        .add("sources", what)
        .add("rounds", one.size())
        .add("one_median_items_per_s", cb::median(one))
        .add("one_min", lo(one))
        .add("one_max", hi(one))
        .add("mix3_median_items_per_s", cb::median(three))
        .add("mix3_min", lo(three))
        .add("mix3_max", hi(three))
        .add("ratio_median", cb::median(ratio))
        .add("ratio_min", lo(ratio))
        .add("ratio_max", hi(ratio))
        .print();
}

void print_pass(const char* sources, const char* which, std::size_t round, const pass_result& r)
{
    cb::json_line()
        .add("bench", "mix")
        .add("case", which)
        .add("sources", sources)
        .add("round", round)
        .add("items", r.items)
        .add("seconds", r.seconds)
        .add("items_per_s", static_cast<double>(r.items) / r.seconds)
        .add("cpu_s", r.usage.cpu_s())
        .add("max_rss_MB", r.usage.max_rss_mb())
        .print();
}

int cmd_synthetic(const mix_args& a, cv::runtime& rt)
{
    const std::uint64_t n = a.items - a.items % 3;
    auto one = numbers(n, 0).on(rt);
    auto three = cv::mix<item>({numbers(n / 3, 0), numbers(n / 3, n / 3), numbers(n / 3, 2 * (n / 3))}, {.seed = 1, .share = cv::split{}}).on(rt);
    const std::uint64_t expected = n * (n - 1) / 2;
    std::fprintf(stderr, "mix: synthetic, %llu items a pass: one source, then a mix of three of %llu each, %zu rounds\n",
                 static_cast<unsigned long long>(n), static_cast<unsigned long long>(n / 3), a.rounds);
    std::vector<double> r1, r3;
    auto value = [](const item& x) { return x.value; };
    for (std::size_t round = 0; round < a.rounds; ++round) {
        for (int which = 0; which < 2; ++which) {
            const pass_result r = which == 0 ? drain(one, value) : drain(three, value);
            if (r.items != n || r.check != expected) throw std::runtime_error("mix: a pass read " + std::to_string(r.items) + " items, not each of " + std::to_string(n) + " once");
            print_pass("synthetic", which == 0 ? "one" : "mix3", round, r);
            (which == 0 ? r1 : r3).push_back(static_cast<double>(r.items) / r.seconds);
        }
    }
    print_summary("synthetic", r1, r3);
    return 0;
}

int cmd_shards(const mix_args& a, cv::runtime& rt)
{
    if (a.shards.size() != 3) throw std::invalid_argument("--shards takes three shard sets");
    std::vector<std::vector<cv::shard::shard_ref>> sets;
    std::vector<cv::shard::shard_ref> all;
    std::vector<double> weights;
    for (const auto& spec : a.shards) {
        sets.push_back(cv::shard::resolve(spec));
        weights.push_back(static_cast<double>(sets.back().size()));
        all.insert(all.end(), sets.back().begin(), sets.back().end());
    }
    cv::shard::source_options o;
    o.share = cv::split{};
    o.order.shuffle = true;
    o.order.seed = 1;
    o.shards_in_flight = 3 * a.shards_in_flight;
    auto one = cv::shard::shards(all, o).on(rt);
    o.shards_in_flight = a.shards_in_flight;
    std::vector<cv::pipeline<cv::shard::sample>> src;
    for (const auto& s : sets) src.push_back(cv::shard::shards(s, o));
    auto three = cv::mix<cv::shard::sample>(std::move(src), {.weights = weights, .seed = 1, .share = cv::split{}}).on(rt);
    std::fprintf(stderr, "mix: shards, %zu in all: one source (%u in flight), then a mix of three sets of %zu, %zu and %zu (%u in flight each), %zu rounds\n",
                 all.size(), 3 * a.shards_in_flight, sets[0].size(), sets[1].size(), sets[2].size(), a.shards_in_flight, a.rounds);
    std::vector<double> r1, r3;
    std::uint64_t items = 0;
    auto value = [](const cv::shard::sample& s) { return s.end - s.offset; };
    for (std::size_t round = 0; round < a.rounds; ++round) {
        for (int which = 0; which < 2; ++which) {
            const pass_result r = which == 0 ? drain(one, value) : drain(three, value);
            if (items == 0) items = r.items;
            if (r.items != items) throw std::runtime_error("mix: a pass read " + std::to_string(r.items) + " samples, another " + std::to_string(items));
            print_pass("shards", which == 0 ? "one" : "mix3", round, r);
            (which == 0 ? r1 : r3).push_back(static_cast<double>(r.items) / r.seconds);
        }
    }
    print_summary("shards", r1, r3);
    return 0;
}

} // namespace

std::function<int()> add_mix_subcommands(CLI::App& app)
{
    auto a = std::make_shared<mix_args>();
    auto* s = app.add_subcommand("mix", "the same items from one source and drawn from three by conveyor::mix, alternated");
    s->add_option("--items", a->items, "synthetic sources: items a pass, in all")->check(CLI::PositiveNumber)->capture_default_str();
    s->add_option("--rounds", a->rounds, "passes of each case, alternated")->check(CLI::PositiveNumber)->capture_default_str();
    s->add_option("--shards", a->shards, "three shard sets (paths, brace patterns, a dataset index): the shard case instead of synthetic sources");
    s->add_option("--shards-in-flight", a->shards_in_flight, "shards: read at once by each source of the mix; the one source reads three times as many")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    s->add_option("--io-threads", a->io_threads, "the runtime's I/O threads (0: its default)")->capture_default_str();
    return [s, a]() -> int {
        if (!*s) return -1;
        cv::runtime_options ro;
        if (a->io_threads) ro.io_threads = a->io_threads;
        cv::runtime rt(ro);
        return a->shards.empty() ? cmd_synthetic(*a, rt) : cmd_shards(*a, rt);
    };
}
