// Tests of conveyor/shard/writer.hpp (and shard/detail/tar_write.hpp): shards split as
// webdataset's ShardWriter splits them, headers that the tar decoder reads back with the
// index's offsets, long names, reproducible bytes, and no partial shard ever visible.
// (GNU tar and Python's tarfile read the same shards in tests/shard/tar_tools.sh.)
#include <conveyor/shard/detail/tar.hpp>
#include <conveyor/shard/detail/tar_write.hpp>
#include <conveyor/shard/writer.hpp>

#include "../support/common.hpp"
#include "tar_support.hpp"

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
namespace cs = conveyor::shard;
namespace sd = conveyor::shard::detail;

namespace {

using tar_test::slurp;
using tar_test::temp_dir;

std::span<const std::byte> bytes_of(const std::string& s)
{
    return std::as_bytes(std::span(s.data(), s.size()));
}

struct written_member {
    std::string name;
    std::uint64_t header; // offset of its (first) header
    std::uint64_t data;   // offset of its data
    std::string bytes;
};

/// Reads a shard back header by header, applying pax `path` and `size` records.
std::vector<written_member> read_members(const std::string& t)
{
    std::vector<written_member> out;
    std::string pax_path;
    std::int64_t pax_size = -1;
    std::uint64_t first_header = 0;
    bool in_pax = false;
    for (std::size_t at = 0; at + sd::tar_block <= t.size();) {
        const auto block = std::as_bytes(std::span(t.data() + at, sd::tar_block));
        if (sd::is_zero_block(block)) break;
        sd::tar_header h;
        const std::string why = sd::decode_tar_header(block, h);
        REQUIRE_MESSAGE(why.empty(), "header at " << at << ": " << why);
        REQUIRE(h.ustar);
        if (!in_pax) first_header = at;
        const std::uint64_t data = at + sd::tar_block;
        if (h.kind == sd::tar_kind::pax_local) {
            std::vector<std::pair<std::string, std::string>> recs;
            REQUIRE(sd::parse_pax_records(std::string_view(t).substr(data, static_cast<std::size_t>(h.size)), recs).empty());
            for (auto& [k, v] : recs) {
                if (k == "path") pax_path = v;
                if (k == "size") pax_size = std::stoll(v);
            }
            in_pax = true;
            at = data + sd::tar_padded(static_cast<std::uint64_t>(h.size));
            continue;
        }
        const std::int64_t size = pax_size >= 0 ? pax_size : h.size;
        out.push_back({pax_path.empty() ? h.name : pax_path, first_header, data, t.substr(data, static_cast<std::size_t>(size))});
        CHECK(h.mode == 0444);
        CHECK(h.mtime == 0);
        CHECK(h.uid == 0);
        CHECK(h.uname.empty());
        pax_path.clear();
        pax_size = -1;
        in_pax = false;
        at = data + sd::tar_padded(static_cast<std::uint64_t>(size));
    }
    return out;
}

cs::writer_options local(const temp_dir& d, std::uint64_t count = 100, std::uint64_t size = 1u << 30)
{
    cs::writer_options o;
    o.pattern = (d.path / "shard-%06d.tar").string();
    o.max_count = count;
    o.max_size = size;
    return o;
}

void write_sample(cs::writer& w, const std::string& key, const std::string& jpg, const std::string& cls)
{
    const cs::field_view f[] = {{"jpg", bytes_of(jpg)}, {"cls", bytes_of(cls)}};
    w.write(key, f);
}

} // namespace

TEST_CASE("shard names put the number into one printf-style conversion")
{
    CHECK(cs::format_shard_name("out/shard-%06d.tar", 7) == "out/shard-000007.tar");
    CHECK(cs::format_shard_name("s3://b/p/shard-%d.tar", 12) == "s3://b/p/shard-12.tar");
    CHECK(cs::format_shard_name("a%%-%4d", 3) == "a%-   3");
    CHECK(cs::format_shard_name("x-%03d", 12345) == "x-12345");
    CHECK_THROWS_AS(cs::format_shard_name("shard.tar", 0), conveyor::error);
    CHECK_THROWS_AS(cs::format_shard_name("%d-%d", 0), conveyor::error);
    CHECK_THROWS_AS(cs::format_shard_name("%s", 0), conveyor::error);
    CHECK_THROWS_AS(cs::format_shard_name("%06", 0), conveyor::error);
}

TEST_CASE("shards split as webdataset's ShardWriter splits them: after a limit is reached, never before")
{
    const std::vector<std::uint64_t> ten(10, 100);
    CHECK(cs::plan_shards(ten, 4, 1u << 30) == std::vector<std::uint64_t>{0, 4, 8});
    // 100+100+100 = 300 >= 250: the third sample goes in, then the shard ends.
    CHECK(cs::plan_shards(ten, 100, 250) == std::vector<std::uint64_t>{0, 3, 6, 9});
    CHECK(cs::plan_shards(ten, 100, 300) == std::vector<std::uint64_t>{0, 3, 6, 9});
    // A sample larger than max_size is written whole into the open shard, which then ends.
    const std::vector<std::uint64_t> big{10, 5000, 10, 10, 5000, 5000};
    CHECK(cs::plan_shards(big, 100, 1000) == std::vector<std::uint64_t>{0, 2, 5});
    CHECK(cs::plan_shards({}, 10, 10).empty());
}

TEST_CASE("shard writer writes members in the order given, at the offsets its index records")
{
    temp_dir d;
    cs::writer w(local(d, 3));
    for (int i = 0; i < 7; ++i)
        write_sample(w, "dir/sample" + std::to_string(i), std::string(100 + 300 * i, static_cast<char>('a' + i)), std::to_string(i % 4));
    w.close();
    const auto& idx = w.index();
    REQUIRE(idx.shards.size() == 3);
    CHECK(idx.shards[0].samples == 3);
    CHECK(idx.shards[2].samples == 1);
    std::uint64_t total = 0;
    int i = 0;
    for (std::size_t s = 0; s < 3; ++s) {
        const auto& sh = idx.shards[s];
        CHECK(sh.url == (d.path / cs::format_shard_name("shard-%06d.tar", s)).string());
        const std::string t = slurp(sh.url);
        CHECK(t.size() == sh.bytes);
        CHECK(t.size() % 10240 == 0);
        total += t.size();
        const auto m = read_members(t);
        REQUIRE(m.size() == 2 * sh.entries.size());
        for (std::size_t e = 0; e < sh.entries.size(); ++e, ++i) {
            const auto& ent = sh.entries[e];
            CHECK(ent.key == "dir/sample" + std::to_string(i));
            REQUIRE(ent.fields.size() == 2);
            CHECK(m[2 * e].name == ent.key + ".jpg");
            CHECK(m[2 * e + 1].name == ent.key + ".cls");
            CHECK(m[2 * e].header == ent.offset);
            CHECK(m[2 * e].data == ent.fields[0].offset);
            CHECK(m[2 * e + 1].data == ent.fields[1].offset);
            CHECK(ent.fields[0].size == 100u + 300u * i);
            CHECK(m[2 * e].bytes == std::string(100 + 300 * i, static_cast<char>('a' + i)));
            CHECK(m[2 * e + 1].bytes == std::to_string(i % 4));
            CHECK(ent.offset + ent.size == m[2 * e + 1].data + sd::tar_padded(ent.fields[1].size));
        }
    }
    CHECK(w.samples() == 7);
    CHECK(w.bytes() == total);
}

TEST_CASE("shard writer ends a shard once its data bytes reach max_size, and gives an oversized sample a shard")
{
    temp_dir d;
    cs::writer w(local(d, 100, 1000));
    const std::vector<std::size_t> sizes{10, 5000, 10, 10, 5000, 5000};
    for (std::size_t i = 0; i < sizes.size(); ++i) write_sample(w, "k" + std::to_string(i), std::string(sizes[i], 'x'), "");
    w.close();
    std::vector<std::uint64_t> counts;
    for (const auto& s : w.index().shards) counts.push_back(s.samples);
    CHECK(counts == std::vector<std::uint64_t>{2, 3, 1});
}

TEST_CASE("member names over 100 bytes use ustar's prefix, or a pax path record, and read back whole")
{
    std::string_view prefix, name;
    CHECK(sd::split_ustar_name(std::string(100, 'a'), prefix, name));
    CHECK(prefix.empty());
    const std::string split = std::string(150, 'p') + "/" + std::string(100, 'n');
    REQUIRE(sd::split_ustar_name(split, prefix, name));
    CHECK(prefix.size() == 150);
    CHECK(name.size() == 100);
    CHECK_FALSE(sd::split_ustar_name(std::string(101, 'a'), prefix, name));
    CHECK_FALSE(sd::split_ustar_name(std::string(156, 'p') + "/x", prefix, name));
    CHECK_FALSE(sd::split_ustar_name(std::string(200, 'p') + "/" + std::string(60, 'n'), prefix, name));
    CHECK(sd::pax_record("path", "abc") == "12 path=abc\n");
    // The length counts its own digits: 99 fits two, one byte more needs a third.
    CHECK(sd::pax_record("path", std::string(90, 'x')) == "99 path=" + std::string(90, 'x') + "\n");
    CHECK(sd::pax_record("path", std::string(91, 'x')) == "101 path=" + std::string(91, 'x') + "\n");

    temp_dir d;
    cs::writer w(local(d));
    const std::vector<std::string> keys{
        std::string(120, 'k'),                                  // no '/': pax
        std::string(140, 'p') + "/" + std::string(90, 'n'),    // prefix + name
        std::string(200, 'p') + "/" + std::string(120, 'n'),   // over 255: pax
        "d/" + std::string(97, 'e'),                           // exactly 100 with ".cls"? 2+97+4 = 103: prefix split
    };
    for (const auto& k : keys) write_sample(w, k, "jpeg bytes", "1");
    w.close();
    const auto m = read_members(slurp(w.index().shards.at(0).url));
    REQUIRE(m.size() == 8);
    for (std::size_t i = 0; i < keys.size(); ++i) {
        CHECK(m[2 * i].name == keys[i] + ".jpg");
        CHECK(m[2 * i + 1].name == keys[i] + ".cls");
        CHECK(m[2 * i].header == w.index().shards[0].entries[i].offset);
        CHECK(m[2 * i].data == w.index().shards[0].entries[i].fields[0].offset);
    }
}

TEST_CASE("shard writer makes the same bytes from the same samples")
{
    temp_dir a, b;
    for (auto* d : {&a, &b}) {
        cs::writer w(local(*d, 2));
        for (int i = 0; i < 5; ++i) write_sample(w, "s" + std::to_string(i), std::string(777 * i, 'z'), std::to_string(i));
        w.close();
    }
    for (int s = 0; s < 3; ++s) {
        const auto name = cs::format_shard_name("shard-%06d.tar", s);
        const std::string x = slurp(a.path / name), y = slurp(b.path / name);
        CHECK(!x.empty());
        CHECK(x == y);
    }
}

TEST_CASE("a shard appears under its name only when complete, and an abandoned one leaves nothing")
{
    temp_dir d;
    {
        cs::writer w(local(d, 2));
        for (int i = 0; i < 3; ++i) write_sample(w, "s" + std::to_string(i), "data", "0");
        // Shard 0 is complete; shard 1 is in progress under a hidden temporary name.
        CHECK(fs::exists(d.path / "shard-000000.tar"));
        CHECK_FALSE(fs::exists(d.path / "shard-000001.tar"));
        int hidden = 0;
        for (const auto& e : fs::directory_iterator(d.path))
            if (e.path().filename().string().starts_with(".shard-000001.tar.tmp-")) ++hidden;
        CHECK(hidden == 1);
    } // destroyed without close(): the shard in progress is removed
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(d.path)) left.push_back(e.path().filename().string());
    CHECK(left == std::vector<std::string>{"shard-000000.tar"});
}

TEST_CASE("shard writer refuses keys and fields that would not read back as written")
{
    temp_dir d;
    cs::writer w(local(d));
    const std::string x = "x";
    const cs::field_view jpg[] = {{"jpg", bytes_of(x)}};
    CHECK_THROWS_AS(w.write("", jpg), conveyor::error);
    CHECK_THROWS_AS(w.write("a/b.c", jpg), conveyor::error);
    CHECK_THROWS_AS(w.write("a/", jpg), conveyor::error);
    CHECK_THROWS_AS(w.write(std::string("a\0b", 3), jpg), conveyor::error);
    CHECK_THROWS_AS(w.write("line\nbreak", jpg), conveyor::error);
    const cs::field_view twice[] = {{"jpg", bytes_of(x)}, {"jpg", bytes_of(x)}};
    CHECK_THROWS_AS(w.write("k", twice), conveyor::error);
    const cs::field_view slash[] = {{"a/b", bytes_of(x)}};
    CHECK_THROWS_AS(w.write("k", slash), conveyor::error);
    // The dotted name is fine in a folder: only the base name matters.
    CHECK_NOTHROW(w.write("v1.2/k", jpg));
    try {
        w.write("v1.2/k", jpg);
        FAIL("a repeated key was accepted");
    } catch (const conveyor::error& e) {
        CHECK(e.key() == "v1.2/k");
        CHECK(std::string(e.what()).find("repeats") != std::string::npos);
    }
    // Refusals write nothing and leave the writer usable.
    CHECK_NOTHROW(w.write("k2", jpg));
    w.close();
    CHECK(w.index().shards.at(0).samples == 2);
    CHECK_THROWS_AS(cs::writer(cs::writer_options{.pattern = "s3://bucket/x-%d.tar"}), conveyor::error);
}

TEST_CASE("a member too large for ustar's size field gets a pax size record")
{
    std::vector<std::byte> out;
    const std::uint64_t huge = sd::ustar_size_max + 1;
    CHECK(sd::append_member_header(out, "k.bin", huge, {}) == 3 * sd::tar_block);
    sd::tar_header h;
    REQUIRE(sd::decode_tar_header(std::span(out).first(sd::tar_block), h).empty());
    CHECK(h.kind == sd::tar_kind::pax_local);
    std::vector<std::pair<std::string, std::string>> recs;
    REQUIRE(sd::parse_pax_records(std::string_view(reinterpret_cast<const char*>(out.data()) + 512, static_cast<std::size_t>(h.size)), recs).empty());
    REQUIRE(recs.size() == 1);
    CHECK(recs[0].first == "size");
    CHECK(recs[0].second == std::to_string(huge));
    REQUIRE(sd::decode_tar_header(std::span(out).subspan(2 * sd::tar_block, sd::tar_block), h).empty());
    CHECK(h.name == "k.bin");
}

TEST_CASE("shard writer on a full disk: an error naming the shard, the shards before it whole, no partial file")
{
    conveyor_test::small_disk disk(512 * 1024);
    if (!disk.ok()) {
        MESSAGE("skipped: " << disk.why());
        return;
    }
    cs::writer_options o;
    o.pattern = (disk.path() / "shard-%06d.tar").string();
    o.max_count = 2;
    o.max_size = 1u << 30;
    std::string failure;
    try {
        cs::writer w(o);
        for (int i = 0; i < 40; ++i) write_sample(w, "s" + std::to_string(i), std::string(60'000, static_cast<char>('a' + i % 26)), "1");
        w.close();
    } catch (const conveyor::error& e) {
        failure = e.what();
        CHECK(e.code() == std::errc::no_space_on_device);
    }
    REQUIRE_FALSE(failure.empty());
    CHECK(failure.find(disk.path().string() + "/") != std::string::npos);
    // What is left: whole shards of two samples each, nothing hidden or half written.
    for (const auto& name : disk.names()) {
        INFO(name);
        CHECK(name.rfind("shard-", 0) == 0);
        const auto members = read_members(slurp(disk.path() / name));
        CHECK(members.size() == 4); // two samples of two members
    }
}
