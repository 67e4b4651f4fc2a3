// Tests of conveyor/core/describe.hpp and the JSON layer under it
// (conveyor/core/detail/describe_json.hpp): every described field round-trips, unknown
// keys are refused naming them and the valid keys, wrong types and out-of-range values
// name the key path and what it takes.
#include <conveyor/core/describe.hpp>

#include "../support/described.hpp"

#include <boost/json/parse.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace describe_test {

enum class colour { red, green, blue };
BOOST_DESCRIBE_ENUM(colour, red, green, blue)

struct inner {
    std::uint8_t small = 7;
    std::optional<std::string> name;
};
BOOST_DESCRIBE_STRUCT(inner, (), (small, name))

struct every_kind {
    bool flag = false;
    int count = -3;
    std::uint32_t size = 224;
    double ratio = 0.5;
    float gain = 1.0f;
    std::string label = "cls";
    colour hue = colour::green;
    std::chrono::milliseconds timeout{1500};
    std::optional<std::uint64_t> first;
    std::vector<std::string> fields{"jpg"};
    std::array<float, 3> mean{0.0f, 0.0f, 0.0f};
    inner nested;
    int not_described = 5;
};
BOOST_DESCRIBE_STRUCT(every_kind, (), (flag, count, size, ratio, gain, label, hue, timeout, first, fields, mean, nested))

} // namespace describe_test

namespace {

namespace d = conveyor::detail;
namespace json = boost::json;
using describe_test::every_kind;

/// The message of the option_error `f` throws ("" when it throws none).
template <class F>
std::string option_error_of(F f)
{
    try {
        f();
    } catch (const d::option_error& e) {
        return e.what();
    }
    return {};
}

bool contains(const std::string& s, const std::string& part)
{
    return s.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("every described field of every kind round-trips through JSON")
{
    conveyor::test::check_round_trip<every_kind>();
    conveyor::test::check_round_trip<describe_test::inner>();
}

TEST_CASE("the core option structs round-trip through JSON")
{
    conveyor::test::check_round_trip<conveyor::order_options>();
    conveyor::test::check_round_trip<conveyor::shuffle_options>();
    conveyor::test::check_round_trip<conveyor::batch_options>();
}

TEST_CASE("described fields are written with their names and values, and read as given")
{
    const auto j = d::option_to_json(every_kind{});
    CHECK(json::serialize(j) ==
          R"({"flag":false,"count":-3,"size":224,"ratio":5E-1,"gain":1E0,"label":"cls","hue":"green","timeout":1.5E0,)"
          R"("first":null,"fields":["jpg"],"mean":[0E0,0E0,0E0],"nested":{"small":7,"name":null}})");
    CHECK(d::option_names<every_kind>().size() == 12); // not_described is not a key

    const auto x = d::options_from_json<every_kind>(json::parse(
        R"({"size": 96, "hue": "blue", "timeout": 0.25, "first": 1, "nested": {"name": "n"}, "ratio": 2})"));
    CHECK(x.size == 96);
    CHECK(x.hue == describe_test::colour::blue);
    CHECK(x.timeout == std::chrono::milliseconds(250));
    CHECK(x.first == 1u);
    CHECK(x.nested.name == "n");
    CHECK(x.nested.small == 7); // absent keys keep their defaults
    CHECK(x.ratio == 2.0);      // an integer is a number
    CHECK(x.label == "cls");
}

TEST_CASE("an unknown key is refused, naming it and the valid keys")
{
    const auto msg = option_error_of([] { (void)d::options_from_json<every_kind>(json::parse(R"({"sise": 3})")); });
    CHECK(contains(msg, "unknown key \"sise\""));
    CHECK(contains(msg, "valid keys: flag, count, size, ratio, gain, label, hue, timeout, first, fields, mean, nested"));
    const auto deep = option_error_of([] { (void)d::options_from_json<every_kind>(json::parse(R"({"nested": {"smal": 3}})")); });
    CHECK(contains(deep, "unknown key \"smal\" in \"nested\"; valid keys: small, name"));
    try {
        (void)d::options_from_json<every_kind>(json::parse(R"({"nested": {"smal": 3}})"));
    } catch (const d::option_error& e) {
        CHECK(e.path() == "nested.smal");
    }
    CHECK(contains(option_error_of([] { (void)d::options_from_json<every_kind>(json::parse(R"({"not_described": 1})")); }),
                   "unknown key \"not_described\""));
}

TEST_CASE("a value of the wrong type or out of range names the key path and what it takes")
{
    auto err = [](const char* text) { return option_error_of([&] { (void)d::options_from_json<every_kind>(json::parse(text)); }); };
    CHECK(contains(err(R"({"flag": 1})"), "flag: expected a boolean, got 1"));
    CHECK(contains(err(R"({"size": -1})"), "size: expected an integer in [0, 4294967295], got -1"));
    CHECK(contains(err(R"({"size": 4294967296})"), "size: expected an integer in [0, 4294967295]"));
    CHECK(contains(err(R"({"size": 2.5})"), "size: expected an integer"));
    CHECK(contains(err(R"({"size": "3"})"), "size: expected an integer"));
    CHECK(contains(err(R"({"nested": {"small": 256}})"), "nested.small: expected an integer in [0, 255], got 256"));
    CHECK(contains(err(R"({"count": -2147483649})"), "count: expected an integer in [-2147483648, 2147483647]"));
    CHECK(contains(err(R"({"ratio": "x"})"), "ratio: expected a number"));
    CHECK(contains(err(R"({"label": 3})"), "label: expected a string"));
    CHECK(contains(err(R"({"hue": "purple"})"), "hue: expected one of red, green, blue, got \"purple\""));
    CHECK(contains(err(R"({"timeout": "1s"})"), "timeout: expected a number of seconds"));
    CHECK(contains(err(R"({"first": "1"})"), "first: expected an integer in [0, 18446744073709551615] or null"));
    CHECK(contains(err(R"({"fields": ["jpg", 3]})"), "fields[1]: expected a string, got 3"));
    CHECK(contains(err(R"({"mean": [1, 2]})"), "mean: expected a list of 3"));
    CHECK(contains(err(R"({"nested": 3})"), "nested: expected an object, got 3"));
    CHECK(contains(option_error_of([] { (void)d::options_from_json<every_kind>(json::parse("[]")); }), "expected an object"));
}
