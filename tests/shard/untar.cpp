// Tests of conveyor/shard/untar.hpp and shard/detail/sample_reader.hpp: webdataset's grouping
// of members into samples, whole and streamed shards (plain and gzip-compressed) read into
// the same samples, and the untar stage's error policies.
#include <conveyor/shard/untar.hpp>

#include <conveyor/file/chunks.hpp>
#include <conveyor/shard/detail/sample_reader.hpp>

#include "tar_support.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>

#include <doctest/doctest.h>

#include <map>

using namespace tar_test;
namespace shard = conveyor::shard;
namespace asio = boost::asio;

namespace {

/// "key: field=bytes field=bytes" per sample, to compare whole runs at a glance.
std::vector<std::string> describe(const std::vector<shard::sample>& samples)
{
    std::vector<std::string> out;
    for (const auto& s : samples) {
        std::string line = s.key + ":";
        for (const auto& f : s.fields) line += " " + f.name + "=" + std::string(f.data.view());
        out.push_back(line);
    }
    return out;
}

std::vector<shard::sample> samples_of(const std::string& tar, shard::tar_options o = {})
{
    return sd::read_samples(to_slice(tar), "test://s.tar", {.tar = o, .shard = 3});
}

/// Reads `bytes` through a sample_reader in chunks of `chunk_size`, on `rt`'s I/O thread.
std::vector<shard::sample> stream_samples(conveyor::runtime* rt, const std::string& bytes, std::size_t chunk_size,
                                          sd::sample_reader_options o = {})
{
    asio::io_context local;
    auto reader = std::make_shared<sd::sample_reader>(std::make_unique<sd::memory_chunk_reader>(to_slice(bytes), "test://s.tar", chunk_size), o, rt);
    auto task = [](std::shared_ptr<sd::sample_reader> r) -> asio::awaitable<std::vector<shard::sample>> {
        std::vector<shard::sample> out;
        while (auto s = co_await r->async_next()) out.push_back(std::move(*s));
        co_return out;
    };
    if (rt) return asio::co_spawn(rt->io_executor(0), task(reader), asio::use_future).get();
    auto f = asio::co_spawn(local, task(reader), asio::use_future);
    local.run();
    return f.get();
}

/// A pipeline of blobs holding `shards` (name, bytes), made afresh for each run.
conveyor::pipeline<conveyor::blob> blobs(std::vector<std::pair<std::string, std::string>> shards)
{
    return conveyor::pipeline<conveyor::blob>([shards](const std::shared_ptr<conveyor::run_context>& ctx) {
        return conveyor::make_stream<conveyor::blob>(ctx, "blobs", 4, [shards](conveyor::sink<conveyor::blob>& out) -> asio::awaitable<void> {
            std::uint64_t i = 0;
            for (const auto& [name, bytes] : shards) {
                conveyor::blob b{.key = name, .data = conveyor::buffer::copy_of(bytes), .origin = "/data/" + name, .index = i++};
                if (!co_await out.send(std::move(b))) co_return;
            }
        });
    });
}

std::string wds_shard(int first, int n)
{
    std::string tar;
    for (int i = first; i < first + n; ++i) {
        const std::string k = "s" + std::to_string(i);
        tar += tar_entry(k + ".jpg", "J" + std::to_string(i)) + tar_entry(k + ".cls", std::to_string(i % 10));
    }
    return tar + end_of_archive;
}

} // namespace

TEST_CASE("members group into samples by webdataset's rule: consecutive keys, fields lower-cased, metadata left out")
{
    const std::string tar = tar_entry("__key__", "ignored") + tar_entry("a/x.JPG", "1") + tar_entry("a/x.seg.png", "2") +
                            tar_entry("a/x.json", "3") + tar_entry("__meta__/info.json", "m") + tar_entry("README", "no dot") +
                            tar_entry("a/y.jpg", "4") + tar_entry("a.dir/z.cls", "5") + tar_entry("a/x.cls", "6") + end_of_archive;
    const auto ss = samples_of(tar);
    CHECK(describe(ss) == std::vector<std::string>{"a/x: jpg=1 seg.png=2 json=3", "a/y: jpg=4", "a.dir/z: cls=5", "a/x: cls=6"});
    REQUIRE(ss.size() == 4);
    CHECK(ss[0].origin == "test://s.tar");
    CHECK(ss[0].offset == 1024);       // the header of a/x.JPG
    CHECK(ss[0].fields[0].offset == 1536);
    CHECK(ss[0].shard == 3);
    CHECK(ss[3].index == 3);
    CHECK(ss[0].find("seg.png") != nullptr);

    shard::tar_options keep_case;
    keep_case.lowercase_fields = false;
    CHECK(describe(samples_of(tar, keep_case))[0] == "a/x: JPG=1 seg.png=2 json=3");

    sd::sample_parser p("test://s.tar");
    p.feed({to_slice(tar), 0});
    p.finish();
    while (p.next()) {
    }
    CHECK(p.grouping().meta == 2);
    CHECK(p.grouping().unkeyed == 1);
    CHECK(p.grouping().samples == 4);
}

TEST_CASE("a read resumed at a sample's end offset gives the samples after it, numbered on")
{
    const std::string tar = wds_shard(0, 5);
    const auto all = samples_of(tar);
    REQUIRE(all.size() == 5);
    CHECK(all[0].offset == 0);
    CHECK(all[0].end == 2048);
    CHECK(all[4].end == 5 * 2048);
    const auto whole = to_slice(tar);
    sd::sample_parser p("test://s.tar", {.first_index = 2});
    p.feed({whole.sub(all[1].end), all[1].end}); // as a chunk reader started there delivers it
    p.finish();
    std::vector<shard::sample> rest;
    while (auto s = p.next()) rest.push_back(std::move(*s));
    REQUIRE(rest.size() == 3);
    CHECK(rest[0].key == "s2");
    CHECK(rest[0].index == 2);
    CHECK(rest[0].offset == all[2].offset);
    CHECK(rest[0].fields[0].offset == all[2].fields[0].offset);
    CHECK(rest[2].end == all[4].end);
}

TEST_CASE("a field twice in one sample is an error naming the shard, the key and the offset")
{
    const std::string tar = tar_entry("k.jpg", "1") + tar_entry("k.JPG", "2") + end_of_archive;
    try {
        samples_of(tar);
        FAIL("no error");
    } catch (const conveyor::error& e) {
        CHECK(e.code() == shard::errc::duplicate_field);
        CHECK(e.offset() == 1024);
        CHECK(std::string(e.what()).find("test://s.tar") != std::string::npos);
        CHECK(std::string(e.what()).find("'k'") != std::string::npos);
    }
}

TEST_CASE("meta member names follow webdataset's two rules")
{
    CHECK(sd::is_meta_member("__key__"));
    CHECK(sd::is_meta_member("___"));
    CHECK(sd::is_meta_member("__a.b__"));
    CHECK(sd::is_meta_member("__meta__/x.json"));
    CHECK(!sd::is_meta_member("__x/y.jpg"));
    CHECK(!sd::is_meta_member("a/__key__"));
    CHECK(!sd::is_meta_member("__key__.jpg"));
    CHECK(!sd::is_meta_member("___/x.jpg"));
}

TEST_CASE("a shard streamed in chunks of any size, plain or gzip-compressed, gives the samples of the whole")
{
    std::string tar;
    for (int i = 0; i < 30; ++i)
        tar += tar_entry("d/" + std::to_string(i) + ".jpg", std::string(100 + 173 * i, static_cast<char>('a' + i % 26))) +
               tar_entry("d/" + std::to_string(i) + ".cls", std::to_string(i));
    tar += end_of_archive;
    const auto whole = describe(samples_of(tar));
    REQUIRE(whole.size() == 30);

    temp_dir d;
    spill(d.path / "s.tar", tar);
    REQUIRE(sh("gzip -n -c '" + (d.path / "s.tar").string() + "' > '" + (d.path / "s.tgz").string() + "'") == 0);
    const std::string tgz = slurp(d.path / "s.tgz");
    CHECK(describe(samples_of(tgz)) == whole); // recognised by its magic, not its name

    conveyor::runtime rt({.io_threads = 1, .compute_threads = 2});
    sd::sample_reader_options small;
    small.inflate_chunk_size = 3000; // many inflated chunks: members span them
    for (std::size_t cs : {std::size_t{1}, std::size_t{7}, std::size_t{512}, std::size_t{513}, std::size_t{4096}, SIZE_MAX}) {
        CAPTURE(cs);
        CHECK(describe(stream_samples(nullptr, tar, cs)) == whole);
        if (cs >= 7) CHECK(describe(stream_samples(&rt, tgz, cs, small)) == whole); // inflated on the compute pool
    }
    CHECK(describe(stream_samples(nullptr, tgz, 1, small)) == whole);

    // GNU tar's own compression, and a bad one.
    REQUIRE(sh("cd '" + d.str() + "' && mkdir t && cp s.tar t/ && tar -czf made.tar.gz -C t s.tar") == 0);
    const auto inner = samples_of(slurp(d.path / "made.tar.gz"));
    REQUIRE(inner.size() == 1);
    CHECK(inner[0].key == "s");
    CHECK(inner[0].fields[0].name == "tar");
    CHECK(inner[0].fields[0].data.view() == tar);
    { // A tar error inside a compressed shard: its offset is in the uncompressed stream.
        std::string bad = tar;
        bad[2048 + 3] ^= 1; // the third member's header
        temp_dir d2;
        spill(d2.path / "bad.tar", bad);
        REQUIRE(sh("gzip -n '" + (d2.path / "bad.tar").string() + "'") == 0);
        try {
            samples_of(slurp(d2.path / "bad.tar.gz"));
            FAIL("no error");
        } catch (const conveyor::error& e) {
            CHECK(e.code() == shard::errc::bad_checksum);
            CHECK(e.offset() == 2048);
            CHECK(std::string(e.what()).find("uncompressed stream") != std::string::npos);
        }
    }
    try {
        stream_samples(&rt, tgz.substr(0, tgz.size() - 20), 4096, small);
        FAIL("no error");
    } catch (const conveyor::error& e) {
        CHECK(e.code() == shard::errc::truncated_gzip);
        CHECK(e.where() == "test://s.tar");
    }
}

TEST_CASE("a gzip-compressed shard is read to the end of its gzip stream: a cut or corrupt trailer after the tar's end is an error at any chunk size")
{
    // The tar's end-of-archive marker comes well before the end of the gzip stream (GNU tar
    // pads to a 10 KiB record), so the trailer (CRC-32 and length) is only reached when
    // inflating goes on after the marker. Found by fuzz/ (tar_gzip): with small inflated
    // chunks the samples came out and a missing or wrong trailer went unnoticed.
    const std::string tar = wds_shard(0, 8) + std::string(8192, '\0');
    temp_dir d;
    spill(d.path / "s.tar", tar);
    REQUIRE(sh("gzip -n '" + (d.path / "s.tar").string() + "'") == 0);
    const std::string tgz = slurp(d.path / "s.tar.gz");
    REQUIRE(tgz.size() > 8);
    std::string wrong_crc = tgz;
    wrong_crc[wrong_crc.size() - 8] ^= 1;
    const auto whole = describe(samples_of(tar));
    REQUIRE(whole.size() == 8);

    sd::sample_reader_options small;
    small.inflate_chunk_size = 1000;
    conveyor::runtime rt({.io_threads = 1, .compute_threads = 1});
    for (const auto& [bytes, code] : {std::pair{tgz.substr(0, tgz.size() - 8), shard::errc::truncated_gzip},
                                      std::pair{wrong_crc, shard::errc::bad_gzip}}) {
        for (std::size_t cs : {std::size_t{7}, std::size_t{4096}, SIZE_MAX}) {
            CAPTURE(cs);
            for (auto* runtime : {static_cast<conveyor::runtime*>(nullptr), &rt}) {
                CAPTURE(runtime != nullptr);
                try {
                    stream_samples(runtime, bytes, cs, small);
                    FAIL("no error");
                } catch (const conveyor::error& e) {
                    CHECK(e.code() == code);
                }
            }
        }
        try {
            sd::read_members(to_slice(bytes), "test://s.tar");
            FAIL("no error");
        } catch (const conveyor::error& e) {
            CHECK(e.code() == code);
        }
    }
    CHECK(describe(stream_samples(nullptr, tgz, 7, small)) == whole); // and a sound one reads to its end
    CHECK(describe(stream_samples(&rt, tgz, 4096, small)) == whole);
}

TEST_CASE("a shard file read in chunks from disk gives the samples of the whole, holding little of it")
{
    if (!have("tar") || !have("gzip")) return;
    temp_dir d;
    std::size_t largest = 0;
    for (int i = 0; i < 40; ++i) {
        const std::size_t n = 20000 + 3001 * static_cast<std::size_t>(i);
        largest = std::max(largest, n);
        spill(d.path / "in" / ("k" + std::to_string(100 + i) + ".jpg"), std::string(n, static_cast<char>('A' + i % 26)));
        spill(d.path / "in" / ("k" + std::to_string(100 + i) + ".cls"), std::to_string(i));
    }
    REQUIRE(sh("cd '" + d.str() + "/in' && tar --format=gnu --sort=name -cf ../s.tar * && gzip -k ../s.tar") == 0);
    const auto whole = describe(samples_of(slurp(d.path / "s.tar")));
    REQUIRE(whole.size() == 40);
    conveyor::runtime rt({.io_threads = 1, .compute_threads = 1});
    for (const char* name : {"s.tar", "s.tar.gz"})
        for (std::size_t cs : {std::size_t{4096}, std::size_t{65536}}) {
            CAPTURE(name);
            CAPTURE(cs);
            auto task = [](conveyor::runtime* rt, std::string path, std::size_t cs) -> asio::awaitable<std::pair<std::vector<shard::sample>, std::size_t>> {
                sd::sample_reader r(conveyor::file::read_chunks(*rt, path, {.chunk_size = cs, .chunks_in_flight = 2}), {}, rt);
                std::vector<shard::sample> out;
                std::size_t held = 0;
                while (auto s = co_await r.async_next()) {
                    out.push_back(std::move(*s));
                    held = std::max(held, r.parser().tar().held_bytes());
                }
                co_return std::pair{std::move(out), held};
            };
            auto [got, held] = asio::co_spawn(rt.io_executor(0), task(&rt, (d.path / name).string(), cs), asio::use_future).get();
            CHECK(describe(got) == whole);
            CHECK(got[0].origin == (d.path / name).string());
            CHECK(held <= 2 * std::max<std::size_t>(cs, std::size_t{8} << 20 /* inflated chunks */) + largest + largest / 4);
        }
}

TEST_CASE("untar reads gzip-compressed blobs too, inflating on the compute pool")
{
    temp_dir d;
    spill(d.path / "a.tar", wds_shard(0, 50));
    REQUIRE(sh("gzip -n '" + (d.path / "a.tar").string() + "'") == 0);
    auto p = blobs({{"a.tar.gz", slurp(d.path / "a.tar.gz")}, {"b.tar", wds_shard(50, 1)}}) | shard::untar();
    std::vector<std::string> keys;
    for (auto& s : p) keys.push_back(s.key + "=" + std::string(s.find("jpg")->data.view()));
    REQUIRE(keys.size() == 51);
    CHECK(keys[0] == "s0=J0");
    CHECK(keys[49] == "s49=J49");
    CHECK(keys[50] == "s50=J50");
}

TEST_CASE("untar turns blobs of tar shards into samples carrying their shard's URL and index")
{
    auto p = blobs({{"a.tar", wds_shard(0, 3)}, {"b.tar", wds_shard(3, 2)}}) | shard::untar();
    std::vector<shard::sample> got;
    for (auto& s : p) got.push_back(std::move(s));
    REQUIRE(got.size() == 5);
    CHECK(got[0].key == "s0");
    CHECK(got[0].origin == "/data/a.tar");
    CHECK(got[4].origin == "/data/b.tar");
    CHECK(got[4].shard == 1);
    CHECK(got[4].index == 1);
    CHECK(got[4].find("jpg")->data.view() == "J4");
    CHECK(got[4].find("cls")->data.view() == "4");
}

TEST_CASE("untar with on_error::skip delivers a bad shard's complete samples before the error, counts it, and goes on")
{
    std::string bad = wds_shard(10, 4);
    bad[4 * 1024 + 20] ^= 1; // the header of the third sample's jpg: checksum
    auto p = blobs({{"a.tar", wds_shard(0, 2)}, {"bad.tar", bad}, {"c.tar", wds_shard(20, 2)}}) |
             shard::untar({.errors = conveyor::on_error::skip});
    auto run = p.run();
    std::vector<std::string> keys;
    for (auto& s : run) keys.push_back(s.key);
    // s11 was being read when the error came (more of its fields might have followed): it
    // goes with the rest of the shard.
    CHECK(keys == std::vector<std::string>{"s0", "s1", "s10", "s20", "s21"});
    CHECK(run.stats().skipped == 1);

    auto strict = blobs({{"a.tar", wds_shard(0, 2)}, {"bad.tar", bad}}) | shard::untar();
    try {
        for (auto& s : strict) (void)s;
        FAIL("no error");
    } catch (const conveyor::error& e) {
        CHECK(e.code() == shard::errc::bad_checksum);
        CHECK(std::string(e.what()).find("/data/bad.tar") != std::string::npos);
        CHECK(std::string(e.what()).find("at byte 4096") != std::string::npos);
    }
}
