// Tests of conveyor/shard/order.hpp: epoch order, splits across ranks and workers, and the
// resume state (exactly the unconsumed samples after a restore, also with a new world size).
#include <conveyor/core/error.hpp>
#include <conveyor/shard/order.hpp>

#include <doctest/doctest.h>

#include "tar_support.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace shard = conveyor::shard;
using tar_test::message_of;

namespace {

// Sets environment variables for the scope of a test case, and unsets them after.
struct env_vars {
    std::vector<std::string> names;
    env_vars(std::initializer_list<std::pair<const char*, const char*>> vars)
    {
        for (const char* n : {"RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}) ::unsetenv(n);
        for (auto [n, v] : vars) {
            ::setenv(n, v, 1);
            names.emplace_back(n);
        }
    }
    ~env_vars()
    {
        for (const auto& n : names) ::unsetenv(n.c_str());
    }
};

} // namespace

TEST_CASE("rank and world size come from torchrun, Slurm or Open MPI variables")
{
    {
        env_vars e{};
        auto s = shard::split_from_environment();
        CHECK(s.rank == 0);
        CHECK(s.world_size == 1);
        CHECK(s.slots() == 1);
    }
    {
        env_vars e{{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}};
        auto s = shard::split_from_environment(1, 2);
        CHECK(s.rank == 3); // torchrun's pair wins over Slurm's
        CHECK(s.world_size == 4);
        CHECK(s.slot() == 7);
        CHECK(s.slots() == 8);
    }
    {
        env_vars e{{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}};
        CHECK(shard::split_from_environment().rank == 5);
    }
    {
        env_vars e{{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"}};
        CHECK(shard::split_from_environment().world_size == 3);
    }
    {
        env_vars e{{"RANK", "1"}};
        CHECK(message_of([] { shard::split_from_environment(); }).find("RANK is set but WORLD_SIZE is not") != std::string::npos);
    }
    {
        env_vars e{{"RANK", "x1"}, {"WORLD_SIZE", "2"}};
        CHECK(message_of([] { shard::split_from_environment(); }).find("RANK=\"x1\" is not a whole number") != std::string::npos);
    }
    {
        env_vars e{{"RANK", "2"}, {"WORLD_SIZE", "2"}};
        CHECK(message_of([] { shard::split_from_environment(); }).find("RANK=2 is not below WORLD_SIZE=2") != std::string::npos);
    }
    env_vars none{};
    CHECK(message_of([] { shard::split_from_environment(2, 2); }).find("worker 2 is not below") != std::string::npos);
}

TEST_CASE("an epoch's shard order is a permutation fixed by seed and epoch")
{
    const shard::order_options o{.seed = 7};
    const auto a = shard::epoch_work(100, 1, 0, o);
    auto sorted = a;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::uint64_t> all(100);
    std::iota(all.begin(), all.end(), 0);
    CHECK(sorted == all);
    CHECK(a != all);                                     // shuffled
    CHECK(a == shard::epoch_work(100, 1, 0, o));            // the same again
    CHECK(a != shard::epoch_work(100, 1, 1, o));            // another epoch, another order
    CHECK(a != shard::epoch_work(100, 1, 0, {.seed = 8}));  // another seed too
    CHECK(shard::epoch_work(100, 1, 3, {.shuffle = false}) == all);
}

TEST_CASE("uneven shard counts are dropped to a whole round or padded by repeating")
{
    const auto dropped = shard::epoch_work(10, 4, 2, {.seed = 1, .policy = shard::uneven::drop});
    CHECK(dropped.size() == 8);
    CHECK(std::set<std::uint64_t>(dropped.begin(), dropped.end()).size() == 8);
    // Different epochs leave out different shards: over many epochs, every shard is read.
    std::set<std::uint64_t> seen;
    for (std::uint64_t e = 0; e < 20; ++e)
        for (auto s : shard::epoch_work(10, 4, e, {.seed = 1})) seen.insert(s);
    CHECK(seen.size() == 10);

    const auto padded = shard::epoch_work(10, 4, 2, {.seed = 1, .policy = shard::uneven::pad});
    REQUIRE(padded.size() == 12);
    CHECK(std::set<std::uint64_t>(padded.begin(), padded.end()).size() == 10);
    CHECK(padded[10] == padded[0]); // the last round repeats the epoch's first shards
    CHECK(padded[11] == padded[1]);

    CHECK(message_of([] { shard::epoch_work(3, 8, 0, {}); }).find("3 shards cannot be divided among 8") != std::string::npos);
    CHECK(shard::epoch_work(3, 8, 0, {.policy = shard::uneven::pad}).size() == 8);
    CHECK(message_of([] { shard::epoch_work(0, 1, 0, {}); }).find("empty") != std::string::npos);
}

TEST_CASE("4 ranks x 2 workers from the environment read every shard once per epoch")
{
    const std::uint64_t shards = 64;
    for (std::uint64_t epoch : {0, 1}) {
        std::vector<int> times(shards, 0);
        std::vector<std::uint64_t> first_of_rank0;
        for (int rank = 0; rank < 4; ++rank) {
            const std::string r = std::to_string(rank);
            env_vars e{{"RANK", r.c_str()}, {"WORLD_SIZE", "4"}};
            for (std::uint64_t w = 0; w < 2; ++w) {
                const auto s = shard::split_from_environment(w, 2);
                shard::progress p;
                p.begin(epoch, shards, s.slots(), {.seed = 11});
                for (const auto& piece : p.remaining(shards, s.slot(), s.slots())) {
                    CHECK(piece.first == 0);
                    ++times[piece.shard];
                    if (rank == 0 && w == 0) first_of_rank0.push_back(piece.shard);
                }
            }
        }
        CHECK(std::all_of(times.begin(), times.end(), [](int t) { return t == 1; }));
        CHECK(first_of_rank0.size() == shards / 8);
    }
}

TEST_CASE("resume state records consumed samples out of order and survives JSON")
{
    shard::progress p;
    p.begin(3, 10, 2, {.seed = 5, .policy = shard::uneven::pad});
    // Shard at work position 4 (shard 7): samples 0, 1, 3, 5 consumed; 2 and 4 still held.
    for (std::uint64_t i : {1, 0, 3, 5}) p.consumed(shard::sample_id{4, 7, i, (i + 1) * 1024});
    p.consumed(shard::sample_id{5, 2, 0, 512});
    CHECK(p.samples() == 5);

    const auto text = p.to_json();
    CHECK(text.find("\"conveyor-shard-progress\"") != std::string::npos);
    const auto q = shard::progress::from_json(text);
    CHECK(q.to_json() == text);
    CHECK(q.epoch() == 3);
    CHECK(q.options().policy == shard::uneven::pad);

    const auto pieces = q.remaining(10, 0, 2); // work positions 0, 2, 4, 6, 8
    REQUIRE(pieces.size() == 5);
    const auto& w4 = pieces[2];
    CHECK(w4.work == 4);
    CHECK(w4.first == 2);          // 0 and 1 were consumed
    CHECK(w4.offset == 2 * 1024);  // sample 2 starts where sample 1 ended
    CHECK(w4.skip == std::vector<std::uint64_t>{3, 5});
    CHECK(pieces[0].first == 0);

    for (auto bad : {"", "[]", "{\"format\":\"x\"}",
                     R"({"format":"conveyor-shard-progress","version":1,"epoch":0,"seed":0,"shuffle":true,"policy":"drop","shards":2,"slots":1,"work":[{"work":0,"shard":9,"next":0,"offset":0,"done":[]}]})",
                     R"({"format":"conveyor-shard-progress","version":1,"epoch":-1,"seed":0,"shuffle":true,"policy":"drop","shards":2,"slots":1,"work":[]})"}) {
        CAPTURE(bad);
        CHECK_THROWS_AS(shard::progress::from_json(bad), conveyor::error);
    }
    CHECK(message_of([&] { q.remaining(11, 0, 1); }).find("list of 10 shards, this list has 11") != std::string::npos);
}

TEST_CASE("a restore with a different world size reads each unconsumed sample exactly once")
{
    // 13 shards of uneven sizes, 8 slots at the start; each slot consumes a random part of
    // its share in a shuffled order (as a shuffle buffer hands samples out), then the job
    // restarts with 3 slots.
    const std::uint64_t shards = 13;
    std::vector<std::uint64_t> count(shards);
    for (std::uint64_t i = 0; i < shards; ++i) count[i] = 5 + (i * 7) % 11;
    const shard::order_options o{.seed = 42, .policy = shard::uneven::pad};
    const std::uint64_t epoch = 2;
    std::mt19937_64 rng(1);
    std::map<std::pair<std::uint64_t, std::uint64_t>, int> delivered; // (work, index) -> times

    std::vector<shard::progress> saved;
    const auto work = shard::epoch_work(shards, 8, epoch, o);
    for (std::uint64_t slot = 0; slot < 8; ++slot) {
        shard::progress p;
        p.begin(epoch, shards, 8, o);
        std::vector<shard::sample_id> mine;
        for (const auto& piece : p.remaining(shards, slot, 8))
            for (std::uint64_t i = 0; i < count[piece.shard]; ++i) mine.push_back({piece.work, piece.shard, i, (i + 1) * 100});
        std::shuffle(mine.begin(), mine.end(), rng);
        mine.resize(rng() % (mine.size() + 1));
        for (const auto& id : mine) {
            p.consumed(id);
            ++delivered[{id.work, id.index}];
        }
        saved.push_back(shard::progress::from_json(p.to_json()));
    }
    const auto merged = shard::progress::merge(saved);
    for (std::uint64_t slot = 0; slot < 3; ++slot) {
        for (const auto& piece : merged.remaining(shards, slot, 3)) {
            CHECK(piece.shard == work[piece.work]);
            CHECK(piece.offset == piece.first * 100);
            for (std::uint64_t i = piece.first; i < count[piece.shard]; ++i)
                if (!std::binary_search(piece.skip.begin(), piece.skip.end(), i)) ++delivered[{piece.work, i}];
        }
    }
    // Every sample of the epoch's work list, exactly once over both runs.
    std::uint64_t expected = 0;
    for (std::uint64_t w = 0; w < work.size(); ++w) {
        expected += count[work[w]];
        for (std::uint64_t i = 0; i < count[work[w]]; ++i) {
            CAPTURE(w);
            CAPTURE(i);
            CHECK(delivered[{w, i}] == 1);
        }
    }
    CHECK(delivered.size() == expected);

    shard::progress other;
    other.begin(epoch + 1, shards, 8, o);
    saved.push_back(other);
    CHECK(message_of([&] { shard::progress::merge(saved); }).find("different epochs") != std::string::npos);
}
