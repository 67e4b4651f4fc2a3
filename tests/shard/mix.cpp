// Tests of conveyor::mix over shard sources and files made samples (core/mix.hpp): the
// mix's state resumes each sample of each source once, inside shards too, on another
// number of ranks, and across the passes of a source started again.
#include <conveyor/core/mix.hpp>
#include <conveyor/core/stages.hpp>
#include <conveyor/file/source.hpp>
#include <conveyor/shard/source.hpp>

#include "tar_support.hpp"
#include "../support/common.hpp"

#include <doctest/doctest.h>

#include <map>
#include <random>
#include <string>
#include <tuple>

using namespace tar_test;
namespace cv = conveyor;
namespace shard = conveyor::shard;

namespace {

/// `shards` shards of `per_shard` samples under `dir`, keys "<tag><shard>_<k>".
std::vector<shard::shard_ref> make_set(const fs::path& dir, const std::string& tag, int shards, int per_shard)
{
    fs::create_directories(dir);
    std::vector<shard::shard_ref> list;
    std::mt19937 rng(static_cast<unsigned>(tag.size() * 131 + shards));
    for (int s = 0; s < shards; ++s) {
        std::string tar;
        for (int k = 0; k < per_shard; ++k) {
            const std::string key = tag + std::to_string(s) + "_" + std::to_string(k);
            tar += tar_entry(key + ".jpg", std::string(100 + rng() % 5000, 'x'));
            tar += tar_entry(key + ".cls", std::to_string(k % 3));
        }
        tar += end_of_archive;
        const fs::path p = dir / ("shard-" + std::to_string(s) + ".tar");
        spill(p, tar);
        list.push_back({p.string()});
    }
    return list;
}

/// `n` loose files under `dir`.
std::vector<std::string> make_files(const fs::path& dir, int n)
{
    fs::create_directories(dir);
    std::vector<std::string> paths;
    for (int i = 0; i < n; ++i) {
        const fs::path p = dir / ("img_" + std::to_string(i) + ".jpg");
        spill(p, std::string(50 + i, 'y'));
        paths.push_back(p.string());
    }
    return paths;
}

shard::source_options shard_options(const cv::split& share, std::shared_ptr<cv::progress> state)
{
    shard::source_options o;
    o.share = share;
    o.order.seed = 3;
    o.chunks.chunk_size = 4096;
    o.chunks.chunks_in_flight = 2;
    o.shards_in_flight = 2;
    o.resume = std::move(state);
    return o;
}

} // namespace

TEST_CASE("a mix of shard sets and files made samples resumes each sample once on 3 ranks after 2")
{
    temp_dir d;
    const auto a = make_set(d.path / "a", "a", 6, 7);
    const auto b = make_set(d.path / "b", "b", 4, 9);
    const auto f = make_files(d.path / "f", 24);
    auto build = [&](std::shared_ptr<cv::mix_progress> state, cv::split share) {
        cv::file::source_options fo;
        fo.epochs = {.order = {.seed = 3, .shuffle = true}, .share = share, .resume = state->source(2)};
        auto files = cv::file::files(f, fo) | cv::map([](cv::blob x) { return shard::sample_of(std::move(x)); });
        return cv::mix<shard::sample>({shard::shards(a, shard_options(share, state->source(0))), shard::shards(b, shard_options(share, state->source(1))),
                                       std::move(files)},
                                      {.weights = {2, 2, 1}, .seed = 5, .share = share, .resume = state}) |
               cv::shuffle({.buffer = 12, .seed = 4});
    };
    std::map<std::string, int> used;
    std::vector<cv::mix_progress> saved;
    for (std::uint64_t rank = 0; rank < 2; ++rank) {
        auto state = std::make_shared<cv::mix_progress>(3);
        auto p = build(state, {.rank = rank, .world_size = 2});
        std::size_t n = 0;
        for (auto& s : p.run(3)) {
            if (n++ == 20 + 17 * rank) break;
            CHECK(s.pass == 0);
            ++used[std::to_string(s.source) + ":" + s.key];
            CHECK(state->consumed(s));
        }
        saved.push_back(cv::mix_progress::from_json(state->to_json()));
    }
    const auto merged = cv::mix_progress::merge(saved);
    for (std::uint64_t rank = 0; rank < 3; ++rank) {
        auto state = std::make_shared<cv::mix_progress>(3);
        *state = merged;
        auto p = build(state, {.rank = rank, .world_size = 3});
        for (auto& s : p.run(3)) {
            ++used[std::to_string(s.source) + ":" + s.key];
            state->consumed(s);
        }
    }
    // 6 and 4 shards, 24 files: each divides between 2 ranks, so the epoch holds them all.
    CHECK(used.size() == 6 * 7 + 4 * 9 + 24);
    for (const auto& [key, times] : used) {
        CAPTURE(key);
        CHECK(times == 1);
    }
}

TEST_CASE("a mix that starts a shard source again resumes the rest of each pass, inside shards, once")
{
    temp_dir d;
    const auto small = make_set(d.path / "s", "s", 2, 6);
    const auto big = make_set(d.path / "b", "b", 30, 20);
    auto build = [&](std::shared_ptr<cv::mix_progress> state) {
        return cv::mix<shard::sample>({shard::shards(small, shard_options({}, state->source(0))), shard::shards(big, shard_options({}, state->source(1)))},
                                      {.stop = cv::mix_stop::never, .seed = 2, .share = cv::split{}, .resume = state}) |
               cv::shuffle({.buffer = 15, .seed = 1}) | cv::take(120);
    };
    std::map<std::tuple<std::uint32_t, std::uint64_t, std::string>, int> seen;
    std::uint64_t last = 0;
    auto state = std::make_shared<cv::mix_progress>(2);
    for (int run = 0; run < 3; ++run) {
        CAPTURE(run);
        auto next = std::make_shared<cv::mix_progress>(2);
        *next = cv::mix_progress::from_json(state->to_json());
        state = next;
        auto p = build(state);
        for (auto& s : p.run(0)) {
            ++seen[{s.source, s.pass, s.key}];
            if (s.source == 0 && run == 0) last = std::max(last, s.pass);
            state->consumed(s);
        }
    }
    for (const auto& [id, times] : seen) {
        CAPTURE(std::get<2>(id));
        CAPTURE(std::get<1>(id));
        CHECK(times == 1);
    }
    REQUIRE(last >= 3);
    for (std::uint64_t pass = 0; pass <= last; ++pass) {
        std::size_t n = 0;
        for (const auto& [id, times] : seen)
            if (std::get<0>(id) == 0 && std::get<1>(id) == pass) ++n;
        CAPTURE(pass);
        CHECK(n == 12); // both shards of the small set, whole
    }
}
