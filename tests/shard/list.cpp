// Tests of conveyor/shard/list.hpp: brace expansion as the shell and braceexpand do it,
// URLs parsed once, and shard lists from patterns, folders and dataset indexes.
#include <conveyor/core/error.hpp>
#include <conveyor/shard/index.hpp>
#include <conveyor/shard/list.hpp>

#include <doctest/doctest.h>

#include "tar_support.hpp"

#include <filesystem>
#include <unistd.h>
#include <fstream>
#include <string>
#include <vector>

namespace shard = conveyor::shard;
using tar_test::message_of;
using strings = std::vector<std::string>;

TEST_CASE("brace ranges expand as the shell expands them")
{
    CHECK(shard::expand_braces("shard-{000000..000003}.tar") ==
          strings{"shard-000000.tar", "shard-000001.tar", "shard-000002.tar", "shard-000003.tar"});
    CHECK(shard::expand_braces("{1..3}") == strings{"1", "2", "3"});
    CHECK(shard::expand_braces("{3..1}") == strings{"3", "2", "1"});
    CHECK(shard::expand_braces("{0..10..5}") == strings{"0", "5", "10"});
    CHECK(shard::expand_braces("{10..0..-5}") == strings{"10", "5", "0"});
    CHECK(shard::expand_braces("{01..3}") == strings{"01", "02", "03"});
    CHECK(shard::expand_braces("{8..010}") == strings{"008", "009", "010"});
    CHECK(shard::expand_braces("{-1..1}") == strings{"-1", "0", "1"});
    CHECK(shard::expand_braces("{a..c}") == strings{"a", "b", "c"});
    CHECK(shard::expand_braces("{x,y}-{1..2}") == strings{"x-1", "x-2", "y-1", "y-2"});
    CHECK(shard::expand_braces("{a,b{1..2}}.tar") == strings{"a.tar", "b1.tar", "b2.tar"});
    CHECK(shard::expand_braces("{train,}x") == strings{"trainx", "x"});
    CHECK(shard::expand_braces("plain.tar") == strings{"plain.tar"});
    CHECK(shard::expand_braces("\\{1..2\\}") == strings{"{1..2}"});
    CHECK(shard::expand_braces("{abc}") == strings{"{abc}"}); // neither a list nor a range: text
    CHECK(shard::expand_braces("{}") == strings{"{}"});
    CHECK(shard::expand_braces("{1..a}") == strings{"{1..a}"});
}

TEST_CASE("bad brace patterns are refused naming the pattern and the position")
{
    auto m = message_of([] { shard::expand_braces("data/shard-{000..009.tar"); });
    CHECK(m.find("never closed") != std::string::npos);
    CHECK(m.find("shard-{000..009.tar") != std::string::npos);
    CHECK(m.find("11") != std::string::npos); // the byte offset of the '{'
    CHECK(message_of([] { shard::expand_braces("a}b"); }).find("closes no '{'") != std::string::npos);
    CHECK(message_of([] { shard::expand_braces("{0..99999999}", 1000); }).find("more than the limit of 1000") != std::string::npos);
    CHECK(message_of([] { shard::expand_braces("{0..99}{0..99}", 1000); }).find("more than 1000") != std::string::npos);
}

TEST_CASE("shard URLs are parsed once, each kept in its one spelling")
{
    // The kinds themselves are conveyor::location's (tests/core/location.cpp).
    const auto refs = shard::resolve(std::vector<std::string>{"S3://b/k.tar::FILE:///d/a.tar::HTTPS://host/c.tar::/e/x.tar"});
    strings urls;
    for (const auto& r : refs) urls.push_back(r.url);
    CHECK(urls == strings{"s3://b/k.tar", "/d/a.tar", "https://host/c.tar", "/e/x.tar"});
    CHECK(message_of([] { shard::resolve("s3:b/k.tar"); }).find("s3:b/k.tar") != std::string::npos);
    CHECK(message_of([] { shard::resolve("gs://b/k.tar"); }).find("not one conveyor reads") != std::string::npos);
    CHECK(shard::names_s3({"/d/a.tar", "x::S3://b/k.tar"}));
    CHECK(shard::names_s3({"s3://b/prefix/"}));
    CHECK(!shard::names_s3({"/d/a.tar::file:///d/b.tar", "https://host/s3://x.tar", "/data/s3://x"}));
}

TEST_CASE("a local folder written with a trailing '/' lists the shards under it")
{
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("conveyor-list-dir-" + std::to_string(::getpid()));
    fs::create_directories(dir / "sub");
    std::ofstream(dir / "b.tar") << "x";
    std::ofstream(dir / "sub" / "a.tar") << "xy";
    std::ofstream(dir / "notes.txt") << "z";
    const auto refs = shard::resolve(dir.string() + "/");
    REQUIRE(refs.size() == 2);
    CHECK(refs[0].url == (dir / "b.tar").string());
    CHECK(refs[0].size == 1);
    CHECK(refs[1].url == (dir / "sub" / "a.tar").string());
    CHECK(refs[1].size == 2);
    CHECK(message_of([&] { shard::resolve((dir / "sub").string() + "/", {.suffixes = {".tgz"}}); }).find("no object under this prefix") !=
          std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("several lists, separated or given apart, resolve in order")
{
    const auto refs = shard::resolve(std::vector<std::string>{"file:///d/a-{0..1}.tar::s3://b/c.tar", "/e/{x,y}.tgz"});
    strings urls;
    for (const auto& r : refs) urls.push_back(r.url);
    CHECK(urls == strings{"/d/a-0.tar", "/d/a-1.tar", "s3://b/c.tar", "/e/x.tgz", "/e/y.tgz"});
    CHECK(message_of([] { shard::resolve("s3://b/prefix/"); }).find("needs an S3 client") != std::string::npos);
    CHECK(message_of([] { shard::resolve("a.tar::"); }).find("empty shard list") != std::string::npos);
}

TEST_CASE("a dataset index resolves to its shards, relative ones beside it")
{
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("conveyor-list-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    shard::dataset_index index;
    index.shards.push_back({"shard-0.tar", 0, 1024, {}});
    index.shards.push_back({"/elsewhere/shard-1.tar", 0, 1024, {}});
    index.shards.push_back({"s3://b/shard-2.tar", 0, 1024, {}});
    std::ofstream(dir / "index.json") << shard::to_json(index);
    const auto refs = shard::resolve((dir / "index.json").string());
    REQUIRE(refs.size() == 3);
    CHECK(refs[0].url == (dir / "shard-0.tar").string());
    CHECK(refs[1].url == "/elsewhere/shard-1.tar");
    CHECK(refs[2].url == "s3://b/shard-2.tar");
    CHECK(refs[0].size == 1024);
    CHECK(refs[0].samples == 0);
    CHECK(message_of([&] { shard::resolve((dir / "missing.json").string()); }).find("missing.json") != std::string::npos);
    fs::remove_all(dir);
}
