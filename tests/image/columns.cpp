// Tests of conveyor/image/columns.hpp and of the extra fields of the batch stages: values
// stack where they share a kind, shape and type (integers, arrays, images), else stay a list;
// collate_fields makes batches of any fields; decode_batches and decode_image carry extra
// fields beside the image, each with its own item through skips, and name what is missing.
#include "support.hpp"

#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/image/batch.hpp>
#include <conveyor/image/columns.hpp>
#include <conveyor/image/stage.hpp>

#include <doctest/doctest.h>

#include <bit>
#include <cstring>
#include <string>
#include <vector>

namespace image = conveyor::image;
namespace shard = conveyor::shard;
using namespace conveyor_test_image;

namespace {

image::array_value array_of(std::string descr, std::vector<std::int64_t> shape, std::string data, bool fortran = false)
{
    return {.descr = std::move(descr), .shape = std::move(shape), .fortran_order = fortran, .data = slice_of(data)};
}

image::decoded_image image_of(std::uint32_t h, std::uint32_t w, std::uint8_t fill)
{
    image::decoded_image i{.pixels = conveyor::buffer::copy_of(std::string(std::size_t{h} * w * 3, char(fill))), .height = h, .width = w, .channels = 3};
    return i;
}

template <class... V>
std::vector<image::field_value> values_of(V&&... v)
{
    std::vector<image::field_value> out;
    (out.emplace_back(std::forward<V>(v)), ...);
    return out;
}

std::string bytes_at(const image::stacked_tensor& t, std::size_t from, std::size_t n)
{
    return {static_cast<const char*>(t.data) + from, n};
}

} // namespace

TEST_CASE("integers stack into an int64 tensor of the batch's length")
{
    const auto c = image::collate_column("cls", values_of(std::int64_t{3}, std::int64_t{-1}, std::int64_t{7}));
    CHECK(c.name == "cls");
    REQUIRE(c.stacked);
    CHECK(c.values.empty());
    CHECK(c.size() == 3);
    CHECK(c.stacked->descr == (std::endian::native == std::endian::little ? "<i8" : ">i8"));
    CHECK(c.stacked->type() == image::dtype::int64);
    CHECK(c.stacked->item_size == 8);
    CHECK(c.stacked->shape == std::vector<std::int64_t>{3});
    CHECK(c.stacked->strides == std::vector<std::int64_t>{1});
    const auto* v = static_cast<const std::int64_t*>(c.stacked->data);
    CHECK(v[0] == 3);
    CHECK(v[1] == -1);
    CHECK(v[2] == 7);
    CHECK(c.stacked->bytes() == 24);
    CHECK(c.stacked->owner.get() == c.stacked->data);
}

TEST_CASE("arrays of one descr, shape and order stack into {n, ...shape}; others stay a list")
{
    const auto c = image::collate_column("npy", values_of(array_of("<i2", {2, 3}, "abcdefghijkl"), array_of("<i2", {2, 3}, "ABCDEFGHIJKL")));
    REQUIRE(c.stacked);
    CHECK(c.stacked->descr == "<i2");
    CHECK(c.stacked->type() == std::nullopt);
    CHECK(c.stacked->item_size == 2);
    CHECK(c.stacked->shape == std::vector<std::int64_t>{2, 2, 3});
    CHECK(c.stacked->strides == std::vector<std::int64_t>{6, 3, 1});
    CHECK(bytes_at(*c.stacked, 0, 24) == "abcdefghijklABCDEFGHIJKL");
    // Fortran arrays keep their order within each item.
    const auto f = image::collate_column("f", values_of(array_of("<f4", {2, 3}, std::string(24, 'x'), true),
                                                         array_of("<f4", {2, 3}, std::string(24, 'y'), true)));
    REQUIRE(f.stacked);
    CHECK(f.stacked->shape == std::vector<std::int64_t>{2, 2, 3});
    CHECK(f.stacked->strides == std::vector<std::int64_t>{6, 1, 2});
    CHECK(f.stacked->type() == (std::endian::native == std::endian::little ? std::optional(image::dtype::float32) : std::nullopt));
    // 0-d arrays stack into a vector; empty ones into an empty tensor.
    const auto z = image::collate_column("z", values_of(array_of("|u1", {}, "a"), array_of("|u1", {}, "b")));
    REQUIRE(z.stacked);
    CHECK(z.stacked->shape == std::vector<std::int64_t>{2});
    CHECK(z.stacked->type() == image::dtype::uint8);
    CHECK(bytes_at(*z.stacked, 0, 2) == "ab");
    const auto e = image::collate_column("e", values_of(array_of("<f4", {0, 4}, ""), array_of("<f4", {0, 4}, "")));
    REQUIRE(e.stacked);
    CHECK(e.stacked->shape == std::vector<std::int64_t>{2, 0, 4});
    CHECK(e.stacked->bytes() == 0);
    CHECK(e.stacked->data != nullptr);
    // Different shapes, types or orders: a list of the arrays as they are.
    const auto other = [](int which) {
        return which == 0   ? array_of("<i2", {3, 2}, "abcdefghijkl")
               : which == 1 ? array_of("<u2", {2, 3}, "abcdefghijkl")
                            : array_of("<i2", {2, 3}, "abcdefghijkl", true);
    };
    for (int which = 0; which < 3; ++which) {
        CAPTURE(which);
        const auto l = image::collate_column("npy", values_of(array_of("<i2", {2, 3}, "abcdefghijkl"), other(which)));
        CHECK_FALSE(l.stacked);
        REQUIRE(l.values.size() == 2);
        CHECK(std::holds_alternative<image::array_value>(l.values[1]));
    }
}

TEST_CASE("images of one size stack into a uint8 {n, h, w, c} tensor; of different sizes they stay a list")
{
    const auto c = image::collate_column("seg.png", values_of(image_of(2, 3, 1), image_of(2, 3, 2)));
    REQUIRE(c.stacked);
    CHECK(c.stacked->descr == "|u1");
    CHECK(c.stacked->type() == image::dtype::uint8);
    CHECK(c.stacked->shape == std::vector<std::int64_t>{2, 2, 3, 3});
    CHECK(c.stacked->strides == std::vector<std::int64_t>{18, 9, 3, 1});
    CHECK(bytes_at(*c.stacked, 17, 2) == "\x01\x02");
    const auto l = image::collate_column("seg.png", values_of(image_of(2, 3, 1), image_of(3, 2, 2)));
    CHECK_FALSE(l.stacked);
    CHECK(l.values.size() == 2);
}

TEST_CASE("text, JSON, bytes, objects and mixed kinds stay lists of their values")
{
    const auto t = image::collate_column("txt", values_of(std::string("a"), std::string("bc")));
    CHECK_FALSE(t.stacked);
    REQUIRE(t.size() == 2);
    CHECK(std::get<std::string>(t.values[1]) == "bc");
    const auto j = image::collate_column("json", values_of(boost::json::value(1), boost::json::value("x")));
    CHECK_FALSE(j.stacked);
    CHECK(j.values.size() == 2);
    const auto m = image::collate_column("m", values_of(std::int64_t{1}, std::string("2")));
    CHECK_FALSE(m.stacked);
    CHECK(std::get<std::int64_t>(m.values[0]) == 1);
    const auto b = image::collate_column("bin", values_of(slice_of("x"), slice_of("y")));
    CHECK_FALSE(b.stacked);
    CHECK(image::collate_column("none", {}).size() == 0);
}

namespace {

conveyor::runtime& columns_runtime()
{
    static conveyor::runtime rt({.io_threads = 1, .compute_threads = 2});
    return rt;
}

std::string npy_f4(std::uint64_t k, std::size_t n)
{
    std::string data;
    for (std::size_t i = 0; i < n; ++i) {
        const float v = float(k) + float(i) / 10;
        data.append(reinterpret_cast<const char*>(&v), 4);
    }
    return npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(n) + ",), }", data);
}

/// Sample k: a JPEG of its own size (`jpg`, or `png` for k % 4 == 3), txt "caption k",
/// json {"k": k}, cls k % 5, an npy of 4 floats (k, k.1, ...) — 2 + k % 2 of them when
/// `ragged`; no txt for k in `no_txt`, a broken image for k in `bad`.
conveyor::pipeline<shard::sample> field_samples(std::uint64_t n, std::vector<std::uint64_t> no_txt = {}, std::vector<std::uint64_t> bad = {},
                                          bool ragged = false)
{
    return conveyor::generate(n, [=](std::uint64_t k) {
        shard::sample s{.key = "s/" + std::to_string(k), .origin = "mem://shard-0.tar", .fields = {}, .shard = 0, .index = k};
        const bool broken = std::find(bad.begin(), bad.end(), k) != bad.end();
        const auto jpeg = make_jpeg(32 + 8 * std::uint32_t(k % 3), 24, TJSAMP_420, 90);
        s.fields.push_back({.name = k % 4 == 3 ? "png" : "jpg",
                            .data = broken ? slice_of("broken") : conveyor::slice(conveyor::buffer::copy_of(std::span<const std::byte>(jpeg)))});
        if (std::find(no_txt.begin(), no_txt.end(), k) == no_txt.end()) s.fields.push_back({.name = "txt", .data = slice_of("caption " + std::to_string(k))});
        s.fields.push_back({.name = "json", .data = slice_of("{\"k\": " + std::to_string(k) + "}")});
        s.fields.push_back({.name = "cls", .data = slice_of(std::to_string(k % 5))});
        s.fields.push_back({.name = "vec.npy", .data = slice_of(npy_f4(k, ragged ? 2 + k % 2 : 4))});
        return s;
    });
}

const image::decode_options slot_size{.size = {16, 12}};

/// Checks that item i of batch `b` is sample k, in every column.
void check_extra_item(const image::image_batch& b, std::size_t i, std::uint64_t k)
{
    CAPTURE(i);
    CAPTURE(k);
    CHECK(b.keys[i] == "s/" + std::to_string(k));
    CHECK(static_cast<const std::int64_t*>(b.labels.data)[i] == std::int64_t(k % 5));
    const image::batch_column* txt = b.column("txt");
    REQUIRE(txt);
    CHECK(std::get<std::string>(txt->values[i]) == "caption " + std::to_string(k));
    const image::batch_column* json = b.column("json;jsn");
    REQUIRE(json);
    CHECK(std::get<boost::json::value>(json->values[i]).at("k").as_int64() == std::int64_t(k));
    const image::batch_column* cls = b.column("cls");
    REQUIRE(cls);
    REQUIRE(cls->stacked);
    CHECK(static_cast<const std::int64_t*>(cls->stacked->data)[i] == std::int64_t(k % 5));
    const image::batch_column* key = b.column("__key__");
    REQUIRE(key);
    CHECK(std::get<std::string>(key->values[i]) == b.keys[i]);
    const image::batch_column* vec = b.column("vec.npy");
    REQUIRE(vec);
    REQUIRE(vec->stacked);
    float first = 0;
    std::memcpy(&first, static_cast<const char*>(vec->stacked->data) + i * 16, 4);
    CHECK(first == float(k));
    // The image in the slot is this sample's.
    const auto jpeg = make_jpeg(32 + 8 * std::uint32_t(k % 3), 24, TJSAMP_420, 90);
    const auto want = image::decoder().decode(jpeg, slot_size, {.key = b.keys[i]});
    CHECK(std::memcmp(static_cast<const std::uint8_t*>(b.images.data) + i * want.size_bytes(), want.data().data(), want.size_bytes()) == 0);
}

const std::vector<std::string> extra_specs{"txt", "json;jsn", "cls", "__key__", "__url__", "vec.npy"};

} // namespace

TEST_CASE("decode_batches carries extra fields beside the images: numbers and same-shape arrays stacked, the rest lists")
{
    image::decode_image_options d{.decode = slot_size, .fields = {"jpg", "png"}};
    d.extra_fields = extra_specs;
    std::vector<image::image_batch> batches;
    for (auto& b : (field_samples(10) | image::decode_batches(d, {.size = 4})).on(columns_runtime())) batches.push_back(std::move(b));
    REQUIRE(batches.size() == 3);
    std::uint64_t k = 0;
    for (const auto& b : batches) {
        REQUIRE(b.columns.size() == extra_specs.size());
        for (std::size_t j = 0; j < extra_specs.size(); ++j) CHECK(b.columns[j].name == extra_specs[j]);
        for (const auto& c : b.columns) CHECK(c.size() == b.size());
        CHECK(b.column("vec.npy")->stacked->shape == std::vector<std::int64_t>{std::int64_t(b.size()), 4});
        CHECK(std::get<std::string>(b.column("__url__")->values[0]) == "mem://shard-0.tar");
        CHECK_FALSE(b.column("txt")->stacked);
        for (std::size_t i = 0; i < b.size(); ++i) check_extra_item(b, i, k++);
    }
    // Without extra fields a batch has no columns.
    for (auto& b : (field_samples(3) | image::decode_batches({.decode = slot_size, .fields = {"jpg", "png"}}, {.size = 4})).on(columns_runtime()))
        CHECK(b.columns.empty());
}

TEST_CASE("extra fields go with their items through skips: bad images and missing fields skipped, batches full")
{
    image::decode_image_options d{.decode = slot_size, .fields = {"jpg", "png"}, .errors = conveyor::on_error::skip};
    d.extra_fields = extra_specs;
    const std::vector<std::uint64_t> no_txt{2, 9}, bad{5, 6, 13};
    auto p = (field_samples(23, no_txt, bad) | image::decode_batches(d, {.size = 4})).on(columns_runtime());
    auto run = p.run();
    std::vector<image::image_batch> batches;
    for (auto& b : run) batches.push_back(std::move(b));
    CHECK(run.stats().skipped == 5);
    std::vector<std::uint64_t> good;
    for (std::uint64_t k = 0; k < 23; ++k)
        if (std::find(no_txt.begin(), no_txt.end(), k) == no_txt.end() && std::find(bad.begin(), bad.end(), k) == bad.end()) good.push_back(k);
    REQUIRE(batches.size() == 5); // 18 good items: 4, 4, 4, 4, 2
    std::size_t g = 0;
    for (const auto& b : batches) {
        CHECK(b.size() == (g < 16 ? 4u : 2u));
        for (std::size_t i = 0; i < b.size(); ++i) check_extra_item(b, i, good[g++]);
    }
    CHECK(g == good.size());
}

TEST_CASE("a missing extra field fails the run by default, naming the key, the fields asked and the fields the sample has")
{
    image::decode_image_options d{.decode = slot_size, .fields = {"jpg", "png"}};
    d.extra_fields = {"txt;caption", "cls"};
    std::string what;
    try {
        for (auto& b : (field_samples(8, {6}) | image::decode_batches(d, {.size = 4})).on(columns_runtime())) (void)b;
    } catch (const conveyor::error& e) {
        CHECK(e.code() == image::errc::missing_field);
        what = e.what();
    }
    CAPTURE(what);
    CHECK(what.find("s/6") != std::string::npos);
    CHECK(what.find("mem://shard-0.tar") != std::string::npos);
    CHECK(what.find("none of the fields 'txt;caption'") != std::string::npos);
    CHECK(what.find("which has: jpg, json, cls, vec.npy") != std::string::npos);
}

TEST_CASE("arrays of different shapes make a list column; extra images decode with their own options and stack by size")
{
    image::decode_image_options d{.decode = slot_size, .fields = {"jpg", "png"}};
    d.extra_fields = {"vec.npy", "jpg;png"};
    d.extra_decode.image = {.size = {8, 6}};
    std::vector<image::image_batch> batches;
    for (auto& b : (field_samples(6, {}, {}, true) | image::decode_batches(d, {.size = 3})).on(columns_runtime())) batches.push_back(std::move(b));
    REQUIRE(batches.size() == 2);
    const image::batch_column* vec = batches[0].column("vec.npy");
    REQUIRE(vec);
    CHECK_FALSE(vec->stacked);
    REQUIRE(vec->values.size() == 3);
    CHECK(std::get<image::array_value>(vec->values[1]).shape == std::vector<std::int64_t>{3});
    const image::batch_column* img = batches[1].column("jpg;png");
    REQUIRE(img);
    REQUIRE(img->stacked);
    CHECK(img->stacked->shape == std::vector<std::int64_t>{3, 6, 8, 3});
}

TEST_CASE("decode_image hands extra fields on with each image; file blobs have their key, URL and class")
{
    image::decode_image_options d{.fields = {"jpg", "png"}};
    d.extra_fields = {"txt", "cls"};
    std::vector<image::decoded> got;
    for (auto& x : (field_samples(5) | image::decode_image(d)).on(columns_runtime())) got.push_back(std::move(x));
    REQUIRE(got.size() == 5);
    REQUIRE(got[4].extras.size() == 2);
    CHECK(got[4].extras[0].name == "txt");
    CHECK(std::get<std::string>(got[4].extras[0].value) == "caption 4");
    CHECK(std::get<std::int64_t>(got[4].extras[1].value) == 4);

    const auto jpeg = make_jpeg(40, 30, TJSAMP_420, 90);
    auto blobs = conveyor::generate(5, [jpeg](std::uint64_t k) {
        conveyor::blob b{.key = "c/" + std::to_string(k) + ".jpg", .data = conveyor::buffer::copy_of(std::span<const std::byte>(jpeg)),
                         .origin = "/data/c/" + std::to_string(k) + ".jpg", .label = std::int64_t(k % 2), .index = k};
        return b;
    });
    image::decode_image_options bd{.decode = slot_size};
    bd.extra_fields = {"cls", "__key__", "__url__"};
    std::vector<image::image_batch> batches;
    for (auto& b : (std::move(blobs) | image::decode_batches(bd, {.size = 5})).on(columns_runtime())) batches.push_back(std::move(b));
    REQUIRE(batches.size() == 1);
    CHECK(static_cast<const std::int64_t*>(batches[0].column("cls")->stacked->data)[3] == 1);
    CHECK(std::get<std::string>(batches[0].column("__key__")->values[2]) == "c/2.jpg");
    CHECK(std::get<std::string>(batches[0].column("__url__")->values[2]) == "/data/c/2.jpg");
    bd.extra_fields = {"txt"};
    std::string what;
    try {
        auto again = conveyor::generate(1, [jpeg](std::uint64_t) {
            return conveyor::blob{.key = "x.jpg", .data = conveyor::buffer::copy_of(std::span<const std::byte>(jpeg)), .origin = "/x.jpg"};
        });
        for (auto& b : (std::move(again) | image::decode_batches(bd, {.size = 1})).on(columns_runtime())) (void)b;
    } catch (const conveyor::error& e) {
        what = e.what();
    }
    CHECK(what.find("the field 'txt' is not in the sample, which has: no fields") != std::string::npos);
}

TEST_CASE("the batch and decode stages refuse extra field specs that name nothing")
{
    for (const auto& bad : std::vector<std::vector<std::string>>{{""}, {"txt;"}, {";txt"}, {"a;;b"}}) {
        image::decode_image_options d{.decode = slot_size};
        d.extra_fields = bad;
        CHECK_THROWS_AS(image::decode_batches(d), conveyor::error);
        CHECK_THROWS_AS(image::decode_image(d), conveyor::error);
        CHECK_THROWS_AS(image::collate_fields(4, {.fields = bad}), conveyor::error);
    }
    CHECK_THROWS_AS(image::collate_fields(0), conveyor::error);
}

TEST_CASE("collate_fields makes batches of any fields: alternatives, keys and URLs, stacked where they stack")
{
    std::vector<image::sample_batch> batches;
    for (auto& b : (field_samples(7) | image::decode_fields() |
                    image::collate_fields(3, {.fields = {"cls", "txt", "jpg;png", "__key__", "__url__", "vec.npy"}}))
                       .on(columns_runtime()))
        batches.push_back(std::move(b));
    REQUIRE(batches.size() == 3);
    CHECK(batches[2].size() == 1);
    std::uint64_t k = 0;
    for (std::size_t n = 0; n < batches.size(); ++n) {
        const auto& b = batches[n];
        CHECK(b.index == n);
        REQUIRE(b.columns.size() == 6);
        REQUIRE(b.ids.size() == b.size());
        const auto* cls = b.column("cls");
        REQUIRE(cls->stacked);
        const auto* img = b.column("jpg;png");
        if (b.size() == 1) { // one image is one size: stacked
            REQUIRE(img->stacked);
            CHECK(img->stacked->shape == std::vector<std::int64_t>{1, 24, 32 + 8 * std::int64_t(k % 3), 3});
        } else {
            REQUIRE_FALSE(img->stacked); // images of their own sizes
        }
        for (std::size_t i = 0; i < b.size(); ++i, ++k) {
            CHECK(b.keys[i] == "s/" + std::to_string(k));
            CHECK(b.ids[i].index == k);
            CHECK(static_cast<const std::int64_t*>(cls->stacked->data)[i] == std::int64_t(k % 5));
            CHECK(std::get<std::string>(b.column("txt")->values[i]) == "caption " + std::to_string(k));
            if (!img->stacked) CHECK(std::get<image::decoded_image>(img->values[i]).width == 32 + 8 * (k % 3));
            CHECK(std::get<std::string>(b.column("__key__")->values[i]) == b.keys[i]);
            CHECK(std::get<std::string>(b.column("__url__")->values[i]) == "mem://shard-0.tar");
        }
        CHECK(b.column("vec.npy")->stacked->shape == std::vector<std::int64_t>{std::int64_t(b.size()), 4});
    }
    // No fields named: the first sample's, in its order.
    for (auto& b : (field_samples(2) | image::decode_fields() | image::collate_fields(2)).on(columns_runtime())) {
        REQUIRE(b.columns.size() == 5);
        CHECK(b.columns[0].name == "jpg");
        CHECK(b.columns[1].name == "txt");
        CHECK(b.columns[4].name == "vec.npy");
    }
    // No partial batch when told so.
    std::size_t count = 0;
    for (auto& b : (field_samples(7) | image::decode_fields() | image::collate_fields(3, {.fields = {"cls"}, .partial = false})).on(columns_runtime())) {
        CHECK(b.size() == 3);
        ++count;
    }
    CHECK(count == 2);
}

TEST_CASE("collate_fields fails on a sample without a field asked for, or skips it and fills the batch with the next")
{
    std::string what;
    try {
        for (auto& b : (field_samples(6, {4}) | image::decode_fields() | image::collate_fields(2, {.fields = {"txt"}})).on(columns_runtime())) (void)b;
    } catch (const conveyor::error& e) {
        what = e.what();
    }
    CHECK(what.find("collate_fields") != std::string::npos);
    CHECK(what.find("s/4") != std::string::npos);
    CHECK(what.find("which has: jpg, json, cls, vec.npy") != std::string::npos);
    auto p = (field_samples(7, {1, 4}) | image::decode_fields() |
              image::collate_fields(2, {.fields = {"txt", "cls"}, .errors = conveyor::on_error::skip}))
                 .on(columns_runtime());
    auto run = p.run();
    std::vector<std::string> keys;
    for (auto& b : run) {
        for (std::size_t i = 0; i < b.size(); ++i) {
            keys.push_back(b.keys[i]);
            CHECK(std::get<std::string>(b.column("txt")->values[i]) == "caption " + b.keys[i].substr(2));
        }
    }
    CHECK(keys == std::vector<std::string>{"s/0", "s/2", "s/3", "s/5", "s/6"});
    CHECK(run.stats().skipped == 2);
}
