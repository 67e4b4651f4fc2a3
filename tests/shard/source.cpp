// Tests of conveyor/shard/source.hpp: shards read as samples from local files (plain and
// gzip-compressed, in small chunks), divided among ranks and workers, in per-epoch order,
// with failures skipped or fatal, and resumed exactly (also with a new world size).
#include <conveyor/core/stages.hpp>
#include <conveyor/shard/source.hpp>

#include <conveyor/shard/dataset.hpp>

#include "tar_support.hpp"
#include "../support/common.hpp"
#include "../support/http_server.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

using namespace tar_test;
namespace shard = conveyor::shard;

namespace {

/// `shards` shards of `per_shard` samples each under `dir` (shard-000.tar, ...): sample
/// "s<shard>_<k>" has a `jpg` of a size that varies (some over the test's chunk size) and
/// a `cls`. Returns the shard list and the expected bytes of each sample's jpg.
struct test_set {
    std::vector<shard::shard_ref> list;
    std::map<std::string, std::string> jpg; // key -> bytes
};

test_set make_shards(const fs::path& dir, int shards, int per_shard, bool gzip = false)
{
    test_set t;
    std::mt19937 rng(7);
    for (int s = 0; s < shards; ++s) {
        std::string tar;
        for (int k = 0; k < per_shard; ++k) {
            const std::string key = "s" + std::to_string(s) + "_" + std::to_string(k);
            std::string jpg(100 + rng() % 9000, '\0');
            for (auto& c : jpg) c = static_cast<char>(rng());
            tar += tar_entry(key + ".jpg", jpg);
            tar += tar_entry(key + ".cls", std::to_string(k % 10));
            t.jpg[key] = jpg;
        }
        tar += end_of_archive;
        char name[32];
        std::snprintf(name, sizeof name, "shard-%03d.tar", s);
        const fs::path p = dir / name;
        spill(p, tar);
        if (gzip) {
            REQUIRE(sh("gzip -n -f '" + p.string() + "'") == 0);
            t.list.push_back({p.string() + ".gz"});
        } else {
            t.list.push_back({p.string()});
        }
    }
    return t;
}

shard::source_options options(std::uint64_t rank = 0, std::uint64_t world = 1, std::uint64_t worker = 0, std::uint64_t workers = 1)
{
    shard::source_options o;
    o.share = conveyor::split{rank, world, worker, workers};
    o.order.seed = 3;
    o.chunks.chunk_size = 4096; // members span chunks; headers straddle them
    o.chunks.chunks_in_flight = 3;
    o.shards_in_flight = 3;
    return o;
}

} // namespace

TEST_CASE("by default a source reads 4 local shards at once, and 12 when any shard is remote")
{
    using cs = conveyor::shard::shard_ref;
    CHECK(conveyor::shard::default_shards_in_flight({cs{"/data/a.tar"}, cs{"file:///data/b.tar"}}) == 4);
    CHECK(conveyor::shard::default_shards_in_flight({cs{"/data/a.tar"}, cs{"s3://bucket/b.tar"}}) == 12);
    CHECK(conveyor::shard::default_shards_in_flight({cs{"https://host/c.tar"}}) == 12);
    CHECK(conveyor::shard::source_options{}.shards_in_flight == 0);
}

TEST_CASE("a shard list reads as samples with their bytes, keys and places")
{
    for (bool gzip : {false, true}) {
        CAPTURE(gzip);
        temp_dir d;
        const auto t = make_shards(d.path, 5, 12, gzip);
        std::map<std::string, int> seen;
        for (auto& s : shard::shards(t.list, options())) {
            ++seen[s.key];
            REQUIRE(s.fields.size() == 2);
            CHECK(s.fields[0].name == "jpg");
            CHECK(std::string(s.fields[0].data.view()) == t.jpg.at(s.key));
            CHECK(s.find("cls") != nullptr);
            CHECK(s.origin == t.list[s.shard].url);
            CHECK(s.key.starts_with("s" + std::to_string(s.shard) + "_" + std::to_string(s.index)));
            CHECK(s.end > s.offset);
        }
        CHECK(seen.size() == 60);
        CHECK(std::all_of(seen.begin(), seen.end(), [](const auto& kv) { return kv.second == 1; }));
    }
}

TEST_CASE("samples carry their shard's URL as the list gives it and their place in the epoch's work list")
{
    temp_dir d;
    auto t = make_shards(d.path, 4, 5);
    for (auto& ref : t.list) ref.url = "file://" + ref.url; // the chunk reader reads the path; samples keep the URL
    auto o = options();
    o.order.shuffle = false;
    std::map<std::uint64_t, std::uint64_t> work_of_shard;
    std::size_t n = 0;
    for (auto& s : shard::shards(t.list, o)) {
        ++n;
        CHECK(s.origin == t.list[s.shard].url);
        CHECK(s.origin.starts_with("file://"));
        const auto [it, fresh] = work_of_shard.emplace(s.shard, s.work);
        CHECK(it->second == s.work); // one work piece per shard in an unpadded epoch
    }
    CHECK(n == 20);
    REQUIRE(work_of_shard.size() == 4);
    std::set<std::uint64_t> works;
    for (const auto& kv : work_of_shard) works.insert(kv.second);
    CHECK(works == std::set<std::uint64_t>{0, 1, 2, 3});
}

TEST_CASE("a run's chunks are taken from its share of the memory budget, and all come back")
{
    temp_dir d;
    const auto t = make_shards(d.path, 6, 9);
    // A share of 3 shards x (3 chunks in flight + 4 held downstream) of 4 KiB; a consumer that holds samples for a while
    // (a batch) keeps chunks of the share: the lane the merge waits on goes past it rather
    // than waiting for ever.
    conveyor::runtime rt(conveyor::runtime_options{.io_threads = 1, .compute_threads = 1, .memory_limit = 1 << 20});
    auto p = shard::shards(t.list, options()).on(rt) | conveyor::batch(20);
    std::size_t samples = 0;
    const bool done = conveyor_test::finishes_within(std::chrono::seconds(60), "a shard run whose consumer holds chunks", [&] {
        for (auto& b : p) {
            samples += b.size();
            CHECK(rt.memory().in_use() <= 84 << 10); // the runtime's budget sees the share only
        }
    });
    CHECK(done);
    CHECK(samples == 54);
    CHECK(rt.memory().stats().peak == 84 << 10);
    CHECK(conveyor_test::eventually([&] { return rt.memory().in_use() == 0; }, std::chrono::seconds(30)));
}

// Regression test, fixed bug: sample fields are views of the chunk they were read in, and a
// shuffle buffer holding samples drawn at random times kept whole chunks alive, hundreds of
// them in a long epoch (peak RSS 573 MB against 273 MB for the same pipeline on a tenth of
// the data). The shuffle now compacts what it holds.
TEST_CASE("samples held by a shuffle hold their own bytes, not the chunks they were read in")
{
    temp_dir d;
    auto o = options();
    o.chunks.chunk_size = 64 * 1024; // many samples per chunk
    const auto t = make_shards(d.path, 3, 20);
    std::size_t n = 0;
    for (auto& s : shard::shards(t.list, o) | conveyor::shuffle({.buffer = 16, .seed = 1})) {
        for (const auto& f : s.fields) CHECK(f.data.storage_size() == f.data.size());
        CHECK(std::string(s.fields[0].data.view()) == t.jpg.at(s.key));
        ++n;
    }
    CHECK(n == 60);
    // Without a shuffle, fields stay zero-copy views of their chunks.
    bool shared = false;
    for (auto& s : shard::shards(t.list, o)) shared |= s.fields[0].data.storage_size() > s.fields[0].data.size();
    CHECK(shared);
}

TEST_CASE("the order of a run is fixed by seed and epoch, and changes with the epoch")
{
    temp_dir d;
    const auto t = make_shards(d.path, 8, 4);
    auto keys = [&](std::uint64_t epoch, std::uint64_t seed) {
        auto o = options();
        o.order.seed = seed;
        auto p = shard::shards(t.list, o);
        p.set_epoch(epoch);
        std::vector<std::string> out;
        for (auto& s : p) out.push_back(s.key);
        return out;
    };
    const auto a = keys(0, 3);
    CHECK(a.size() == 32);
    CHECK(a == keys(0, 3));
    CHECK(a != keys(1, 3));
    CHECK(a != keys(0, 4));
}

TEST_CASE("4 ranks x 2 workers read every sample exactly once per epoch")
{
    temp_dir d;
    const auto t = make_shards(d.path, 16, 5);
    for (std::uint64_t epoch : {0, 1}) {
        std::map<std::string, int> seen;
        for (std::uint64_t r = 0; r < 4; ++r)
            for (std::uint64_t w = 0; w < 2; ++w) {
                auto p = shard::shards(t.list, options(r, 4, w, 2));
                p.set_epoch(epoch);
                for (auto& s : p) ++seen[s.key];
            }
        CHECK(seen.size() == 80);
        CHECK(std::all_of(seen.begin(), seen.end(), [](const auto& kv) { return kv.second == 1; }));
    }
}

TEST_CASE("a shard that cannot be read fails the run naming it, or is skipped and counted")
{
    temp_dir d;
    auto t = make_shards(d.path, 4, 6);
    // Shard 2 is cut short in the middle of a member.
    {
        std::string bytes = slurp(t.list[2].url);
        spill(t.list[2].url, bytes.substr(0, bytes.size() / 2 + 100));
    }
    t.list.push_back({(d.path / "missing.tar").string()});
    auto o = options();
    o.order.shuffle = false;
    try {
        for (auto& s : shard::shards(t.list, o)) (void)s;
        FAIL("the run should have failed");
    } catch (const conveyor::error& e) {
        const std::string what = e.what();
        CHECK((what.find("shard-002.tar") != std::string::npos || what.find("missing.tar") != std::string::npos));
    }
    o.errors = conveyor::on_error::skip;
    std::set<std::string> keys;
    auto run = shard::shards(t.list, o).run();
    for (auto& s : run) keys.insert(s.key);
    CHECK(run.stats().skipped == 2);   // the cut shard's rest, and the missing one
    CHECK(keys.size() >= 18);           // shards 0, 1 and 3 whole, and what came of shard 2 before the cut
    CHECK(keys.size() < 24);
}

TEST_CASE("a resumed epoch delivers exactly the samples not consumed, also with a new world size")
{
    temp_dir d;
    const auto t = make_shards(d.path, 12, 7);
    std::mt19937 rng(11);
    for (int round = 0; round < 4; ++round) {
        CAPTURE(round);
        const std::uint64_t epoch = 5 + round;
        const std::uint64_t before = round % 2 ? 3 : 2, after = round % 2 ? 2 : 4;
        std::map<std::string, int> used;
        // First run: each of `before` slots consumes a random part of its share, through a
        // shuffle buffer, then the job stops.
        std::vector<conveyor::progress> saved;
        for (std::uint64_t slot = 0; slot < before; ++slot) {
            auto state = std::make_shared<conveyor::progress>();
            auto o = options(slot, before);
            o.order.policy = conveyor::uneven::pad;
            o.resume = state;
            auto p = shard::shards(t.list, o) | conveyor::shuffle({.buffer = 10, .seed = 1});
            p.set_epoch(epoch);
            const std::size_t stop_after = rng() % 40;
            std::size_t n = 0;
            for (auto& s : p) {
                if (n++ == stop_after) break;
                ++used[s.key + "@" + std::to_string(s.work)];
                state->consumed(s);
            }
            saved.push_back(conveyor::progress::from_json(state->to_json()));
        }
        // Restart with `after` slots from the merged state.
        const auto merged = conveyor::progress::merge(saved);
        for (std::uint64_t slot = 0; slot < after; ++slot) {
            auto state = std::make_shared<conveyor::progress>(merged);
            auto o = options(slot, after);
            o.resume = state;
            auto p = shard::shards(t.list, o);
            p.set_epoch(merged.epoch());
            for (auto& s : p) {
                ++used[s.key + "@" + std::to_string(s.work)];
                state->consumed(s);
            }
        }
        // The epoch's work list, padded to a whole round of `before` slots: every sample of
        // it exactly once over both runs.
        const auto work = conveyor::epoch_work(12, before, epoch, {.seed = 3, .policy = conveyor::uneven::pad});
        std::size_t expected = 0;
        for (std::size_t w = 0; w < work.size(); ++w)
            for (int k = 0; k < 7; ++k) {
                const std::string id = "s" + std::to_string(work[w]) + "_" + std::to_string(k) + "@" + std::to_string(w);
                CAPTURE(id);
                CHECK(used[id] == 1);
                ++expected;
            }
        CHECK(used.size() == expected);
    }
}

TEST_CASE("resampled shards are drawn with replacement, forever, the same for the same seed")
{
    temp_dir d;
    const auto t = make_shards(d.path, 6, 3);
    auto draw = [&](std::uint64_t epoch) {
        auto o = options();
        o.resampled = true;
        o.shards_in_flight = 1; // one shard after the other: the draws show in the order
        auto p = shard::shards(t.list, o) | conveyor::take(60);
        p.set_epoch(epoch);
        std::vector<std::uint64_t> shards;
        for (auto& s : p)
            if (s.index == 0) shards.push_back(s.shard);
        return shards;
    };
    const auto a = draw(0);
    CHECK(a.size() == 20); // 60 samples of 3 per shard: 20 draws, more than the 6 shards
    CHECK(std::set<std::uint64_t>(a.begin(), a.end()).size() < a.size()); // some drawn twice
    CHECK(a == draw(0));
    CHECK(a != draw(1));
}

namespace {

/// Serves files at /<name> with Range requests (bytes=a- and bytes=a-b), as a web server does.
conveyor_test::script file_server(std::map<std::string, std::string> files)
{
    return [files = std::move(files)](conveyor_test::peer& p, const boost::beast::http::request<boost::beast::http::string_body>& req,
                                      std::size_t) -> boost::asio::awaitable<bool> {
        namespace bhttp = boost::beast::http;
        const auto it = files.find(std::string(req.target()));
        if (it == files.end()) co_return co_await p.write(conveyor_test::reply(404, "not here"));
        const std::string& data = it->second;
        std::size_t first = 0, last = data.size() - 1;
        const std::string_view range = req[bhttp::field::range];
        const bool ranged = range.starts_with("bytes=");
        if (ranged) {
            const auto dash = range.find('-');
            first = std::stoull(std::string(range.substr(6, dash - 6)));
            if (dash + 1 < range.size()) last = std::min<std::size_t>(last, std::stoull(std::string(range.substr(dash + 1))));
        }
        std::string head = ranged ? "HTTP/1.1 206 Partial Content\r\n" : "HTTP/1.1 200 OK\r\n";
        head += "Content-Length: " + std::to_string(last - first + 1) + "\r\nETag: \"v1\"\r\n";
        if (ranged) head += "Content-Range: bytes " + std::to_string(first) + "-" + std::to_string(last) + "/" + std::to_string(data.size()) + "\r\n";
        co_return co_await p.write(head + "\r\n" + data.substr(first, last - first + 1));
    };
}

} // namespace

TEST_CASE("shards behind http:// URLs read as they do from disk, and by random access")
{
    temp_dir d;
    const auto t = make_shards(d.path, 3, 6);
    std::map<std::string, std::string> files;
    for (int s = 0; s < 3; ++s) files["/data/shard-" + std::to_string(s) + ".tar"] = slurp(t.list[s].url);
    conveyor_test::test_server srv(file_server(files));
    const std::string base = "http://127.0.0.1:" + std::to_string(srv.port()) + "/data/";
    std::map<std::string, std::string> got;
    for (auto& s : shard::shards(base + "shard-{0..2}.tar", options())) {
        CHECK(s.origin.starts_with(base));
        got[s.key] = std::string(s.find("jpg")->data.view());
    }
    CHECK(got.size() == 18);
    for (const auto& [k, v] : got) CHECK(v == t.jpg.at(k));

    // Random access by ranged GETs: an index made from what the stream reported.
    shard::dataset_index index;
    for (int s = 0; s < 3; ++s) index.shards.push_back({"shard-" + std::to_string(s) + ".tar", 0, files["/data/shard-" + std::to_string(s) + ".tar"].size(), {}});
    auto o = options();
    o.order.shuffle = false;
    o.shards_in_flight = 1;
    for (auto& s : shard::shards(base + "shard-{0..2}.tar", o)) {
        shard::index_entry e{s.key, s.offset, s.end - s.offset, {}};
        for (const auto& f : s.fields) e.fields.push_back({f.name, f.offset, f.data.size()});
        index.shards[s.shard].entries.push_back(std::move(e));
        ++index.shards[s.shard].samples;
    }
    shard::dataset ds(index, base);
    REQUIRE(ds.size() == 18);
    for (std::size_t i : {0, 7, 17}) {
        const auto s = ds.get(i);
        CHECK(s.key == index.shards[i / 6].entries[i % 6].key);
        CHECK(std::string(s.find("jpg")->data.view()) == t.jpg.at(s.key));
    }
}

TEST_CASE("runs take their read-ahead from the memory budget and wait for room, and say so")
{
    temp_dir d;
    const auto t = make_shards(d.path, 4, 6);
    std::mutex mu;
    std::vector<std::string> lines;
    // Each run wants 3 shards x (3 + 4) chunks x 4 KiB = 84 KiB (read-ahead and chunks held
    // downstream); the budget holds one.
    conveyor::runtime rt(conveyor::runtime_options{.io_threads = 1,
                                                   .compute_threads = 1,
                                                   .memory_limit = 100 << 10,
                                                   .log = [&](std::string_view l) {
                                                       std::lock_guard lk(mu);
                                                       lines.emplace_back(l);
                                                   }});
    auto o1 = options();
    o1.capacity = 1; // the first run's source cannot finish while its consumer holds off
    auto pipe = shard::shards(t.list, o1).on(rt);
    auto first = pipe.run();
    REQUIRE(first.next().has_value()); // the first run holds its read-ahead now
    std::atomic<std::size_t> second_fields{0};
    std::atomic<bool> second_done{false};
    std::thread second([&] {
        for (auto& s : shard::shards(t.list, options()).on(rt)) second_fields += s.fields.size();
        second_done = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK_FALSE(second_done.load()); // waiting for room
    std::size_t n = 1;
    while (first.next()) ++n;
    CHECK(n == 24);
    second.join();
    CHECK(second_fields == 48);
    CHECK(rt.memory().stats().peak <= 100 << 10);
    std::lock_guard lk(mu);
    CHECK(std::any_of(lines.begin(), lines.end(), [](const std::string& l) { return l.find("for room in the memory budget (limit 100 KiB") != std::string::npos; }));
}

TEST_CASE("a budget smaller than one run's read-ahead lets the run through alone")
{
    temp_dir d;
    const auto t = make_shards(d.path, 4, 6);
    conveyor::runtime rt(conveyor::runtime_options{.io_threads = 1, .compute_threads = 1, .memory_limit = 16 << 10});
    std::size_t n = 0;
    for (auto& s : shard::shards(t.list, options()).on(rt)) n += s.fields.size();
    CHECK(n == 48);
    CHECK(rt.memory().stats().oversize >= 1);
}
