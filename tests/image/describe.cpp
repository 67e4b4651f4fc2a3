// Tests of conveyor/image/describe.hpp: every described field of the image module's option
// structs (and of the S3, store and shard structs the Python module reads) round-trips
// through JSON, and the enums are read by their names.
#include <conveyor/image/describe.hpp>
#include <conveyor/s3/describe.hpp>
#include <conveyor/shard/describe.hpp>
#include <conveyor/store/describe.hpp>

#include "../support/described.hpp"

#include <boost/json/parse.hpp>

#include <doctest/doctest.h>

namespace image = conveyor::image;

TEST_CASE("the image option structs round-trip through JSON")
{
    conveyor::test::check_round_trip<image::extent>();
    conveyor::test::check_round_trip<image::decode_options>();
    conveyor::test::check_round_trip<image::json_label>();
    conveyor::test::check_round_trip<image::label_map_options>();
    conveyor::test::check_round_trip<image::decode_image_options>();
    conveyor::test::check_round_trip<image::decoded_queue_options>();
    conveyor::test::check_round_trip<image::collate_options>();
    conveyor::test::check_round_trip<image::field_options>();
    conveyor::test::check_round_trip<image::fields_queue_options>();
    conveyor::test::check_round_trip<image::collate_fields_options>();
}

TEST_CASE("the S3, store and shard option structs round-trip through JSON")
{
    conveyor::test::check_round_trip<conveyor::s3::config_options>();
    conveyor::test::check_round_trip<conveyor::store::cache_options>();
    conveyor::test::check_round_trip<conveyor::shard::source_options>();
}

TEST_CASE("decode and collate options are read by their field names, enums by their enumerators' names")
{
    const auto d = conveyor::detail::options_from_json<image::decode_image_options>(boost::json::parse(
        R"({"decode": {"size": {"width": 160, "height": 128}, "crop": "random_resized", "flip": 0.5}, "errors": "skip"})"));
    CHECK(d.decode.size == image::extent{160, 128});
    CHECK(d.decode.crop == image::crop_mode::random_resized);
    CHECK(d.errors == conveyor::on_error::skip);
    const auto c = conveyor::detail::options_from_json<image::collate_options>(
        boost::json::parse(R"({"size": 8, "type": "float16", "layout": "nchw", "mean": [0.5, 0.5, 0.5]})"));
    CHECK(c.type == image::dtype::float16);
    CHECK(c.layout == image::tensor_layout::nchw);
    CHECK(c.mean[2] == 0.5f);
    const auto x = conveyor::detail::options_from_json<image::decode_image_options>(boost::json::parse(
        R"({"extra_fields": ["txt", "json;jsn"], "extra_decode": {"only": ["json"], "max_json_depth": 9}})"));
    CHECK(x.extra_fields == std::vector<std::string>{"txt", "json;jsn"});
    CHECK(x.extra_decode.only == std::vector<std::string>{"json"});
    CHECK(x.extra_decode.max_json_depth == 9);
}
