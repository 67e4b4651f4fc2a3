// Tests of the shard reader's limits against hostile shards, through the shard source as a
// user reads them: extended headers of megabytes, long names and members claiming
// gigabytes or a terabyte, a gzip shard that would inflate to gigabytes, and zeros that
// inflate past the archive's end. Each is refused (or read) with the resident memory it
// took measured against a stated bound.
#include "tar_support.hpp"

#include "../support/common.hpp"

#include <conveyor/core/runtime.hpp>
#include <conveyor/shard/source.hpp>

#include <doctest/doctest.h>

#include <zlib.h>

#include <optional>
#include <string>
#include <system_error>
#include <utility>

using namespace tar_test;
namespace shard = conveyor::shard;

namespace {

/// One gzip member holding `raw`.
std::string gzip_member_of(const std::string& raw)
{
    z_stream z{};
    REQUIRE(::deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY) == Z_OK);
    std::string out(::deflateBound(&z, static_cast<uLong>(raw.size())) + 64, '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
    z.avail_in = static_cast<uInt>(raw.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    REQUIRE(::deflate(&z, Z_FINISH) == Z_STREAM_END);
    out.resize(z.total_out);
    ::deflateEnd(&z);
    return out;
}

/// Reads every sample of the shard `path`; returns the error that ended the run (none when
/// it ended well) and how far resident memory rose meanwhile.
struct hostile_run {
    std::error_code ec;
    std::string message;
    std::size_t samples = 0;
    std::optional<std::uint64_t> grew;
};

hostile_run read_hostile_shard(conveyor::runtime& rt, const std::string& path)
{
    hostile_run r;
    r.grew = conveyor_test::resident_growth([&] {
        try {
            for (auto& s : shard::shards(path, {.order = {.shuffle = false}}).on(rt)) {
                (void)s;
                ++r.samples;
            }
        } catch (const conveyor::error& e) {
            r.ec = e.code();
            r.message = e.what();
        }
    });
    return r;
}

} // namespace

TEST_CASE("hostile shards: huge extended headers, names and members are refused at their headers, in little memory")
{
    conveyor::runtime rt({.io_threads = 1, .compute_threads = 1});
    temp_dir d;
    const std::string good = tar_entry("a.jpg", std::string(100, 'a'));
    // Each case: its tar, whether to gzip it, the error expected, and the bound on the
    // resident memory the run may take (its chunks in flight, the source's buffers).
    struct hostile {
        const char* name;
        std::string tar;
        bool gzip;
        std::error_code expected;
    };
    std::string pax_of_megabytes = pax_entry({"comment=" + std::string(8u << 20, 'p')}) + good + end_of_archive;
    std::string long_name = ustar_header("././@LongLink", std::uint64_t{4} << 30, 'L') + std::string(512, 'n');
    const hostile cases[] = {
        {"pax header of 8 MiB", pax_of_megabytes, false, shard::errc::metadata_too_large},
        {"pax header of 8 MiB, gzip", pax_of_megabytes, true, shard::errc::metadata_too_large},
        {"GNU long name claiming 4 GiB", long_name, false, shard::errc::size_past_end},
        {"GNU long name claiming 4 GiB, gzip", long_name, true, shard::errc::metadata_too_large},
        {"member claiming 1 TB", pax_entry({"size=1000000000000"}) + ustar_header("big.jpg", 0) + std::string(4096, 'b'), false,
         shard::errc::size_past_end},
        {"member claiming 1 TB, gzip", pax_entry({"size=1000000000000"}) + ustar_header("big.jpg", 0) + std::string(4096, 'b'), true,
         shard::errc::member_too_large},
    };
    for (const auto& c : cases) {
        const std::string name = c.name;
        CAPTURE(name);
        const std::string path = (d.path / (std::string("bad.tar") + (c.gzip ? ".gz" : ""))).string();
        spill(path, c.gzip ? gzip_member_of(c.tar) : c.tar);
        const auto r = read_hostile_shard(rt, path);
        CHECK(r.ec == c.expected);
        CHECK(r.message.find(path) != std::string::npos);
        conveyor_test::check_resident_growth(r.grew, 32u << 20, c.name);
    }
}

TEST_CASE("hostile shards: a 3 MB gzip shard that inflates to 3 GiB is refused at its member's header")
{
    conveyor::runtime rt({.io_threads = 1, .compute_threads = 1});
    temp_dir d;
    // A member of 3 GiB, its bytes 3,072 gzip members of 1 MiB of zeros each (gzip reads
    // members one after another as one stream): about 3 MB on disk.
    const std::string zeros_member = gzip_member_of(std::string(1u << 20, '\0'));
    std::string gz = gzip_member_of(ustar_header("bomb.jpg", std::uint64_t{3} << 30));
    for (int i = 0; i < 3072; ++i) gz += zeros_member;
    REQUIRE(gz.size() < (4u << 20));
    const std::string path = (d.path / "bomb.tar.gz").string();
    spill(path, gz);
    const auto r = read_hostile_shard(rt, path);
    CHECK(r.ec == shard::errc::member_too_large);
    CHECK(r.message.find("max_member_size") != std::string::npos);
    CHECK(r.samples == 0);
    conveyor_test::check_resident_growth(r.grew, 32u << 20, "3 GiB member in a 3 MB gzip shard");
}

TEST_CASE("hostile shards: zeros that inflate to 256 MiB past the end of the archive are read to the end in bounded memory")
{
    conveyor::runtime rt({.io_threads = 1, .compute_threads = 1});
    temp_dir d;
    // The trailer of a gzip shard is checked, so the stream is inflated to its end: the
    // zeros after the end-of-archive marker pass through the reader's chunks, not its memory.
    const std::string zeros_member = gzip_member_of(std::string(1u << 20, '\0'));
    std::string gz = gzip_member_of(tar_entry("a.jpg", std::string(1000, 'a')) + tar_entry("a.cls", "3") + end_of_archive);
    for (int i = 0; i < 256; ++i) gz += zeros_member;
    const std::string path = (d.path / "zeros.tar.gz").string();
    spill(path, gz);
    const auto r = read_hostile_shard(rt, path);
    CHECK_MESSAGE(!r.ec, r.message);
    CHECK(r.samples == 1);
    conveyor_test::check_resident_growth(r.grew, 64u << 20, "256 MiB of zeros past the end of a gzip shard");
}
