// Tests of conveyor/shard/error.hpp: every error code has its own message, and a shard
// error names the shard's URL (user-info hidden) and the byte offset.
#include <conveyor/shard/error.hpp>

#include <doctest/doctest.h>

#include <set>
#include <string>

namespace shard = conveyor::shard;

TEST_CASE("every shard error code has a message of its own, in the conveyor.shard category")
{
    std::set<std::string> messages;
    int n = 0;
    for (int v = static_cast<int>(shard::errc::bad_checksum); v <= static_cast<int>(shard::errc::index_mismatch); ++v, ++n) {
        const std::error_code ec = shard::make_error_code(static_cast<shard::errc>(v));
        CHECK(std::string(ec.category().name()) == "conveyor.shard");
        CHECK(ec.message().find("unknown") == std::string::npos);
        messages.insert(ec.message());
    }
    CHECK(n == 16);
    CHECK(messages.size() == 16);
    CHECK(shard::make_error_code(shard::errc::bad_checksum).message() == "tar header checksum mismatch");
    CHECK(shard::make_error_code(shard::errc::missing_end_of_archive).message() == "tar archive has no end-of-archive marker");
    CHECK(shard::make_error_code(shard::errc::duplicate_field).message() == "duplicate field in a sample");
    CHECK(shard::make_error_code(shard::errc::truncated_gzip).message() == "gzip data is truncated");
    CHECK(shard::make_error_code(static_cast<shard::errc>(999)).message() == "unknown conveyor.shard error");
    const std::error_code ec = shard::errc::truncated; // is_error_code_enum
    CHECK(ec == shard::errc::truncated);
}

TEST_CASE("a shard error names the URL without its user-info, the offset and the detail")
{
    const auto e = shard::detail::shard_error(shard::errc::truncated, "https://user:secret@host/s-000001.tar", 4096, "the input ends here");
    const std::string what = e.what();
    CHECK(what.find("secret") == std::string::npos);
    CHECK(what.find("host/s-000001.tar") != std::string::npos);
    CHECK(what.find("at byte 4096") != std::string::npos);
    CHECK(what.find("the input ends here") != std::string::npos);
    CHECK(e.offset() == 4096);
    CHECK(e.code() == shard::errc::truncated);
}
