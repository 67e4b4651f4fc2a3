// Tests of conveyor/image/fields.hpp: each field's decoder is picked by its last extension as
// webdataset picks it (user decoders by name, then by extension, first), each built-in
// decoder reads what webdataset's does and names the key, field, shard and decoder when it
// cannot, and the decode_fields stage decodes whole samples, failing or skipping bad ones.
#include "support.hpp"

#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/image/fields.hpp>

#include <boost/json/serialize.hpp>

#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace image = conveyor::image;
namespace shard = conveyor::shard;
using namespace conveyor_test_image;

namespace {

shard::field field_of(std::string name, std::string_view data)
{
    return {.name = std::move(name), .data = slice_of(data)};
}

const image::field_context here{.key = "train/0001", .origin = "s3://bucket/shard-000007.tar"};

image::field_value decode_here(const shard::field& f, const image::field_options& o = {})
{
    return image::decode_field(f, here, o);
}

/// The conveyor::error decoding `f` throws.
conveyor::error failure_of(const shard::field& f, const image::field_options& o = {})
{
    try {
        decode_here(f, o);
    } catch (const conveyor::error& e) {
        return e;
    }
    FAIL("no error decoding field " << f.name);
    return conveyor::error({}, {});
}

/// Checks that `e` names the sample, the shard, the field and the decoder.
void check_names(const conveyor::error& e, std::string_view field, std::string_view decoder)
{
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(e.key() == "train/0001");
    CHECK(e.where() == "s3://bucket/shard-000007.tar");
    CHECK(what.find("train/0001") != std::string::npos);
    CHECK(what.find("shard-000007.tar") != std::string::npos);
    CHECK(what.find("field '" + std::string(field) + "'") != std::string::npos);
    CHECK(what.find(decoder) != std::string::npos);
}

std::string npy_u1(std::string_view data)
{
    return npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (" + std::to_string(data.size()) + ",), }", data);
}

} // namespace

TEST_CASE("a field's decoder is chosen by its last extension, as webdataset's default decoders choose")
{
    CHECK(image::field_extension("seg.png") == "png");
    CHECK(image::field_extension("a.b.json") == "json");
    CHECK(image::field_extension("cls") == "cls");
    CHECK(image::field_extension("") == "");
    using k = image::field_kind;
    for (const char* n : {"txt", "text", "transcript", "caption.txt"}) CHECK(image::default_field_kind(n) == k::text);
    for (const char* n : {"cls", "cls2", "index", "inx", "id", "label.cls"}) CHECK(image::default_field_kind(n) == k::integer);
    for (const char* n : {"json", "jsn", "meta.json"}) CHECK(image::default_field_kind(n) == k::json);
    CHECK(image::default_field_kind("npy") == k::array);
    CHECK(image::default_field_kind("depth.npy") == k::array);
    for (const char* n : {"jpg", "jpeg", "jpe", "jfif", "png", "webp", "avif", "seg.png", "JPG", "left.Png"})
        CHECK(image::default_field_kind(n) == k::image);
    // webdataset's basic handlers look extensions up with case; its image handler without.
    for (const char* n : {"TXT", "Cls", "JSON", "NPY", "bin", "pickle", "pyd", "mp4", "gif", "ppm", "png.gz", "jpg.txt.bak"})
        CHECK(image::default_field_kind(n) == k::bytes);
    CHECK(image::default_field_kind("jpg.txt") == k::text);
}

TEST_CASE("integer fields are decimal text with white space and a sign, as Python's int() reads them")
{
    CHECK(std::get<std::int64_t>(decode_here(field_of("cls", "12"))) == 12);
    CHECK(std::get<std::int64_t>(decode_here(field_of("cls", "  7\n"))) == 7);
    CHECK(std::get<std::int64_t>(decode_here(field_of("index", "-42"))) == -42);
    CHECK(std::get<std::int64_t>(decode_here(field_of("cls2", "+3"))) == 3);
    CHECK(std::get<std::int64_t>(decode_here(field_of("id", "9223372036854775807"))) == 9223372036854775807);
    for (const char* bad : {"", " ", "abc", "1.5", "12x", "+-1", "+", "9223372036854775808", "0x10"}) {
        CAPTURE(bad);
        const auto e = failure_of(field_of("cls", bad));
        CHECK(e.code() == image::errc::bad_label);
        check_names(e, "cls", "integer decoder");
    }
}

TEST_CASE("text fields are UTF-8 strings; bytes that are not UTF-8 are an error at the first bad byte")
{
    CHECK(std::get<std::string>(decode_here(field_of("txt", "a photo of a cat"))) == "a photo of a cat");
    CHECK(std::get<std::string>(decode_here(field_of("caption.text", "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x90\x88"))) ==
          "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x90\x88");
    CHECK(std::get<std::string>(decode_here(field_of("txt", "\xEF\xBB\xBFhi"))) == "\xEF\xBB\xBFhi"); // a BOM is kept, as Python keeps it
    CHECK(std::get<std::string>(decode_here(field_of("txt", ""))).empty());
    CHECK(std::get<std::string>(decode_here(field_of("txt", std::string("a\0b", 3)))) == std::string("a\0b", 3));
    struct bad_text {
        std::string text;
        std::size_t at;
    };
    for (const auto& [text, at] : std::vector<bad_text>{{"abcdefghij\xC3(", 10},      // a cut two-byte sequence
                                                        {"\xC0\xAF", 0},              // overlong '/'
                                                        {"ok \xED\xA0\x80", 3},       // a surrogate
                                                        {"\xF4\x90\x80\x80", 0},      // past U+10FFFF
                                                        {"x\x80", 1},                 // a stray continuation byte
                                                        {"12345678\xFF", 8},          // after a whole ASCII word
                                                        {"\xE2\x82", 0}}) {           // cut at the end
        CAPTURE(text);
        const auto e = failure_of(field_of("txt", text));
        CHECK(e.code() == image::errc::bad_field);
        check_names(e, "txt", "text decoder");
        CHECK(std::string(e.what()).find("not UTF-8 at byte " + std::to_string(at)) != std::string::npos);
    }
}

TEST_CASE("JSON fields are documents; bad ones fail at their byte, line and column, within size and depth limits")
{
    const auto v = std::get<boost::json::value>(decode_here(field_of("json", R"({"caption": "a cat", "boxes": [[1, 2, 3, 4]], "score": 0.5})")));
    CHECK(v.at("caption").as_string() == "a cat");
    CHECK(v.at("boxes").at(0).at(2).as_int64() == 3);
    CHECK(v.at("score").as_double() == 0.5);
    CHECK(std::get<boost::json::value>(decode_here(field_of("meta.jsn", " 7 "))).as_int64() == 7);
    CHECK(std::get<boost::json::value>(decode_here(field_of("json", "\xEF\xBB\xBF[1]"))).as_array().size() == 1);
    {
        const auto e = failure_of(field_of("json", "{\"a\": 1,\n \"b\": }"));
        CHECK(e.code() == image::errc::bad_field);
        check_names(e, "json", "JSON decoder");
        CHECK(std::string(e.what()).find("at byte 15 (line 2, column 7)") != std::string::npos);
    }
    CHECK(std::string(failure_of(field_of("json", "[1] [2]")).what()).find("not valid JSON") != std::string::npos);
    CHECK(std::string(failure_of(field_of("json", "{\"a\": [1, 2")).what()).find("not valid JSON") != std::string::npos);
    CHECK(std::string(failure_of(field_of("json", "")).what()).find("not valid JSON") != std::string::npos);
    CHECK(std::string(failure_of(field_of("json", "[NaN]")).what()).find("not valid JSON") != std::string::npos);
    CHECK(std::string(failure_of(field_of("json", "\"\xC3(\"")).what()).find("not valid JSON") != std::string::npos);
    image::field_options tight{.max_json_bytes = 8, .max_json_depth = 3};
    CHECK(std::string(failure_of(field_of("json", "[1, 2, 3, 4]"), tight).what()).find("more than the limit of 8") != std::string::npos);
    CHECK(std::holds_alternative<boost::json::value>(decode_here(field_of("json", "[[[1]]]"), tight)));
    const auto deep = failure_of(field_of("json", "[[[[1]]]]"), {.max_json_depth = 3});
    CHECK(std::string(deep.what()).find("nested deeper than 3") != std::string::npos);
    CHECK(std::string(deep.what()).find("at byte 3 (line 1, column 4)") != std::string::npos);
    // A key given twice: the last one, as Python's json.loads keeps it.
    CHECK(std::get<boost::json::value>(decode_here(field_of("json", R"({"a": 1, "a": 2})"))).at("a").as_int64() == 2);
    // The default depth is deep enough for real documents and bounded for hostile ones.
    CHECK(std::holds_alternative<boost::json::value>(decode_here(field_of("json", std::string(200, '[') + std::string(200, ']')))));
    CHECK(failure_of(field_of("json", std::string(100000, '[') + std::string(100000, ']'))).code() == image::errc::bad_field);
}

TEST_CASE("npy fields are NumPy arrays read in place; a bad one names its field and decoder")
{
    const auto f = field_of("depth.npy", npy_u1("abcdef"));
    const auto v = decode_here(f);
    const auto& a = std::get<image::array_value>(v);
    CHECK(a.descr == "|u1");
    CHECK(a.shape == std::vector<std::int64_t>{6});
    CHECK(a.data.view() == "abcdef");
    CHECK(share_storage(a.data, f.data));
    std::string cut = npy_u1("abcdef");
    cut.pop_back();
    const auto e = failure_of(field_of("depth.npy", cut));
    CHECK(e.code() == image::errc::bad_field);
    check_names(e, "depth.npy", "NumPy decoder");
    CHECK(std::string(e.what()).find("needs 6") != std::string::npos);
}

TEST_CASE("image fields decode through the image decoder with the options given, random crops drawn from the sample key")
{
    const auto jpeg = make_jpeg(96, 64, TJSAMP_420, 90);
    const auto v = decode_here({.name = "jpg", .data = slice_of(jpeg)});
    const auto& img = std::get<image::decoded_image>(v);
    CHECK(img.width == 96);
    CHECK(img.height == 64);
    CHECK(img.channels == 3);
    // With a random crop: the same pixels as the decoder's own for this key and epoch.
    image::field_options o;
    o.image = {.size = {32, 24}, .crop = image::crop_mode::random_resized, .flip = 0.5, .seed = 11};
    const image::field_context c{.key = "k/7", .origin = "shard.tar", .epoch = 3};
    const auto cropped = image::decode_field({.name = "left.JPEG", .data = slice_of(jpeg)}, c, o);
    const auto want = image::decoder().decode(jpeg, o.image, {.key = "k/7", .epoch = 3});
    const auto& got = std::get<image::decoded_image>(cropped);
    REQUIRE(got.size_bytes() == want.size_bytes());
    CHECK(std::equal(got.data().begin(), got.data().end(), want.data().begin()));
    // A context's own options come first (what decode_sample passes: the field options').
    const image::decode_options tiny{.size = {8, 8}};
    const image::field_context with_own{.key = "k/7", .origin = "shard.tar", .image = &tiny};
    CHECK(std::get<image::decoded_image>(image::decode_field({.name = "jpg", .data = slice_of(jpeg)}, with_own, o)).width == 8);
    // A PNG under any image extension: the decoder goes by the bytes.
    const std::filesystem::path png = std::filesystem::path(CONVEYOR_GO_IMAGE_TESTDATA) / "video-001.png";
    if (std::filesystem::exists(png)) {
        const auto p = decode_here({.name = "seg.png", .data = slice_of(read_bytes(png))});
        CHECK(std::get<image::decoded_image>(p).width == 150);
    } else {
        MESSAGE("skipped the PNG case: Go's image test data are missing (Debian golang-1.19-src)");
    }
    const auto e = failure_of(field_of("seg.png", "not an image at all"));
    CHECK(e.code() == image::errc::not_an_image);
    check_names(e, "seg.png", "image decoder");
}

TEST_CASE("fields no decoder reads stay bytes (no copy), objects pass through, and fields outside `only` are not decoded")
{
    const auto f = field_of("bin", "\x01\x02\x03");
    const auto v = decode_here(f);
    const auto& b = std::get<conveyor::slice>(v);
    CHECK(b.view() == "\x01\x02\x03");
    CHECK(share_storage(b, f.data));
    auto obj = std::make_shared<int>(5);
    const shard::field of_object{.name = "cls", .object = obj};
    const auto o = decode_here(of_object);
    CHECK(std::get<image::object_value>(o).object == obj);
    const image::field_options only{.only = {"json"}};
    CHECK(std::holds_alternative<conveyor::slice>(decode_here(field_of("cls", "not a number"), only)));
    CHECK(std::holds_alternative<boost::json::value>(decode_here(field_of("json", "1"), only)));
}

TEST_CASE("user decoders come first, by whole name then by extension without case; none hands a field on")
{
    image::field_options o;
    o.by_name["seg.png"] = [](const shard::field& f, const image::field_context& c) -> image::field_value {
        return "mask of " + std::string(c.key) + " (" + f.name + ")";
    };
    o.by_extension["PNG"] = [](const shard::field&, const image::field_context&) -> image::field_value { return std::int64_t{1}; };
    o.by_extension["txt"] = [](const shard::field& f, const image::field_context&) -> image::field_value {
        if (f.data.view() == "pass") return std::monostate{};
        return std::int64_t(f.data.size());
    };
    CHECK(std::get<std::string>(decode_here(field_of("seg.png", "x"), o)) == "mask of train/0001 (seg.png)");
    CHECK(std::get<std::int64_t>(decode_here(field_of("depth.png", "x"), o)) == 1);
    CHECK(std::get<std::int64_t>(decode_here(field_of("txt", "four"), o)) == 4);
    CHECK(std::get<std::string>(decode_here(field_of("txt", "pass"), o)) == "pass"); // handed on to the built-in decoder
    o.by_name["cls"] = [](const shard::field&, const image::field_context&) -> image::field_value { return std::monostate{}; };
    CHECK(std::get<std::int64_t>(decode_here(field_of("cls", "8"), o)) == 8);
}

TEST_CASE("a user decoder's exception names the key, field, shard and decoder, the original nested in it")
{
    image::field_options o;
    o.by_name["meta.bin"] = [](const shard::field&, const image::field_context&) -> image::field_value {
        throw std::runtime_error("my parser choked");
    };
    o.by_extension["pkl"] = [](const shard::field&, const image::field_context& c) -> image::field_value {
        throw image::detail::image_error(image::errc::corrupt, c.key, c.origin, "pickle truncated");
    };
    const auto e = failure_of(field_of("meta.bin", "x"), o);
    CHECK(e.code() == image::errc::field_decoder_failed);
    check_names(e, "meta.bin", "the user decoder for 'meta.bin'");
    CHECK(std::string(e.what()).find("my parser choked") != std::string::npos);
    try {
        decode_here(field_of("meta.bin", "x"), o);
    } catch (const conveyor::error& outer) {
        try {
            std::rethrow_if_nested(outer);
            FAIL("nothing nested");
        } catch (const std::runtime_error& inner) {
            CHECK(std::string(inner.what()) == "my parser choked");
        }
    }
    const auto c = failure_of(field_of("state.pkl", "x"), o);
    CHECK(c.code() == image::errc::corrupt); // a conveyor::error keeps its code
    check_names(c, "state.pkl", "the user decoder for extension 'pkl'");
    CHECK(std::string(c.what()).find("pickle truncated") != std::string::npos);
}

TEST_CASE("decode_sample decodes every field in order, with the sample's key, shard and place")
{
    shard::sample s{.key = "a/b", .origin = "/data/s-1.tar", .fields = {}, .shard = 2, .index = 5, .work = 4};
    s.fields.push_back(field_of("txt", "hello"));
    s.fields.push_back(field_of("cls", "3"));
    s.fields.push_back(field_of("json", "{\"k\": true}"));
    s.fields.push_back(field_of("raw.bin", "zz"));
    const auto d = image::decode_sample(s, {}, image::decoder());
    CHECK(d.key == "a/b");
    CHECK(d.origin == "/data/s-1.tar");
    CHECK(d.id.shard == 2);
    CHECK(d.id.index == 5);
    CHECK(d.id.work == 4);
    REQUIRE(d.fields.size() == 4);
    CHECK(d.fields[0].name == "txt");
    CHECK(std::get<std::string>(*d.find("txt")) == "hello");
    CHECK(std::get<std::int64_t>(*d.find("cls")) == 3);
    CHECK(std::get<boost::json::value>(*d.find("json")).at("k").as_bool());
    CHECK(std::get<conveyor::slice>(*d.find("raw.bin")).view() == "zz");
    CHECK(d.find("jpg") == nullptr);
}

namespace {

conveyor::runtime& fields_runtime()
{
    static conveyor::runtime rt({.io_threads = 1, .compute_threads = 2});
    return rt;
}

/// `n` samples; sample k has txt "caption k", cls k, json {"k": k}; those in `bad` a cls
/// that is not a number.
conveyor::pipeline<shard::sample> text_samples(std::uint64_t n, std::vector<std::uint64_t> bad = {})
{
    return conveyor::generate(n, [bad](std::uint64_t k) {
        shard::sample s{.key = "s/" + std::to_string(k), .origin = "mem.tar", .fields = {}, .index = k};
        const bool broken = std::find(bad.begin(), bad.end(), k) != bad.end();
        s.fields.push_back(field_of("txt", "caption " + std::to_string(k)));
        s.fields.push_back(field_of("cls", broken ? "oops" : std::to_string(k)));
        s.fields.push_back(field_of("json", "{\"k\": " + std::to_string(k) + "}"));
        return s;
    });
}

} // namespace

TEST_CASE("decode_fields decodes samples on the compute pool in order; a bad one fails the run or is skipped and counted")
{
    std::vector<image::decoded_sample> got;
    for (auto& d : (text_samples(50) | image::decode_fields()).on(fields_runtime())) got.push_back(std::move(d));
    REQUIRE(got.size() == 50);
    for (std::uint64_t k = 0; k < 50; ++k) {
        CHECK(got[k].key == "s/" + std::to_string(k));
        CHECK(std::get<std::int64_t>(*got[k].find("cls")) == std::int64_t(k));
        CHECK(std::get<std::string>(*got[k].find("txt")) == "caption " + std::to_string(k));
        CHECK(std::get<boost::json::value>(*got[k].find("json")).at("k").as_int64() == std::int64_t(k));
    }
    std::string what;
    try {
        for (auto& d : (text_samples(20, {13}) | image::decode_fields()).on(fields_runtime())) (void)d;
    } catch (const conveyor::error& e) {
        what = e.what();
    }
    CHECK(what.find("decode_fields") != std::string::npos);
    CHECK(what.find("s/13") != std::string::npos);
    CHECK(what.find("field 'cls'") != std::string::npos);
    auto p = (text_samples(20, {3, 13}) | image::decode_fields({}, {.errors = conveyor::on_error::skip})).on(fields_runtime());
    auto run = p.run();
    std::vector<std::string> keys;
    for (auto& d : run) keys.push_back(d.key);
    CHECK(keys.size() == 18);
    CHECK(run.stats().skipped == 2);
    CHECK(std::find(keys.begin(), keys.end(), "s/3") == keys.end());
}

TEST_CASE("decode_fields takes file blobs as webdataset takes loose files: a field named by the extension, and cls")
{
    const auto jpeg = make_jpeg(40, 30, TJSAMP_444, 90);
    auto blobs = conveyor::generate(3, [jpeg](std::uint64_t k) {
        conveyor::blob b;
        b.key = "cat/img" + std::to_string(k) + ".JPG";
        b.origin = "/data/" + b.key;
        b.label = std::int64_t(k);
        b.data = conveyor::buffer::copy_of(std::span<const std::byte>(jpeg));
        return b;
    });
    std::vector<image::decoded_sample> got;
    for (auto& d : (blobs | image::decode_fields()).on(fields_runtime())) got.push_back(std::move(d));
    REQUIRE(got.size() == 3);
    CHECK(got[2].key == "cat/img2");
    CHECK(std::get<image::decoded_image>(*got[2].find("jpg")).width == 40);
    CHECK(std::get<std::int64_t>(*got[2].find("cls")) == 2);
}
