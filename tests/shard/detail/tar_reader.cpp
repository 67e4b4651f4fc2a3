// Tests of conveyor/shard/detail/tar_reader.hpp: archives of GNU tar (each format), bsdtar,
// Python's tarfile and Go's test data read member by member, at every chunk size, against
// what GNU tar extracts; each kind of bad input refused with the shard's URL and offset.
#include <conveyor/shard/detail/tar_reader.hpp>

#include <conveyor/shard/detail/sample_reader.hpp>
#include <conveyor/shard/error.hpp>

#include "../tar_support.hpp"

#include <doctest/doctest.h>

#include <map>
#include <set>

using namespace tar_test;
namespace shard = conveyor::shard;

namespace {

const std::size_t chunk_sizes[] = {1, 7, 512, 513, 4096, SIZE_MAX};

/// The members of `tar` read whole (one chunk), checked to be the same at every chunk size.
std::vector<sd::tar_member> read_every_way(const std::string& tar, shard::tar_options o = {})
{
    const conveyor::slice whole = to_slice(tar);
    const auto ref = read_chunked(whole, SIZE_MAX, o);
    for (auto& m : ref) CHECK_MESSAGE(share_storage(m.data, whole) == !m.data.empty(), m.name); // zero-copy
    for (std::size_t cs : chunk_sizes) {
        CAPTURE(cs);
        const auto got = read_chunked(whole, cs, o);
        REQUIRE(got.size() == ref.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
            CHECK(got[i].name == ref[i].name);
            CHECK(got[i].data.view() == ref[i].data.view());
            CHECK(got[i].header_offset == ref[i].header_offset);
            CHECK(got[i].data_offset == ref[i].data_offset);
            CHECK(got[i].end_offset == ref[i].end_offset);
        }
    }
    return ref;
}

/// The error `read_chunked` throws for `tar` (at every chunk size: the same code and offset).
conveyor::error error_of(const std::string& tar, shard::tar_options o = {})
{
    std::optional<conveyor::error> first;
    for (std::size_t cs : chunk_sizes) {
        CAPTURE(cs);
        try {
            read_chunked(to_slice(tar), cs, o);
            FAIL("no error");
        } catch (const conveyor::error& e) {
            if (!first) first = e;
            CHECK(e.code() == first->code());
            CHECK(e.offset() == first->offset());
        }
    }
    REQUIRE(first);
    CHECK(first->where() == "test://shard.tar");
    CHECK(std::string(first->what()).find("test://shard.tar") != std::string::npos);
    CHECK(std::string(first->what()).find("at byte " + std::to_string(first->offset())) != std::string::npos);
    return *first;
}

/// Every regular member of `tar` has the bytes GNU tar extracts for it, and there are as
/// many as GNU tar lists regular files.
void check_against_gnu_tar(const std::string& tar_path, const std::vector<sd::tar_member>& members)
{
    temp_dir out;
    REQUIRE(sh("tar -xf '" + tar_path + "' -C '" + out.str() + "' 2>/dev/null; chmod -R u+rwX '" + out.str() + "'") == 0);
    std::string listing;
    sh("tar -tvf '" + tar_path + "' 2>/dev/null", &listing);
    std::size_t regular = 0;
    for (std::size_t at = 0; at < listing.size();) {
        if (listing[at] == '-') ++regular;
        at = listing.find('\n', at);
        if (at != std::string::npos) ++at;
    }
    CHECK(members.size() == regular);
    for (const auto& m : members) {
        CAPTURE(m.name);
        CHECK(slurp(out.path / m.name) == m.data.view());
    }
}

/// A tree of files with names of each length class and sizes around block boundaries.
struct tree {
    temp_dir dir;
    std::vector<std::string> names;
    /// `level` 0: names that fit v7's 100 bytes; 1: also one over 100 that ustar splits
    /// into prefix and name; 2: also a 101-byte base name and a 290-byte path (GNU, pax).
    explicit tree(int level)
    {
        const std::size_t sizes[] = {0, 1, 511, 512, 513, 5000, 70000};
        std::size_t k = 0;
        auto add = [&](const std::string& name) {
            std::string data;
            for (std::size_t i = 0; i < sizes[k % 7]; ++i) data += static_cast<char>('a' + (i * 7 + k) % 26);
            ++k;
            spill(dir.path / name, data);
            names.push_back(name);
        };
        add("a.txt");
        add("b.JPG");
        add("sub/c.cls");
        if (level >= 1) add(std::string(60, 'd') + "/" + std::string(60, 'e') + ".jpg"); // 125 bytes: ustar prefix
        if (level >= 2) add(std::string(99, 'f') + ".x");                                // 101 bytes, one part
        if (level >= 2) add(std::string(100, 'g') + "/" + std::string(100, 'h') + "/" + std::string(80, 'i') + ".seg.png"); // 290
        add("z.bin");
        add("z.txt");
    }
};

} // namespace

TEST_CASE("tar reader returns regular members, as views of their chunk or gathered when they span chunks")
{
    const std::string data1 = "hello", data2(1500, 'x'), data3(512, 'y');
    const std::string tar = tar_entry("dir/", "", '5') + tar_entry("a.txt", data1) + tar_entry("b.bin", data2) +
                            tar_entry("link", "", '2') + tar_entry("c.dat", data3) + tar_entry("empty", "") + end_of_archive;
    const auto ms = read_every_way(tar);
    REQUIRE(ms.size() == 4);
    CHECK(ms[0].name == "a.txt");
    CHECK(ms[0].data.view() == data1);
    CHECK(ms[0].header_offset == 512);
    CHECK(ms[0].data_offset == 1024);
    CHECK(ms[0].end_offset == 1536);
    CHECK(ms[1].data.view() == data2);
    CHECK(ms[2].name == "c.dat");
    CHECK(ms[2].header_offset == 512 * 8); // dir 1 block, a.txt 2, b.bin 4, link 1
    CHECK(ms[3].data.empty());

    // In chunks of 1024, b.bin (1500 bytes from 2048) spans two chunks: gathered; a.txt is a view.
    const auto whole = to_slice(tar);
    sd::tar_reader r("test://shard.tar");
    std::vector<sd::tar_member> got;
    for (std::size_t at = 0; at < tar.size(); at += 1024) {
        r.feed({whole.sub(at, std::min<std::size_t>(1024, tar.size() - at)), at});
        while (auto m = r.next()) got.push_back(std::move(*m));
    }
    r.finish();
    while (auto m = r.next()) got.push_back(std::move(*m));
    REQUIRE(got.size() == 4);
    CHECK(share_storage(got[0].data, whole));
    CHECK(!share_storage(got[1].data, whole));
    CHECK(got[1].data.view() == data2);
    CHECK(r.counts().members == 4);
    CHECK(r.counts().assembled == 1);
    CHECK(r.counts().skipped_entries == 2);
    CHECK(r.done());
}

TEST_CASE("tar reader holds no more than the chunks not yet consumed and the member being gathered")
{
    std::string tar;
    for (int i = 0; i < 40; ++i) tar += tar_entry("m" + std::to_string(i) + ".bin", std::string(3000 + 997 * i, 'q'));
    tar += end_of_archive;
    const std::size_t largest = 3000 + 997 * 39;
    for (std::size_t cs : {std::size_t{4096}, std::size_t{16384}}) {
        std::size_t max_held = 0;
        const auto ms = read_chunked(to_slice(tar), cs, {}, &max_held);
        CHECK(ms.size() == 40);
        CHECK(max_held <= 2 * cs + largest + largest / 4); // pool classes round up by at most a quarter
    }
}

TEST_CASE("archives made by GNU tar in gnu, ustar, pax and v7 formats read as GNU tar extracts them")
{
    if (!have("tar")) {
        MESSAGE("skipped: GNU tar is not installed");
        return;
    }
    for (const char* format : {"gnu", "pax", "ustar", "v7"}) {
        const std::string f = format;
        CAPTURE(f);
        tree t(f == "v7" ? 0 : f == "ustar" ? 1 : 2);
        const std::string path = t.dir.str() + ".tar";
        std::string names;
        for (const auto& n : t.names) names += " '" + n + "'";
        REQUIRE(sh("cd '" + t.dir.str() + "' && tar --format=" + format + " -cf '" + path + "' ." + " 2>&1") == 0);
        const auto ms = read_every_way(slurp(path));
        CHECK(ms.size() == t.names.size());
        std::set<std::string> seen;
        for (const auto& m : ms) seen.insert(m.name.starts_with("./") ? m.name.substr(2) : m.name);
        CHECK(seen == std::set<std::string>(t.names.begin(), t.names.end()));
        check_against_gnu_tar(path, ms);
        std::filesystem::remove(path);
    }
}

TEST_CASE("archives made by bsdtar and by Python's tarfile, in each of their formats, read as GNU tar extracts them")
{
    tree t(2);
    if (have("bsdtar")) {
        for (const std::string format : {"pax", "gnutar", "ustar"}) {
            CAPTURE(format);
            const std::string path = t.dir.str() + "-bsd.tar";
            // ustar can hold neither the 101-byte base name nor the 290-byte path: bsdtar
            // says so and leaves them out.
            sh("cd '" + t.dir.str() + "' && bsdtar --format " + format + " -cf '" + path + "' * 2>/dev/null");
            const auto ms = read_every_way(slurp(path));
            CHECK(ms.size() == t.names.size() - (format == "ustar" ? 2 : 0));
            check_against_gnu_tar(path, ms);
        }
    } else {
        MESSAGE("skipped: bsdtar is not installed (Debian package libarchive-tools)");
    }
    if (have("/usr/bin/python3")) {
        for (const std::string format : {"USTAR_FORMAT", "GNU_FORMAT", "PAX_FORMAT"}) {
            CAPTURE(format);
            const std::string path = t.dir.str() + "-py.tar";
            const std::string script = "import tarfile,sys; t=tarfile.open(sys.argv[1],'w',format=tarfile." + format +
                                       ")\nimport os\nos.chdir(sys.argv[2])\nfor n in sys.argv[3:]:\n  try: t.add(n)\n  except ValueError: pass\nt.close()";
            std::string names;
            for (const auto& n : t.names) names += " '" + n + "'";
            REQUIRE(sh("/usr/bin/python3 -c \"" + script + "\" '" + path + "' '" + t.dir.str() + "'" + names) == 0);
            const auto ms = read_every_way(slurp(path));
            CHECK(ms.size() == t.names.size() - (format == "USTAR_FORMAT" ? 2 : 0));
            check_against_gnu_tar(path, ms);
        }
    } else {
        MESSAGE("skipped: /usr/bin/python3 is not installed");
    }
}

TEST_CASE("Go's valid test archives give the members GNU tar extracts; the malformed and sparse ones are refused")
{
    const std::string dir = CONVEYOR_GO_TAR_TESTDATA;
    if (go_archive("gnu.tar").empty()) return;
    shard::tar_options lenient;
    lenient.require_end_of_archive = false; // several of Go's archives stop after their last member
    // Archives that GNU tar reads without complaint, and so do we.
    const std::vector<std::string> valid = {"file-and-dir.tar", "gnu-long-nul.tar", "gnu-not-utf8.tar", "gnu-utf8.tar", "gnu.tar",
                                            "hardlink.tar", "invalid-go17.tar", "nil-uid.tar", "pax-bad-mtime-file.tar",
                                            "gnu-multi-hdrs.tar", "pax-multi-hdrs.tar", "pax-pos-size-file.tar", "pax-records.tar",
                                            "pax.tar", "star.tar", "trailing-slash.tar", "ustar-file-devs.tar", "ustar-file-reg.tar",
                                            "ustar.tar", "v7.tar", "writer.tar", "xattrs.tar"};
    const std::set<std::string> no_end = {"nil-uid.tar", "pax-bad-mtime-file.tar", "gnu-multi-hdrs.tar", "pax-multi-hdrs.tar",
                                          "pax-pos-size-file.tar", "ustar-file-reg.tar"};
    for (const auto& name : valid) {
        CAPTURE(name);
        const std::string bytes = go_archive(name);
        const auto ms = read_every_way(bytes, lenient);
        check_against_gnu_tar(dir + "/" + name, ms);
        if (no_end.count(name)) CHECK(error_of(bytes).code() == shard::errc::missing_end_of_archive);
        else CHECK(read_chunked(to_slice(bytes), 512).size() == ms.size());
    }
    // GNU tar and we part ways, deliberately:
    { // entries that carry no data (directories, FIFOs...) with a size field of 5: GNU tar
      // reads 5 bytes of data and loses its way; Go and Python skip no data, as we do.
        const auto ms = read_every_way(go_archive("hdr-only.tar"));
        REQUIRE(ms.size() == 2);
        CHECK(ms[0].name == "file");
        CHECK(ms[1].name == "file");
    }
    { // a pax global path "" takes the key back here; GNU tar names the members "".
        const auto ms = read_every_way(go_archive("pax-global-records.tar"), lenient);
        REQUIRE(ms.size() == 4);
        CHECK(ms[0].name == "global1"); // a global path applies to the members after it
        CHECK(ms[1].name == "file2");   // a member's own pax path wins
        CHECK(ms[2].name == "file3");
        CHECK(ms[3].name == "file4");
    }
    const std::map<std::string, shard::errc> refused = {
        {"gnu-incremental.tar", shard::errc::sparse_member},  {"gnu-nil-sparse-data.tar", shard::errc::sparse_member},
        {"gnu-nil-sparse-hole.tar", shard::errc::sparse_member}, {"gnu-sparse-big.tar", shard::errc::sparse_member},
        {"sparse-formats.tar", shard::errc::sparse_member},   {"pax-nil-sparse-data.tar", shard::errc::sparse_member},
        {"pax-nil-sparse-hole.tar", shard::errc::sparse_member}, {"pax-sparse-big.tar", shard::errc::sparse_member},
        {"issue10968.tar", shard::errc::bad_number},          {"issue11169.tar", shard::errc::bad_checksum},
        {"issue12435.tar", shard::errc::bad_number},          {"neg-size.tar", shard::errc::bad_number},
        {"pax-bad-hdr-file.tar", shard::errc::bad_pax_record}, {"pax-nul-path.tar", shard::errc::bad_pax_record},
        {"pax-nul-xattrs.tar", shard::errc::bad_pax_record},  {"pax-path-hdr.tar", shard::errc::truncated},
        {"writer-big.tar", shard::errc::size_past_end},       {"writer-big-long.tar", shard::errc::size_past_end},
    };
    for (const auto& [name, code] : refused) {
        CAPTURE(name);
        const std::string bytes = go_archive(name);
        try {
            sd::read_members(to_slice(bytes), dir + "/" + name, lenient);
            FAIL("no error");
        } catch (const conveyor::error& e) {
            CHECK(e.code() == code);
            CHECK(std::string(e.what()).find(name) != std::string::npos);
        }
    }
    // Every .tar there is in one list or the other.
    std::size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir))
        if (e.path().extension() == ".tar") ++n;
    CHECK(n == valid.size() + 2 + refused.size());
}

TEST_CASE("pax records and GNU long names name the next member; global records all after them")
{
    const std::string long_name = std::string(150, 'n') + "/" + std::string(150, 'm') + ".jpg";
    std::string gnu_l = ustar_header("././@LongLink", long_name.size() + 1, 'L') + padded(long_name + '\0');
    const std::string tar = pax_entry({"path=first/renamed.txt"}) + tar_entry("short", "1") + gnu_l + tar_entry("cut", "22") +
                            pax_entry({"path=g/name.txt"}, 'g') + tar_entry("x", "333") +
                            pax_entry({"size=3", "mtime=1.5", "comment=anything"}) + ustar_header("sized.txt", 0) + padded("abc") +
                            pax_entry({"path=", "path=again.txt"}) + tar_entry("y", "4") + end_of_archive;
    const auto ms = read_every_way(tar);
    REQUIRE(ms.size() == 5);
    CHECK(ms[0].name == "first/renamed.txt");
    CHECK(ms[0].header_offset == 0); // the member's first header is its pax header
    CHECK(ms[0].data_offset == 512 * 3);
    CHECK(ms[1].name == long_name);
    CHECK(ms[1].data.view() == "22");
    CHECK(ms[2].name == "g/name.txt");
    CHECK(ms[3].name == "g/name.txt");
    CHECK(ms[3].data.view() == "abc"); // pax size over the header's 0
    CHECK(ms[4].name == "again.txt");
}

TEST_CASE("the end of an archive: two zero blocks, or one at the end; none is an error unless allowed")
{
    const std::string body = tar_entry("a.txt", "A") + tar_entry("b.txt", "B");
    CHECK(read_every_way(body + end_of_archive + std::string(8192, '\0')).size() == 2);  // GNU tar's record padding
    CHECK(read_every_way(body + end_of_archive + "garbage after the end").size() == 2);   // never read
    CHECK(read_every_way(body + std::string(512, '\0')).size() == 2);                     // a lone zero block at the end

    const auto missing = error_of(body);
    CHECK(missing.code() == shard::errc::missing_end_of_archive);
    CHECK(missing.offset() == 2048);
    shard::tar_options lenient;
    lenient.require_end_of_archive = false;
    CHECK(read_every_way(body, lenient).size() == 2);

    const auto after = error_of(body + std::string(512, '\0') + tar_entry("c.txt", "C") + end_of_archive);
    CHECK(after.code() == shard::errc::data_after_end_of_archive);
    CHECK(after.offset() == 2560);
    CHECK(error_of("").code() == shard::errc::missing_end_of_archive);
}

TEST_CASE("each kind of bad tar input is an error naming the shard and the byte offset")
{
    const std::string a = tar_entry("a.txt", "AAAA");
    const std::string good = a + tar_entry("b.txt", std::string(700, 'b')) + end_of_archive;

    std::string bad = good;
    bad[1024 + 10] ^= 1; // a byte of b.txt's name: its checksum no longer matches
    auto e = error_of(bad);
    CHECK(e.code() == shard::errc::bad_checksum);
    CHECK(e.offset() == 1024);
    CHECK(std::string(e.what()).find("checksum") != std::string::npos);

    bad = good;
    std::memcpy(bad.data() + 1024 + 124, "0000000009x", 11); // size: not octal
    fix_checksum(bad, 1024);
    e = error_of(bad);
    CHECK(e.code() == shard::errc::bad_number);
    CHECK(e.offset() == 1024);

    bad = good;
    std::memset(bad.data() + 1024 + 124, 0xFF, 12); // base-256 -1
    fix_checksum(bad, 1024);
    e = error_of(bad);
    CHECK(e.code() == shard::errc::negative_size);

    // Truncation inside a header, inside data, inside padding.
    for (const auto& [cut, what] : {std::pair<std::size_t, const char*>{1024 + 100, "bytes into a header"},
                                    {1536 + 300, "inside the data"}, {1536 + 700 + 10, "inside the padding"}}) {
        CAPTURE(what);
        e = error_of(good.substr(0, cut));
        CHECK(e.code() == shard::errc::truncated);
        CHECK(std::string(e.what()).find(what) != std::string::npos);
        CHECK(e.offset() == (cut > 1536 ? 1024 : 1024));
    }
    e = error_of(a.substr(0, 600));
    CHECK(e.code() == shard::errc::truncated);
    CHECK(e.offset() == 0);

    // A size past the end of an archive whose length is known: refused at the header.
    bad = a + ustar_header("big.bin", 1 << 20) + end_of_archive;
    try {
        sd::read_members(to_slice(bad), "test://shard.tar");
        FAIL("no error");
    } catch (const conveyor::error& x) {
        CHECK(x.code() == shard::errc::size_past_end);
        CHECK(x.offset() == 1024);
    }
    CHECK(error_of(bad).code() == shard::errc::truncated); // streamed, length unknown

    // A GNU long name without its NUL; a pax record that is not one; sparse members.
    bad = ustar_header("././@LongLink", 10, 'L') + padded("0123456789") + a + end_of_archive;
    e = error_of(bad);
    CHECK(e.code() == shard::errc::unterminated_name);
    CHECK(e.offset() == 0);
    bad = a + tar_entry("PaxHeaders/x", "12 path=x\n", 'x') + a + end_of_archive;
    e = error_of(bad);
    CHECK(e.code() == shard::errc::bad_pax_record);
    CHECK(e.offset() == 1024);
    CHECK(error_of(a + pax_entry({"size=12z"}) + a + end_of_archive).code() == shard::errc::bad_pax_record);
    CHECK(error_of(a + pax_entry({"GNU.sparse.major=1"}) + a + end_of_archive).code() == shard::errc::sparse_member);
    e = error_of(a + tar_entry("s", "", 'S') + end_of_archive);
    CHECK(e.code() == shard::errc::sparse_member);
    CHECK(e.offset() == 1024);
    // An extended header with no member after it.
    CHECK(error_of(a + pax_entry({"path=x"}) + end_of_archive).code() == shard::errc::truncated);

    // Limits.
    shard::tar_options small;
    small.max_member_size = 600;
    CHECK(read_chunked(to_slice(good), SIZE_MAX, small).size() == 2); // inside one chunk: no limit
    bool refused = false;
    try {
        read_chunked(to_slice(good), 1000, small);
    } catch (const conveyor::error& x) {
        refused = x.code() == shard::errc::member_too_large && x.offset() == 1024;
    }
    CHECK(refused);
    small.max_metadata_size = 10;
    CHECK(error_of(pax_entry({"path=a-long-path.txt"}) + a + end_of_archive, small).code() == shard::errc::metadata_too_large);
}

TEST_CASE("after an error the reader keeps failing the same way, and it refuses chunks out of order")
{
    sd::tar_reader r("test://shard.tar");
    std::string bad = tar_entry("a.txt", "x");
    bad[3] ^= 1;
    r.feed({to_slice(bad), 0});
    CHECK_THROWS_AS(r.next(), conveyor::error);
    CHECK_THROWS_AS(r.next(), conveyor::error);
    sd::tar_reader q("test://shard.tar");
    q.feed({to_slice(std::string(512, 'a')), 1000});
    CHECK_THROWS_AS(q.feed({to_slice(std::string(512, 'a')), 2000}), conveyor::error);
}

TEST_CASE("a pseudo-random corruption of a real archive never crashes or hangs the reader")
{
    const std::string base = tar_entry("a.txt", "hello") + pax_entry({"path=p.txt"}) + tar_entry("b", std::string(900, 'b')) +
                             ustar_header("././@LongLink", 8, 'L') + padded(std::string("long.jpg") + '\0') +
                             tar_entry("c", "cc") + end_of_archive;
    std::uint64_t x = 12345;
    for (int round = 0; round < 400; ++round) {
        std::string t = base;
        for (int k = 0; k < 4; ++k) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            t[(x >> 33) % t.size()] = static_cast<char>(x >> 20);
        }
        if (round % 2) fix_checksum(t, 0);
        try {
            read_chunked(to_slice(t), 1 + round % 700);
        } catch (const conveyor::error&) {
        }
    }
}
