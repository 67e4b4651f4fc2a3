// Tests of conveyor/shard/dataset.hpp: random access to samples through a dataset index,
// one ranged read each, the same samples the stream gives, and a stale index refused.
#include <conveyor/shard/dataset.hpp>
#include <conveyor/shard/error.hpp>

#include "tar_support.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>

#include <doctest/doctest.h>

#include <future>
#include <random>

using namespace tar_test;
namespace shard = conveyor::shard;
namespace asio = boost::asio;

namespace {

/// Shards of samples with `jpg` and `cls` members, written by hand, and their index.
struct indexed_set {
    shard::dataset_index index;
    std::vector<std::string> jpg; // by global sample number
};

indexed_set make_indexed(const fs::path& dir, int shards, int per_shard)
{
    indexed_set t;
    std::mt19937 rng(5);
    for (int s = 0; s < shards; ++s) {
        shard::index_shard is;
        is.url = "shard-" + std::to_string(s) + ".tar"; // relative to the index's folder
        std::string tar;
        for (int k = 0; k < per_shard; ++k) {
            const std::string key = "k" + std::to_string(s) + "_" + std::to_string(k);
            std::string jpg(1 + rng() % 3000, '\0');
            for (auto& c : jpg) c = static_cast<char>(rng());
            shard::index_entry e;
            e.key = key;
            e.offset = tar.size();
            e.fields.push_back({"jpg", tar.size() + 512, jpg.size()});
            tar += tar_entry(key + ".jpg", jpg);
            e.fields.push_back({"cls", tar.size() + 512, 1});
            tar += tar_entry(key + ".cls", std::to_string(k % 10));
            e.size = tar.size() - e.offset;
            is.entries.push_back(e);
            t.jpg.push_back(jpg);
        }
        tar += end_of_archive;
        is.samples = is.entries.size();
        is.bytes = tar.size();
        spill(dir / is.url, tar);
        t.index.shards.push_back(std::move(is));
    }
    return t;
}

} // namespace

TEST_CASE("a sharded dataset gives sample i by one ranged read, blocking or awaited")
{
    temp_dir d;
    const auto t = make_indexed(d.path, 3, 9);
    conveyor::runtime rt(conveyor::runtime_options{.io_threads = 2, .compute_threads = 1});
    shard::dataset ds(t.index, d.str() + "/", rt);
    REQUIRE(ds.size() == 27);
    CHECK(ds.locate(10) == std::pair<std::size_t, std::size_t>{1, 1});
    for (std::size_t i = 0; i < ds.size(); ++i) {
        CAPTURE(i);
        const auto s = ds.get(i);
        CHECK(s.key == t.index.shards[i / 9].entries[i % 9].key);
        REQUIRE(s.find("jpg"));
        CHECK(std::string(s.find("jpg")->data.view()) == t.jpg[i]);
        CHECK(s.find("jpg")->offset == t.index.shards[i / 9].entries[i % 9].fields[0].offset);
        CHECK(s.offset == t.index.shards[i / 9].entries[i % 9].offset);
        CHECK(s.origin == d.str() + "/shard-" + std::to_string(i / 9) + ".tar");
    }
    // Many in flight from a coroutine, in reverse.
    auto all = asio::co_spawn(rt.io_executor(0), [](const shard::dataset& ds) -> asio::awaitable<std::size_t> {
        std::size_t ok = 0;
        for (std::size_t i = ds.size(); i-- > 0;) ok += (co_await ds.async_get(i)).fields.size() == 2;
        co_return ok;
    }(ds), asio::use_future);
    CHECK(all.get() == 27);
    CHECK_THROWS_AS(ds.get(27), conveyor::error);
}

TEST_CASE("a dataset whose index no longer matches its shards says so")
{
    temp_dir d;
    auto t = make_indexed(d.path, 1, 4);
    conveyor::runtime rt(conveyor::runtime_options{.io_threads = 1, .compute_threads = 1});
    auto moved = t.index;
    std::swap(moved.shards[0].entries[1].key, moved.shards[0].entries[2].key);
    shard::dataset ds(moved, d.str() + "/", rt);
    try {
        (void)ds.get(1);
        FAIL("expected an error");
    } catch (const conveyor::error& e) {
        CHECK(e.code() == shard::errc::index_mismatch);
        CHECK(std::string(e.what()).find("shard-0.tar") != std::string::npos);
    }
    // An entry past the shard's end: fewer bytes than the index says.
    auto longer = t.index;
    longer.shards[0].entries[3].size += 4096;
    shard::dataset ds2(longer, d.str() + "/", rt);
    CHECK_THROWS_AS(ds2.get(3), conveyor::error);
    CHECK(ds2.get(0).key == "k0_0");
    // Compressed shards cannot be entered at an offset.
    auto gz = t.index;
    gz.shards[0].url = "x.tar.gz";
    CHECK_THROWS_AS(shard::dataset(gz, d.str() + "/", rt), conveyor::error);
}
