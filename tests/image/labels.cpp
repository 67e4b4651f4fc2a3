// Tests of conveyor/image/labels.hpp: labels from a JSON field of a shard sample (key
// paths, JSON Pointers, the errors naming the sample), validation map files (parsing, the
// errors naming file, line and entry) and how items find their entry (a file's position,
// a sample's key number, a key), through decode_image and encoded_image_of.
#include "support.hpp"

#include "../shard/tar_support.hpp"

#include <conveyor/file/index.hpp>
#include <conveyor/file/source.hpp>
#include <conveyor/image/labels.hpp>
#include <conveyor/image/stage.hpp>
#include <conveyor/shard/source.hpp>

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

namespace image = conveyor::image;
namespace shard = conveyor::shard;
using namespace conveyor_test_image;
using tar_test::temp_dir;
namespace fs = std::filesystem;

namespace {

std::string small_jpeg()
{
    static const std::string j = [] {
        const auto b = make_jpeg(16, 16, TJSAMP_444, 90);
        return std::string(reinterpret_cast<const char*>(b.data()), b.size());
    }();
    return j;
}

/// A shard of samples `key` → { jpg, json = the given document }.
fs::path json_shard(const fs::path& dir, const std::vector<std::pair<std::string, std::string>>& samples)
{
    std::string tar;
    for (const auto& [key, json] : samples) {
        tar += tar_test::tar_entry(key + ".jpg", small_jpeg());
        if (!json.empty()) tar += tar_test::tar_entry(key + ".json", json);
    }
    tar += tar_test::end_of_archive;
    const fs::path p = dir / "labels-000.tar";
    tar_test::spill(p, tar);
    return p;
}

std::vector<std::int64_t> labels_of(const fs::path& shard_path, image::decode_image_options o)
{
    std::vector<std::int64_t> got;
    for (auto& d : shard::shards(shard_path.string()) | image::decode_image(std::move(o))) got.push_back(d.label);
    return got;
}

/// The first error of decoding `shard_path` with `o` (empty if none), and its code in `code`.
std::string first_error(const fs::path& shard_path, image::decode_image_options o, std::error_code* code = nullptr)
{
    try {
        for (auto& d : shard::shards(shard_path.string()) | image::decode_image(std::move(o))) (void)d;
    } catch (const conveyor::error& e) {
        if (code) *code = e.code();
        return e.what();
    }
    return {};
}

bool has(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

} // namespace

TEST_CASE("decode_image takes labels from a JSON field by key path, array index or JSON Pointer")
{
    temp_dir d;
    const auto p = json_shard(d.path, {{"s0", R"({"label": 3, "annotations": {"class": 7, "boxes": [{"cls": 11}]}, "a.b": 5})"},
                                       {"s1", R"({"label": 4, "annotations": {"class": 8, "boxes": [{"cls": 12}]}, "a.b": 6})"}});
    // The cls field is absent: label_json replaces it.
    CHECK(labels_of(p, {.label_json = {"json", "label"}}) == std::vector<std::int64_t>{3, 4});
    CHECK(labels_of(p, {.label_json = {"json", "annotations.class"}}) == std::vector<std::int64_t>{7, 8});
    CHECK(labels_of(p, {.label_json = {"json", "annotations.boxes.0.cls"}}) == std::vector<std::int64_t>{11, 12});
    CHECK(labels_of(p, {.label_json = {"json", "/annotations/class"}}) == std::vector<std::int64_t>{7, 8});
    CHECK(labels_of(p, {.label_json = {"json", "/a.b"}}) == std::vector<std::int64_t>{5, 6});
    // The document itself, and the bounds of 64-bit integers.
    CHECK(image::detail::json_label_of(" 42 ", {"json", ""}, "k", "u") == 42);
    CHECK(image::detail::json_label_of("-1", {"json", ""}, "k", "u") == -1);
    CHECK(image::detail::json_label_of(R"({"c": 9223372036854775807})", {"json", "c"}, "k", "u") == INT64_MAX);
}

TEST_CASE("a JSON label that is missing, not an integer, or in a field that is not JSON is an error naming the sample")
{
    // One sample per shard: samples are decoded in parallel, so which error of several
    // comes first is not fixed.
    temp_dir d, d2;
    const auto ok = json_shard(d.path, {{"train/ok", R"({"label": 1})"}});
    const auto bad = json_shard(d2.path, {{"train/bad", R"({"annotations": {"klass": 2}})"}});
    CHECK(labels_of(ok, {.label_json = {"json", "label"}}) == std::vector<std::int64_t>{1});
    std::error_code code;
    auto what = first_error(ok, {.label_json = {"json", "annotations.class"}}, &code);
    CHECK(code == image::errc::missing_field);
    CHECK(has(what, "train/ok"));
    CHECK(has(what, "labels-000.tar"));
    CHECK(has(what, "has no 'annotations.class': the document has no 'annotations'"));

    what = first_error(bad, {.label_json = {"json", "annotations.class"}}, &code);
    CHECK(code == image::errc::missing_field);
    CHECK(has(what, "train/bad"));
    CHECK(has(what, "'annotations' has no 'class', it is an object ({\"klass\":2})")); // what it has instead
    const auto p = bad;

    // A field the sample lacks altogether.
    what = first_error(p, {.label_json = {"meta", "label"}}, &code);
    CHECK(code == image::errc::missing_field);
    CHECK(has(what, "the label field 'meta' is not in the sample"));

    // Values that are not integers.
    for (const char* doc : {R"({"label": 3.5})", R"({"label": 3.0})", R"({"label": "3"})", R"({"label": true})", R"({"label": null})",
                            R"({"label": [3]})", R"({"label": 18446744073709551615})"}) {
        CAPTURE(doc);
        temp_dir e;
        const auto q = json_shard(e.path, {{"x/y", doc}});
        what = first_error(q, {.label_json = {"json", "label"}}, &code);
        CHECK(code == image::errc::bad_label);
        CHECK(has(what, "x/y"));
        CHECK(has(what, "not an integer label"));
    }
    // Not JSON at all, and an index beyond an array.
    CHECK_THROWS_WITH(image::detail::json_label_of("{\"label\": 3", {"json", "label"}, "k", "u"), doctest::Contains("is not valid JSON"));
    CHECK_THROWS_WITH(image::detail::json_label_of("[1, 2]", {"json", "2"}, "k", "u"), doctest::Contains("the document has no '2'"));
    CHECK_THROWS_WITH(image::detail::json_label_of(R"({"a": 1})", {"json", "/b"}, "k", "u"), doctest::Contains("no value at JSON Pointer '/b'"));
}

TEST_CASE("a label map file parses as indices or as keys, and its errors name the file, line and entry")
{
    temp_dir d;
    const auto path = d.path / "val_map.json";
    tar_test::spill(path, "{\n  \"0\": 490,\n  \"1\": 361,\n  \"2\": 171\n}\n");
    const auto m = image::load_label_map(path);
    REQUIRE(m);
    CHECK(m->indexed());
    CHECK(m->size() == 3);
    CHECK(m->find(std::uint64_t{0}) == 490);
    CHECK(m->find(std::uint64_t{2}) == 171);
    CHECK_FALSE(m->find(std::uint64_t{3}));
    CHECK(m->find("1") == 361);
    CHECK(m->source() == path.string());

    // Names that are not all indices make a map by name ("007" is not an index as JSON writes one).
    const auto named = image::parse_label_map(R"({"ILSVRC2012_val_00000001": 65, "007": 3})");
    CHECK_FALSE(named->indexed());
    CHECK(named->find("007") == 3);
    CHECK_FALSE(named->find(std::uint64_t{7}));

    auto error_of = [](std::string_view text) {
        try {
            (void)image::parse_label_map(text, "m.json");
        } catch (const conveyor::error& e) {
            CHECK(e.code() == image::errc::bad_label);
            CHECK(e.where() == "m.json");
            return std::string(e.what());
        }
        return std::string();
    };
    CHECK(has(error_of("{\n  \"0\": 490,\n  \"1\" 361\n}"), "line 3, column 7"));
    CHECK(has(error_of("{\"0\": 490,\n\"1\": \"n01440764\"}"), "entry \"1\" holds a string (\"n01440764\"), not an integer class id (line 2"));
    CHECK(has(error_of("{\"0\": 4.5}"), "entry \"0\" holds a number (4.5), not an integer class id (line 1"));
    CHECK(has(error_of("{\"0\": 1,\n \"7\": 2,\n \"7\": 3}"), "entry \"7\" is named twice (line 3"));
    CHECK(has(error_of("{\"0\": {\"id\": 1}}"), "entry \"0\" holds an object"));
    CHECK(has(error_of("[490, 361]"), "not a JSON object"));
    CHECK(has(error_of("{\"\": 1}"), "an empty name"));
    CHECK(has(error_of(""), "not valid JSON"));
    CHECK(has(error_of("{\"0\": 1}\n{\"1\": 2}\n"), "text after the JSON object, at line 2, column 1"));
    CHECK(image::parse_label_map("{\"0\": 1}\n\n")->size() == 1);

    // A file that is not there names its path.
    try {
        (void)image::load_label_map(d.path / "missing.json");
        FAIL("no error");
    } catch (const conveyor::error& e) {
        CHECK(e.code() == std::errc::no_such_file_or_directory);
        CHECK(has(e.what(), "missing.json"));
    }
    // Maps built in code refuse a name twice.
    image::label_map built("built");
    built.insert("0", 1);
    CHECK_THROWS_WITH(built.insert("0", 2), doctest::Contains("named twice"));
}

TEST_CASE("key stems and key numbers")
{
    using image::detail::key_number;
    using image::detail::key_stem;
    CHECK(key_stem("val/ILSVRC2012_val_00000007") == "ILSVRC2012_val_00000007");
    CHECK(key_stem("n01440764/ILSVRC2012_val_00000007.JPEG") == "ILSVRC2012_val_00000007");
    CHECK(key_stem("plain") == "plain");
    CHECK(key_number("val/ILSVRC2012_val_00000007") == 7u);
    CHECK(key_number("n01440764/ILSVRC2012_val_00000007.JPEG") == 7u);
    CHECK(key_number("d9/000123_x") == 123u); // the last run of digits, in the stem only
    CHECK_FALSE(key_number("d9/none.jpg2"));
    CHECK_FALSE(key_number("99999999999999999999999"));
}

TEST_CASE("shard samples find their label map entry by key number, from first_number, or by key")
{
    temp_dir d;
    // ImageNet's naming: entry "0" is ILSVRC2012_val_00000001. Samples out of order.
    const auto p = json_shard(d.path, {{"val/ILSVRC2012_val_00000003", ""}, {"val/ILSVRC2012_val_00000001", ""},
                                       {"val/ILSVRC2012_val_00000002", ""}});
    const auto m = image::parse_label_map(R"({"0": 490, "1": 361, "2": 171})", "val_map.json");
    CHECK(labels_of(p, {.label_map = {.map = m, .first_number = 1}}) == std::vector<std::int64_t>{171, 490, 361});
    CHECK(labels_of(p, {.label_map = {.map = m, .by = image::label_lookup::key_number, .first_number = 1}}) ==
          std::vector<std::int64_t>{171, 490, 361});
    // Counted from 0, entry 3 does not exist: an error naming the sample and the entry.
    std::error_code code;
    auto what = first_error(p, {.label_map = {.map = m, .first_number = 0}}, &code);
    CHECK(code == image::errc::bad_label);
    CHECK(has(what, "val/ILSVRC2012_val_00000003"));
    CHECK(has(what, "the label map val_map.json has no entry \"3\" (key number 3 less 0)"));
    // No first_number: said at the first sample (automatic) or when the stage is made (key_number).
    what = first_error(p, {.label_map = {.map = m}}, &code);
    CHECK(code == image::errc::bad_options);
    CHECK(has(what, "first_number is not set"));
    CHECK_THROWS_WITH_AS(image::decode_image({.label_map = {.map = m, .by = image::label_lookup::key_number}}),
                         doctest::Contains("needs label_map_options::first_number"), conveyor::error);
    // A sample's position is not its dataset position: refused.
    what = first_error(p, {.label_map = {.map = m, .by = image::label_lookup::position}}, &code);
    CHECK(code == image::errc::bad_options);
    CHECK(has(what, "counts within one shard"));

    // A map by name: the key, or its stem.
    const auto named = image::parse_label_map(R"({"ILSVRC2012_val_00000001": 65, "ILSVRC2012_val_00000002": 970,
                                                  "val/ILSVRC2012_val_00000003": 230})");
    CHECK(labels_of(p, {.label_map = {.map = named}}) == std::vector<std::int64_t>{230, 65, 970});
    const auto partial = image::parse_label_map(R"({"ILSVRC2012_val_00000001": 65, "val/ILSVRC2012_val_00000002": 970})", "partial.json");
    what = first_error(p, {.label_map = {.map = partial}}, &code);
    CHECK(code == image::errc::bad_label);
    CHECK(has(what, "partial.json has no entry for the key or its stem \"ILSVRC2012_val_00000003\""));
    // The map comes before cls and JSON fields: this shard has neither.
    auto sample = shard::sample{.key = "val/ILSVRC2012_val_00000002", .origin = "u"};
    sample.fields.push_back({.name = "jpg", .data = conveyor::slice(conveyor::buffer::copy_of(small_jpeg()))});
    const auto e = image::encoded_image_of(sample, {.label_json = {"json", "label"}, .label_map = {.map = m, .first_number = 1}});
    CHECK(e.label == 361);
}

TEST_CASE("files find their label map entry by listing position, overriding the ImageFolder class")
{
    temp_dir d;
    fs::create_directories(d.path / "val");
    for (int k = 1; k <= 3; ++k) {
        char name[64];
        std::snprintf(name, sizeof name, "ILSVRC2012_val_%08d.JPEG", k);
        tar_test::spill(d.path / "val" / name, small_jpeg());
    }
    const auto m = image::parse_label_map(R"({"0": 490, "1": 361, "2": 171})", "val_map.json");
    auto labels = [&](image::label_map_options lo) {
        std::map<std::string, std::int64_t> got;
        auto pipe = conveyor::file::files(conveyor::file::walk(d.path, {.labels = true})) | image::decode_image({.label_map = lo});
        for (auto& x : pipe) got[std::string(image::detail::key_stem(x.key))] = x.label;
        return got;
    };
    const std::map<std::string, std::int64_t> want{
        {"ILSVRC2012_val_00000001", 490}, {"ILSVRC2012_val_00000002", 361}, {"ILSVRC2012_val_00000003", 171}};
    CHECK(labels({.map = m}) == want); // position
    CHECK(labels({.map = m, .by = image::label_lookup::key_number, .first_number = 1}) == want);
    // Without a map: the ImageFolder class (all in "val": 0).
    std::vector<std::int64_t> plain;
    for (auto& x : conveyor::file::files(conveyor::file::walk(d.path, {.labels = true})) | image::decode_image()) plain.push_back(x.label);
    CHECK(plain == std::vector<std::int64_t>{0, 0, 0});
    // A position the map lacks.
    const auto short_map = image::parse_label_map(R"({"0": 490})", "short.json");
    conveyor::blob b{"val/x.JPEG", conveyor::buffer::copy_of(small_jpeg()), "/data/val/x.JPEG", 0, 5};
    try {
        (void)image::encoded_image_of(b, {.label_map = {.map = short_map}});
        FAIL("no error");
    } catch (const conveyor::error& e) {
        CHECK(e.code() == image::errc::bad_label);
        CHECK(has(e.what(), "short.json has no entry \"5\" (the position)"));
        CHECK(has(e.what(), "/data/val/x.JPEG"));
    }
}
