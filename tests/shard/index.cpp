// Tests of conveyor/shard/index.hpp: the dataset index's JSON form written and read back,
// and every kind of bad index refused with the file and the JSON path of the bad value.
#include <conveyor/core/error.hpp>
#include <conveyor/shard/index.hpp>

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace cs = conveyor::shard;

namespace {

cs::dataset_index sample_index()
{
    cs::dataset_index d;
    cs::index_shard a{"shard-000000.tar", 2, 10240, {}};
    a.entries.push_back({"n01440764/n01440764_10026", 0, 5120, {{"jpg", 512, 3412}, {"cls", 4608, 1}}});
    a.entries.push_back({"quote\"back\\slash é", 5120, 1536, {{"seg.png", 5632, 1000}}});
    d.shards.push_back(a);
    d.shards.push_back({"s3://bucket/train/shard-000001.tar", 0, 10240, {}});
    return d;
}

bool same(const cs::dataset_index& a, const cs::dataset_index& b)
{
    if (a.shards.size() != b.shards.size()) return false;
    for (std::size_t s = 0; s < a.shards.size(); ++s) {
        const auto &x = a.shards[s], &y = b.shards[s];
        if (x.url != y.url || x.samples != y.samples || x.bytes != y.bytes || x.entries.size() != y.entries.size()) return false;
        for (std::size_t e = 0; e < x.entries.size(); ++e) {
            const auto &p = x.entries[e], &q = y.entries[e];
            if (p.key != q.key || p.offset != q.offset || p.size != q.size || p.fields.size() != q.fields.size()) return false;
            for (std::size_t f = 0; f < p.fields.size(); ++f)
                if (p.fields[f].name != q.fields[f].name || p.fields[f].offset != q.fields[f].offset || p.fields[f].size != q.fields[f].size)
                    return false;
        }
    }
    return true;
}

/// The detail of the error that parsing `json` throws ("" if it throws none).
std::string refusal(const std::string& json)
{
    try {
        (void)cs::parse_index(json, "/data/index.json");
    } catch (const conveyor::error& e) {
        CHECK(e.where() == "/data/index.json");
        CHECK(e.code() == std::errc::invalid_argument);
        return e.ctx().detail;
    }
    return {};
}

std::string with_entry(const std::string& entry, std::string_view shard_rest = R"("samples": 1, "bytes": 10240)")
{
    return R"({"format": "conveyor-shard-index", "version": 1, "shards": [{"url": "a.tar", )" + std::string(shard_rest) +
           R"(, "entries": [)" + entry + "]}]}";
}

} // namespace

TEST_CASE("dataset index JSON round-trips, field order and escapes included")
{
    const auto d = sample_index();
    const std::string json = cs::to_json(d);
    CHECK(json.find("\"format\": \"conveyor-shard-index\"") != std::string::npos);
    CHECK(same(cs::parse_index(json, "x.json"), d));
    // The form documented in index.hpp parses.
    const auto doc = cs::parse_index(R"({"format": "conveyor-shard-index", "version": 1,
        "shards": [{"url": "shard-000000.tar", "samples": 1, "bytes": 12288,
          "entries": [{"key": "n01440764_10026", "offset": 0, "size": 5120,
            "fields": {"jpg": {"offset": 512, "size": 3412}, "cls": {"offset": 4608, "size": 1}}}]}]})",
                                     "doc.json");
    REQUIRE(doc.shards.at(0).entries.at(0).fields.size() == 2);
    CHECK(doc.shards[0].entries[0].fields[1].name == "cls");
}

TEST_CASE("dataset index is written atomically and read back from a file")
{
    const auto dir = std::filesystem::temp_directory_path() / ("conveyor-index-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto path = dir / "index.json";
    cs::write_index(path, sample_index());
    CHECK(same(cs::read_index(path), sample_index()));
    CHECK(std::distance(std::filesystem::directory_iterator(dir), {}) == 1); // no temporary left
    try {
        (void)cs::read_index(dir / "missing.json");
        FAIL("a missing index was read");
    } catch (const conveyor::error& e) {
        CHECK(e.where() == (dir / "missing.json").string());
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("a dataset index with a bad value is refused naming its JSON path")
{
    CHECK(refusal("{\"format\": \"conveyor-shard-index\", \"version\": 1, \"shards\": [") .find("not JSON at line 1") != std::string::npos);
    CHECK(refusal("[]").starts_with("$: expected an object"));
    CHECK(refusal(R"({"format": "webdataset", "version": 1, "shards": []})").starts_with("format:"));
    CHECK(refusal(R"({"format": "conveyor-shard-index", "version": 2, "shards": []})").starts_with("version:"));
    CHECK(refusal(R"({"format": "conveyor-shard-index", "version": 1})").find("missing member \"shards\"") != std::string::npos);
    const std::string good = R"({"key": "k", "offset": 0, "size": 1024, "fields": {"jpg": {"offset": 512, "size": 3}}})";
    CHECK(refusal(with_entry(good)).empty());
    CHECK(refusal(with_entry(good, R"("samples": 2, "bytes": 10240)")).starts_with("shards[0].samples: says 2"));
    CHECK(refusal(with_entry(good, R"("samples": 1, "bytes": -5)")).starts_with("shards[0].bytes: expected a non-negative integer"));
    CHECK(refusal(with_entry(good, R"("samples": 1, "bytes": 512)")).starts_with("shards[0].entries[0].size: the entry [0, 1024) runs past"));
    CHECK(refusal(with_entry(R"({"key": "", "offset": 0, "size": 1024, "fields": {"jpg": {"offset": 512, "size": 3}}})"))
              .starts_with("shards[0].entries[0].key: the string is empty"));
    CHECK(refusal(with_entry(R"({"key": "a\nb", "offset": 0, "size": 1024, "fields": {"jpg": {"offset": 512, "size": 3}}})"))
              .starts_with("shards[0].entries[0].key: the string holds a control character"));
    CHECK(refusal(with_entry(R"({"key": "k", "offset": 100, "size": 1024, "fields": {"jpg": {"offset": 612, "size": 3}}})"))
              .starts_with("shards[0].entries[0].offset: 100 is not on a 512-byte block boundary"));
    CHECK(refusal(with_entry(R"({"key": "k", "offset": 0, "size": 1024, "fields": {"jpg": {"offset": "512", "size": 3}}})"))
              .starts_with("shards[0].entries[0].fields.jpg.offset: expected a non-negative integer"));
    CHECK(refusal(with_entry(R"({"key": "k", "offset": 0, "size": 1024, "fields": {"jpg": {"offset": 512, "size": 900}}})"))
              .starts_with("shards[0].entries[0].fields.jpg.size: the field [512, 1412) runs past"));
    CHECK(refusal(with_entry(R"({"key": "k", "offset": 0, "size": 1024, "fields": {"jpg": {"offset": 0, "size": 3}}})"))
              .starts_with("shards[0].entries[0].fields.jpg.offset: 0 is not a block boundary after a header"));
    CHECK(refusal(with_entry(good + ", " + good, R"("samples": 2, "bytes": 10240)")).starts_with("shards[0].entries[1].offset: 0 is inside the previous entry"));
    CHECK(refusal(with_entry(R"({"key": "k", "offset": 0, "size": 1024, "fields": {}})")).starts_with("shards[0].entries[0].fields: a sample has"));
}

TEST_CASE("a dataset index refuses to hold strings JSON cannot carry")
{
    cs::dataset_index d;
    d.shards.push_back({"bad\xff.tar", 0, 10240, {}});
    CHECK_THROWS_AS(cs::to_json(d), conveyor::error);
}
