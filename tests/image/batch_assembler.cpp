// Tests of conveyor/image/detail/batch_assembler.hpp: the bookkeeping both decode_batches
// stages share. Items placed in order fill their tentative slots; a skip leaves no hole (the
// later items move down, and the dispatcher realigns once the items in flight are back);
// partial last batches; abandoning gives the slabs back.
#include <conveyor/image/batch.hpp>
#include <conveyor/image/detail/batch_assembler.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace image = conveyor::image;
using image::detail::batch_assembler;

namespace {

constexpr std::size_t item_bytes = 8;

std::string key(std::uint64_t k)
{
    return "k" + std::to_string(k);
}

conveyor::sample_id id(std::uint64_t k)
{
    return {.work = k, .shard = k / 10, .index = k % 10, .end = 100 * k, .whole = false};
}

/// An assembler of batches of `n` with a pool of `slabs` slabs to open them from.
struct fixture {
    explicit fixture(std::size_t n, std::size_t slabs = 4) : pool(n * item_bytes, slabs), a(n, item_bytes) {}

    /// Opens the next item's batch when it is not open, and dispatches the item.
    std::uint64_t dispatch()
    {
        if (!a.next_batch_open()) {
            auto s = pool.try_acquire();
            REQUIRE(s);
            a.open(std::move(*s));
        }
        return a.dispatch();
    }

    /// Places item `k`, dispatched at `p`, as a stage does: its pixels (here: its number)
    /// follow it when it moves.
    batch_assembler::placement place(std::uint64_t p, std::uint64_t k)
    {
        std::memcpy(a.slot(p), &k, sizeof k); // "decoded" into its tentative slot
        const auto at = a.place(p, key(k), id(k), static_cast<std::int64_t>(k % 3));
        if (at.moved()) std::memcpy(a.slot(at.to), a.slot(at.from), item_bytes);
        return at;
    }

    static std::vector<std::uint64_t> pixels(const batch_assembler::assembled& b)
    {
        std::vector<std::uint64_t> v(b.count);
        for (std::size_t i = 0; i < b.count; ++i) std::memcpy(&v[i], b.slab.data() + i * item_bytes, sizeof v[i]);
        return v;
    }

    image::slab_pool pool;
    batch_assembler a;
};

std::vector<std::string> keys(std::initializer_list<std::uint64_t> ks)
{
    std::vector<std::string> v;
    for (auto k : ks) v.push_back(key(k));
    return v;
}

} // namespace

TEST_CASE("batch_assembler places items in order in their own slots and hands on each full batch")
{
    fixture f(4);
    for (std::uint64_t k = 0; k < 8; ++k) {
        const std::uint64_t p = f.dispatch();
        CHECK(p == k);
        CHECK(f.a.slot(p) == f.a.slab_of(p).data() + (k % 4) * item_bytes);
    }
    CHECK(f.a.open_batches() == 2);
    CHECK_FALSE(f.a.drained());
    for (std::uint64_t k = 0; k < 8; ++k) {
        const auto at = f.place(k, k);
        CHECK_FALSE(at.moved());
        CHECK(at.to == k);
        if (k == 2) CHECK_FALSE(f.a.take_full());
        if (k % 4 == 3) {
            auto b = f.a.take_full();
            REQUIRE(b);
            CHECK(b->index == k / 4);
            CHECK(b->count == 4);
            const std::uint64_t first = k - 3;
            CHECK(b->keys == keys({first, first + 1, first + 2, first + 3}));
            CHECK(fixture::pixels(*b) == std::vector<std::uint64_t>{first, first + 1, first + 2, first + 3});
            REQUIRE(b->ids.size() == 4);
            CHECK(b->ids[1].work == first + 1);
            CHECK(b->ids[1].end == 100 * (first + 1));
            CHECK(b->labels == std::vector<std::int64_t>{std::int64_t(first % 3), std::int64_t((first + 1) % 3),
                                                         std::int64_t((first + 2) % 3), std::int64_t((first + 3) % 3)});
        }
    }
    CHECK(f.a.drained());
    CHECK(f.a.open_batches() == 0);
    CHECK(f.pool.stats().in_use == 0); // the batches' slabs were handed on, and are dropped
    CHECK_FALSE(f.a.take_partial());
}

TEST_CASE("batch_assembler: a skip mid-batch is filled by the next items, which move down a slot, across the batch boundary")
{
    fixture f(4);
    for (std::uint64_t k = 0; k < 6; ++k) CHECK(f.dispatch() == k); // batch 0 and two of batch 1 in flight
    f.place(0, 0);
    f.a.skip(1);
    CHECK(f.a.realign_pending());
    CHECK_FALSE(f.a.realign()); // items 2..5 are still in flight
    auto at = f.place(2, 2);
    CHECK(at.from == 2);
    CHECK(at.to == 1);
    CHECK(f.place(3, 3).to == 2);
    CHECK_FALSE(f.a.take_full());
    at = f.place(4, 4); // from batch 1's slab into batch 0's last slot
    CHECK(at.from == 4);
    CHECK(at.to == 3);
    auto b0 = f.a.take_full();
    REQUIRE(b0);
    CHECK(b0->keys == keys({0, 2, 3, 4}));
    CHECK(fixture::pixels(*b0) == std::vector<std::uint64_t>{0, 2, 3, 4});
    CHECK(b0->ids[1].work == 2);
    CHECK(b0->labels[3] == 4 % 3);
    CHECK(f.place(5, 5).to == 4);
    // Every item is back: the next one goes to the next final place, 5, not 6.
    CHECK(f.a.drained());
    CHECK(f.a.realign());
    CHECK_FALSE(f.a.realign_pending());
    CHECK(f.a.next_batch() == 1);
    CHECK(f.a.next_batch_open()); // batch 1 keeps the slab it was opened with
    CHECK(f.dispatch() == 5);
    CHECK(f.dispatch() == 6);
    CHECK(f.dispatch() == 7);
    for (std::uint64_t k = 6; k < 9; ++k) CHECK_FALSE(f.place(k - 1, k).moved());
    auto b1 = f.a.take_full();
    REQUIRE(b1);
    CHECK(b1->index == 1);
    CHECK(b1->keys == keys({5, 6, 7, 8}));
    CHECK(fixture::pixels(*b1) == std::vector<std::uint64_t>{5, 6, 7, 8});
}

TEST_CASE("batch_assembler: several skips, together and at a batch's end, leave full batches in input order")
{
    fixture f(3);
    // Items 0..8; 1, 2 and 5 fail; 8 is the last good one needed for batch 1.
    std::vector<std::uint64_t> good;
    std::uint64_t item = 0;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> in_flight; // (position, item)
    std::vector<batch_assembler::assembled> out;
    auto bad = [](std::uint64_t k) { return k == 1 || k == 2 || k == 5 || k == 6; };
    while (out.size() < 2) {
        // Dispatch two at a time, as a pipelined decoder would, realigning when drained.
        if (f.a.realign_pending() && !f.a.realign()) {
            REQUIRE_FALSE(in_flight.empty());
        } else {
            for (int i = 0; i < 2; ++i) in_flight.emplace_back(f.dispatch(), item++);
        }
        auto [p, k] = in_flight.front();
        in_flight.erase(in_flight.begin());
        if (bad(k)) {
            f.a.skip(p);
        } else {
            const auto at = f.place(p, k);
            CHECK(at.to == good.size());
            good.push_back(k);
        }
        if (auto b = f.a.take_full()) out.push_back(std::move(*b));
    }
    REQUIRE(out.size() == 2);
    CHECK(out[0].keys == keys({0, 3, 4}));
    CHECK(fixture::pixels(out[0]) == std::vector<std::uint64_t>{0, 3, 4});
    CHECK(out[1].keys == keys({7, 8, 9}));
    CHECK(fixture::pixels(out[1]) == std::vector<std::uint64_t>{7, 8, 9});
    CHECK(out[1].index == 1);
}

TEST_CASE("batch_assembler: the last batch is taken partial with what it has, and a full or empty one is not")
{
    fixture f(4);
    for (std::uint64_t k = 0; k < 6; ++k) f.dispatch();
    for (std::uint64_t k = 0; k < 4; ++k) f.place(k, k);
    CHECK_FALSE(f.a.take_partial()); // batch 0 is full: take_full's
    REQUIRE(f.a.take_full());
    CHECK(f.a.pending() == 0);
    CHECK_FALSE(f.a.take_partial()); // nothing placed in batch 1 yet
    f.place(4, 4);
    f.a.skip(5);
    CHECK(f.a.pending() == 1);
    CHECK_FALSE(f.a.take_full());
    SUBCASE("kept")
    {
        auto last = f.a.take_partial();
        REQUIRE(last);
        CHECK(last->index == 1);
        CHECK(last->count == 1);
        CHECK(last->keys == keys({4}));
        CHECK(last->ids.size() == 1);
        CHECK(last->labels.size() == 1);
        CHECK(f.a.open_batches() == 0);
    }
    SUBCASE("dropped")
    {
        f.a.abandon(); // a stage told to drop partial batches
        CHECK(f.a.open_batches() == 0);
        CHECK(f.pool.stats().in_use == 0); // batch 0 was dropped when taken, batch 1 given back
    }
}

TEST_CASE("batch_assembler: one batch at a time, as the GPU stage fills it: parts, skips, refill, then the next batch")
{
    fixture f(4, 1);
    // A part of four: the second fails; the three good ones move down; a part of one refills.
    std::vector<std::uint64_t> part;
    for (int i = 0; i < 4; ++i) part.push_back(f.dispatch());
    CHECK(part == std::vector<std::uint64_t>{0, 1, 2, 3});
    f.place(0, 10);
    f.a.skip(1);
    CHECK(f.place(2, 12).to == 1);
    CHECK(f.place(3, 13).to == 2);
    CHECK(f.a.realign());
    CHECK(f.a.pending() == 3);
    CHECK(f.dispatch() == 3);
    CHECK_FALSE(f.place(3, 14).moved());
    auto b = f.a.take_full();
    REQUIRE(b);
    CHECK(b->keys == keys({10, 12, 13, 14}));
    CHECK(fixture::pixels(*b) == std::vector<std::uint64_t>{10, 12, 13, 14});
    // The pool's only slab is in `b`: the next batch opens once it is back.
    CHECK_FALSE(f.a.next_batch_open());
    CHECK_FALSE(f.pool.try_acquire());
    b.reset();
    CHECK(f.dispatch() == 4);
    CHECK(f.a.next_batch() == 1);
}

TEST_CASE("batch_assembler: abandoning with items in flight gives every open slab back to its pool")
{
    fixture f(2, 3);
    for (int i = 0; i < 5; ++i) f.dispatch(); // batches 0, 1, 2 open
    CHECK(f.pool.stats().in_use == 3);
    f.place(0, 0);
    f.a.skip(1);
    CHECK_FALSE(f.a.realign());
    f.a.abandon();
    CHECK(f.a.open_batches() == 0);
    CHECK(f.pool.stats().in_use == 0);
    CHECK_FALSE(f.a.take_full());
    CHECK_FALSE(f.a.take_partial());
}

TEST_CASE("batch_of writes a taken batch's labels after its images and shapes its tensors")
{
    const image::decode_options d{.size = {2, 3}};
    const image::collate_options o{.size = 4};
    const auto plan = image::detail::make_batch_plan(d, o);
    image::slab_pool pool(plan.slab_bytes, 1);
    batch_assembler a(o.size, plan.item_bytes);
    a.open(*pool.try_acquire());
    for (std::uint64_t k = 0; k < 3; ++k) a.place(a.dispatch(), key(k), id(k), static_cast<std::int64_t>(7 * k));
    auto last = a.take_partial();
    REQUIRE(last);
    const image::image_batch b = image::detail::batch_of(std::move(*last), o, plan);
    CHECK(b.size() == 3);
    CHECK(b.index == 0);
    CHECK(b.images.shape == std::vector<std::int64_t>{3, 3, 2, 3}); // n, h, w, c
    CHECK(b.labels.shape == std::vector<std::int64_t>{3});
    const auto* labels = static_cast<const std::int64_t*>(b.labels.data);
    CHECK(labels[0] == 0);
    CHECK(labels[1] == 7);
    CHECK(labels[2] == 14);
    CHECK(b.ids.size() == 3);
    CHECK(b.ids[2].work == 2);
    CHECK(b.keys == keys({0, 1, 2}));
}
