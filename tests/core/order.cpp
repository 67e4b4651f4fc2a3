// Tests of conveyor/core/order.hpp: epoch order, splits across ranks and workers, and the
// resume state (exactly the unconsumed samples after a restore, also with a new world size).
#include <conveyor/core/error.hpp>
#include <conveyor/core/order.hpp>

#include <doctest/doctest.h>


#include <algorithm>
#include <cstdlib>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>


namespace {

std::string order_error_of(auto&& f)
{
    try {
        f();
    } catch (const conveyor::error& e) {
        return e.what();
    }
    return "(no error)";
}

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
        auto s = conveyor::split_from_environment();
        CHECK(s.rank == 0);
        CHECK(s.world_size == 1);
        CHECK(s.slots() == 1);
    }
    {
        env_vars e{{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}};
        auto s = conveyor::split_from_environment(1, 2);
        CHECK(s.rank == 3); // torchrun's pair wins over Slurm's
        CHECK(s.world_size == 4);
        CHECK(s.slot() == 7);
        CHECK(s.slots() == 8);
    }
    {
        env_vars e{{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}};
        CHECK(conveyor::split_from_environment().rank == 5);
    }
    {
        env_vars e{{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"}};
        CHECK(conveyor::split_from_environment().world_size == 3);
    }
    {
        env_vars e{{"RANK", "1"}};
        CHECK(order_error_of([] { conveyor::split_from_environment(); }).find("RANK is set but WORLD_SIZE is not") != std::string::npos);
    }
    {
        env_vars e{{"RANK", "x1"}, {"WORLD_SIZE", "2"}};
        CHECK(order_error_of([] { conveyor::split_from_environment(); }).find("RANK=\"x1\" is not a whole number") != std::string::npos);
    }
    {
        env_vars e{{"RANK", "2"}, {"WORLD_SIZE", "2"}};
        CHECK(order_error_of([] { conveyor::split_from_environment(); }).find("RANK=2 is not below WORLD_SIZE=2") != std::string::npos);
    }
    env_vars none{};
    CHECK(order_error_of([] { conveyor::split_from_environment(2, 2); }).find("worker 2 is not below") != std::string::npos);
}

TEST_CASE("an epoch's shard order is a permutation fixed by seed and epoch")
{
    const conveyor::order_options o{.seed = 7};
    const auto a = conveyor::epoch_work(100, 1, 0, o);
    auto sorted = a;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::uint64_t> all(100);
    std::iota(all.begin(), all.end(), 0);
    CHECK(sorted == all);
    CHECK(a != all);                                     // shuffled
    CHECK(a == conveyor::epoch_work(100, 1, 0, o));            // the same again
    CHECK(a != conveyor::epoch_work(100, 1, 1, o));            // another epoch, another order
    CHECK(a != conveyor::epoch_work(100, 1, 0, {.seed = 8}));  // another seed too
    CHECK(conveyor::epoch_work(100, 1, 3, {.shuffle = false}) == all);
}

TEST_CASE("uneven shard counts are dropped to a whole round or padded by repeating")
{
    const auto dropped = conveyor::epoch_work(10, 4, 2, {.seed = 1, .policy = conveyor::uneven::drop});
    CHECK(dropped.size() == 8);
    CHECK(std::set<std::uint64_t>(dropped.begin(), dropped.end()).size() == 8);
    // Different epochs leave out different shards: over many epochs, every shard is read.
    std::set<std::uint64_t> seen;
    for (std::uint64_t e = 0; e < 20; ++e)
        for (auto s : conveyor::epoch_work(10, 4, e, {.seed = 1})) seen.insert(s);
    CHECK(seen.size() == 10);

    const auto padded = conveyor::epoch_work(10, 4, 2, {.seed = 1, .policy = conveyor::uneven::pad});
    REQUIRE(padded.size() == 12);
    CHECK(std::set<std::uint64_t>(padded.begin(), padded.end()).size() == 10);
    CHECK(padded[10] == padded[0]); // the last round repeats the epoch's first shards
    CHECK(padded[11] == padded[1]);

    CHECK(order_error_of([] { conveyor::epoch_work(3, 8, 0, {}); }).find("a list of 3 cannot be divided among 8") != std::string::npos);
    CHECK(conveyor::epoch_work(3, 8, 0, {.policy = conveyor::uneven::pad}).size() == 8);
    CHECK(order_error_of([] { conveyor::epoch_work(0, 1, 0, {}); }).find("empty") != std::string::npos);
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
                const auto s = conveyor::split_from_environment(w, 2);
                conveyor::progress p;
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
    conveyor::progress p;
    p.begin(3, 10, 2, {.seed = 5, .policy = conveyor::uneven::pad});
    // Shard at work position 4 (shard 7): samples 0, 1, 3, 5 consumed; 2 and 4 still held.
    for (std::uint64_t i : {1, 0, 3, 5}) p.consumed(conveyor::sample_id{4, 7, i, (i + 1) * 1024});
    p.consumed(conveyor::sample_id{5, 2, 0, 512});
    CHECK(p.samples() == 5);

    const auto text = p.to_json();
    CHECK(text.find("\"conveyor-progress\"") != std::string::npos);
    const auto q = conveyor::progress::from_json(text);
    CHECK(q.to_json() == text);
    CHECK(q.epoch() == 3);
    CHECK(q.options().policy == conveyor::uneven::pad);

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
        CHECK_THROWS_AS(conveyor::progress::from_json(bad), conveyor::error);
    }
    CHECK(order_error_of([&] { q.remaining(11, 0, 1); }).find("list of 10, this list has 11") != std::string::npos);
}

TEST_CASE("a restore with a different world size reads each unconsumed sample exactly once")
{
    // 13 shards of uneven sizes, 8 slots at the start; each slot consumes a random part of
    // its share in a shuffled order (as a shuffle buffer hands samples out), then the job
    // restarts with 3 slots.
    const std::uint64_t shards = 13;
    std::vector<std::uint64_t> count(shards);
    for (std::uint64_t i = 0; i < shards; ++i) count[i] = 5 + (i * 7) % 11;
    const conveyor::order_options o{.seed = 42, .policy = conveyor::uneven::pad};
    const std::uint64_t epoch = 2;
    std::mt19937_64 rng(1);
    std::map<std::pair<std::uint64_t, std::uint64_t>, int> delivered; // (work, index) -> times

    std::vector<conveyor::progress> saved;
    const auto work = conveyor::epoch_work(shards, 8, epoch, o);
    for (std::uint64_t slot = 0; slot < 8; ++slot) {
        conveyor::progress p;
        p.begin(epoch, shards, 8, o);
        std::vector<conveyor::sample_id> mine;
        for (const auto& piece : p.remaining(shards, slot, 8))
            for (std::uint64_t i = 0; i < count[piece.shard]; ++i) mine.push_back({piece.work, piece.shard, i, (i + 1) * 100});
        std::shuffle(mine.begin(), mine.end(), rng);
        mine.resize(rng() % (mine.size() + 1));
        for (const auto& id : mine) {
            p.consumed(id);
            ++delivered[{id.work, id.index}];
        }
        saved.push_back(conveyor::progress::from_json(p.to_json()));
    }
    const auto merged = conveyor::progress::merge(saved);
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

    conveyor::progress other;
    other.begin(epoch + 1, shards, 8, o);
    saved.push_back(other);
    CHECK(order_error_of([&] { conveyor::progress::merge(saved); }).find("different epochs") != std::string::npos);
}

TEST_CASE("a list source's units used whole resume on another world size, each once, from a small state")
{
    // 1,000 files, 4 slots: each consumes a prefix of its share in order and then a few
    // units further on (as a shuffle buffer hands them out); the merged state restarts on
    // 3 slots and on 1.
    const std::uint64_t units = 1000;
    const conveyor::order_options o{.seed = 9, .shuffle = true, .policy = conveyor::uneven::drop};
    const std::uint64_t epoch = 4;
    std::mt19937_64 rng(3);
    std::vector<int> used(units, 0);
    std::vector<conveyor::progress> saved;
    for (std::uint64_t slot = 0; slot < 4; ++slot) {
        conveyor::progress p;
        p.begin(epoch, units, 4, o);
        const auto mine = p.remaining_items(units, slot, 4);
        REQUIRE(mine.size() == 250);
        CHECK(mine == conveyor::epoch_share(units, {.rank = slot, .world_size = 4}, epoch, o));
        const std::size_t prefix = 30 * slot + static_cast<std::size_t>(rng() % 20);
        std::vector<std::size_t> taken(prefix);
        std::iota(taken.begin(), taken.end(), std::size_t{0});
        for (int extra = 0; extra < 5; ++extra) taken.push_back(prefix + 1 + static_cast<std::size_t>(rng() % 100));
        std::sort(taken.begin(), taken.end());
        taken.erase(std::unique(taken.begin(), taken.end()), taken.end());
        std::shuffle(taken.begin(), taken.end(), rng);
        for (const auto k : taken) {
            p.consumed({.work = mine[k].work, .shard = mine[k].item, .whole = true});
            ++used[mine[k].item];
        }
        CHECK(p.samples() == taken.size());
        const auto text = p.to_json();
        CHECK(text.size() < 400); // a run from the start and five units: not one entry per unit
        saved.push_back(conveyor::progress::from_json(text));
        CHECK(saved.back().to_json() == text);
    }
    const auto merged = conveyor::progress::merge(saved);
    std::uint64_t before = 0;
    for (const auto u : used) before += static_cast<std::uint64_t>(u);
    CHECK(merged.samples() == before);
    CHECK(conveyor::progress::merge({merged, merged}).to_json() == merged.to_json()); // merging is idempotent
    for (const std::uint64_t slots : {3, 1}) {
        CAPTURE(slots);
        auto times = used;
        std::vector<std::size_t> shares;
        for (std::uint64_t slot = 0; slot < slots; ++slot) {
            const auto left = merged.remaining_items(units, slot, slots);
            shares.push_back(left.size());
            for (std::size_t k = 1; k < left.size(); ++k) CHECK(left[k - 1].work < left[k].work); // in the epoch's order
            for (const auto& u : left) ++times[u.item];
        }
        CHECK(std::all_of(times.begin(), times.end(), [](int t) { return t == 1; })); // 1,000 divide among 4: none dropped
        CHECK(*std::max_element(shares.begin(), shares.end()) - *std::min_element(shares.begin(), shares.end()) <= 1);
    }
}

TEST_CASE("a state's record of whole units is checked when read back")
{
    const std::string head = R"({"format":"conveyor-progress","version":1,"epoch":0,"seed":0,"shuffle":true,"policy":"drop","shards":10,"slots":2,"work":[],)";
    CHECK(conveyor::progress::from_json(head + R"("whole":{"next":[2,1],"done":[7]}})").samples() == 4);
    for (const auto* bad : {R"("whole":[]})", R"("whole":{"next":[1,2,3],"done":[]}})", R"("whole":{"next":[99],"done":[]}})",
                            R"("whole":{"next":[],"done":[1000]}})", R"("whole":{"next":[-1],"done":[]}})", R"("whole":{"next":[]}})"}) {
        CAPTURE(bad);
        CHECK_THROWS_AS(conveyor::progress::from_json(head + bad), conveyor::error);
    }
}

TEST_CASE("a list source reads the list as it stands unless an order, a split or a state asks otherwise")
{
    CHECK(conveyor::plan_run(5, 0, {.share = conveyor::split{}}, "test") == nullptr);
    const auto shuffled = conveyor::plan_run(5, 1, {.order = {.seed = 1}, .share = conveyor::split{}}, "test");
    REQUIRE(shuffled);
    CHECK(shuffled->size() == 5);
    const auto half = conveyor::plan_run(5, 0, {.share = conveyor::split{.rank = 1, .world_size = 2}}, "test");
    REQUIRE(half);
    CHECK(*half == std::vector<conveyor::work_item>{{1, 1}, {3, 3}}); // list order, drop: 4 of 5
    auto state = std::make_shared<conveyor::progress>();
    const auto begun = conveyor::plan_run(5, 2, {.share = conveyor::split{}, .resume = state}, "test");
    CHECK(!state->empty());
    CHECK(state->epoch() == 2);
    REQUIRE(begun);
    CHECK(begun->size() == 5);
    CHECK(order_error_of([] { conveyor::plan_run(5, 0, {.share = conveyor::split{.rank = 2, .world_size = 2}}, "files"); })
              .find("not a valid share") != std::string::npos);
}
