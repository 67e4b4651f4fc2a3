// Tests of conveyor/shard/detail/sample_name.hpp: webdataset's key/field split of member
// names. The expected splits are those of webdataset's own expression,
// ^((?:.*/|)[^.]+)[.]([^/]*)$, worked out with Python's re for each name.
#include <conveyor/shard/detail/sample_name.hpp>

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sd = conveyor::shard::detail;

TEST_CASE("member names split into sample key and field as webdataset splits them")
{
    using split = std::optional<std::pair<std::string, std::string>>;
    const std::vector<std::pair<std::string, split>> cases = {
        {"e39871fd9fd74f55.jpg", split{{"e39871fd9fd74f55", "jpg"}}},
        {"train/n01440764/img_0001.JPEG", split{{"train/n01440764/img_0001", "JPEG"}}},
        {"a/b.seg.png", split{{"a/b", "seg.png"}}},          // the field is all after the first dot
        {"dir.v2/x.cls", split{{"dir.v2/x", "cls"}}},        // dots in directories do not count
        {"x.", split{{"x", ""}}},                             // an empty field
        {"a/b", std::nullopt},                                // no dot: no field, skipped
        {"dir.d/file", std::nullopt},
        {".hidden", std::nullopt},                            // nothing before the dot
        {"a/.x.jpg", split{{"a/", "x.jpg"}}},                 // the expression's fallback
        {"p/q/.x.jpg", split{{"p/q/", "x.jpg"}}},
        {"a.b/.x.jpg", std::nullopt},                         // ... not through a dotted directory
        {"/.x", split{{"/", "x"}}},
        {"", std::nullopt},
        {"a/b/", std::nullopt},                               // a directory entry's name
    };
    for (const auto& [name, want] : cases) {
        CAPTURE(name);
        const auto got = sd::split_sample_name(name);
        REQUIRE(got.has_value() == want.has_value());
        if (!got) continue;
        CHECK(std::string(got->key) == want->first);
        CHECK(std::string(got->field) == want->second);
    }
}
