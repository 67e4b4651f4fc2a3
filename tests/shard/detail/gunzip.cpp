// Tests of conveyor/shard/detail/gunzip.hpp: gzip streams made by gzip(1) inflated in
// chunks of every size, several members as one stream, and corrupt or cut streams refused.
#include <conveyor/shard/detail/gunzip.hpp>

#include <conveyor/shard/error.hpp>

#include "../tar_support.hpp"

#include <doctest/doctest.h>

using namespace tar_test;
namespace shard = conveyor::shard;

namespace {

std::string gzip(const std::string& data, const char* level = "-6")
{
    temp_dir d;
    spill(d.path / "in", data);
    REQUIRE(sh(std::string("gzip ") + level + " -n -c '" + (d.path / "in").string() + "' > '" + (d.path / "out.gz").string() + "'") == 0);
    return slurp(d.path / "out.gz");
}

/// Inflates `gz` fed in chunks of `in_size` into chunks of `out_size`; checks the offsets.
std::string inflate(const std::string& gz, std::size_t in_size, std::size_t out_size, std::size_t* out_chunks = nullptr)
{
    conveyor::buffer_pool pool;
    sd::gunzip g("test://shard.tar.gz", out_size, pool);
    const auto whole = to_slice(gz);
    std::string out;
    auto drain = [&] {
        while (auto c = g.next()) {
            CHECK(c->offset == out.size());
            CHECK(c->bytes.size() <= out_size);
            out += c->bytes.view();
            if (out_chunks) ++*out_chunks;
        }
    };
    for (std::size_t at = 0; at < gz.size(); at += in_size) {
        g.feed({whole.sub(at, std::min(in_size, gz.size() - at)), at});
        drain();
    }
    g.finish();
    drain();
    CHECK(g.done());
    CHECK(g.consumed() == gz.size());
    return out;
}

std::string text(std::size_t n)
{
    std::string s;
    std::uint64_t x = 1;
    while (s.size() < n) {
        x = x * 6364136223846793005ULL + 1;
        s += "sample " + std::to_string(x >> 50) + (x & 1 ? " jpg\n" : " cls\n");
    }
    s.resize(n);
    return s;
}

} // namespace

TEST_CASE("gunzip inflates what gzip wrote, fed and delivered in chunks of any size")
{
    if (!have("gzip")) return;
    const std::string data = text(300000);
    const std::string gz = gzip(data);
    for (std::size_t in : {std::size_t{1}, std::size_t{7}, std::size_t{4096}, gz.size()})
        for (std::size_t out : {std::size_t{513}, std::size_t{65536}, std::size_t{1} << 20}) {
            CAPTURE(in);
            CAPTURE(out);
            if (in == 1 && out < 65536) continue; // slow and says nothing new
            std::size_t chunks = 0;
            CHECK(inflate(gz, in, out, &chunks) == data);
            CHECK(chunks == (data.size() + out - 1) / out); // full chunks but the last
        }
    CHECK(inflate(gzip(""), 100, 4096).empty());
}

TEST_CASE("gunzip reads several gzip members as one stream, and zero padding after the last, as gzip -d does")
{
    if (!have("gzip")) return;
    const std::string a = text(5000), b = text(7000) + "end";
    const std::string gz = gzip(a) + gzip(b, "-1") + std::string(100, '\0');
    CHECK(inflate(gz, 333, 4096) == a + b);
    std::string gd;
    temp_dir d;
    spill(d.path / "x.gz", gz);
    sh("gzip -dc '" + (d.path / "x.gz").string() + "' 2>/dev/null", &gd);
    CHECK(gd == a + b);
}

TEST_CASE("corrupt or truncated gzip data are errors naming the URL and both offsets")
{
    if (!have("gzip")) return;
    const std::string data = text(100000);
    const std::string gz = gzip(data);

    try {
        inflate(gz.substr(0, gz.size() / 2), 1000, 8192);
        FAIL("no error");
    } catch (const conveyor::error& e) {
        CHECK(e.code() == shard::errc::truncated_gzip);
        CHECK(e.where() == "test://shard.tar.gz");
        CHECK(e.offset() > 0);
        CHECK(std::string(e.what()).find("compressed byte " + std::to_string(gz.size() / 2)) != std::string::npos);
    }
    std::string bad = gz;
    bad[gz.size() / 2] ^= 0x55;
    bad[gz.size() / 2 + 1] ^= 0x55;
    bool refused = false;
    try {
        inflate(bad, 1000, 8192);
    } catch (const conveyor::error& e) {
        refused = e.code() == shard::errc::bad_gzip && std::string(e.what()).find("test://shard.tar.gz") != std::string::npos;
    }
    CHECK(refused);
    bad = gz;
    bad[gz.size() - 5] ^= 1; // the length in the trailer
    CHECK_THROWS_AS(inflate(bad, 1000, 8192), conveyor::error);
    for (const std::string& tail : {std::string("garbage"), std::string(10, '\0') + "x"}) {
        try {
            inflate(gz + tail, 1000, 8192);
            FAIL("no error");
        } catch (const conveyor::error& e) {
            CHECK(e.code() == shard::errc::bad_gzip);
        }
    }
}

TEST_CASE("gzip is recognised by its magic bytes")
{
    CHECK(sd::is_gzip_magic(std::as_bytes(std::span("\x1f\x8b\x08", 3))));
    CHECK(!sd::is_gzip_magic(std::as_bytes(std::span("\x1f", 1))));
    CHECK(!sd::is_gzip_magic(std::as_bytes(std::span("ustar", 5))));
}
