// Tests of conveyor/image/dlpack.hpp: a batch's images and labels exported as DLPack
// tensors over the batch's own memory, the slab held until the consumer's deleter runs
// (exactly once: the ASan build would see a second free).
#include <conveyor/image/dlpack.hpp>
#include <conveyor/image/dtype.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace image = conveyor::image;

namespace {

/// A batch as decode_batches makes one, by hand: 2 images of 3 x 4 x 3 uint8 in one slab.
image::image_batch handmade(image::slab_pool& pool)
{
    auto s = pool.try_acquire();
    REQUIRE(s);
    image::image_batch b;
    b.slab = *s;
    b.images = {.data = s->data(), .type = image::dtype::uint8, .shape = {2, 3, 4, 3}, .strides = {36, 12, 3, 1}};
    b.labels = {.data = s->data() + 256, .type = image::dtype::int64, .shape = {2}, .strides = {1}};
    const std::int64_t labels[2] = {7, -1};
    std::memcpy(b.labels.data, labels, sizeof labels);
    b.keys = {"a", "b"};
    return b;
}

} // namespace

TEST_CASE("to_dlpack exports a batch's images and labels without a copy and holds its slab until the deleter runs")
{
    image::slab_pool pool(4096, 1);
    DLManagedTensor* images = nullptr;
    DLManagedTensor* labels = nullptr;
    void* data = nullptr;
    {
        auto b = handmade(pool);
        data = b.images.data;
        images = image::to_dlpack(b);
        labels = image::labels_to_dlpack(b);
    } // the batch is gone; the tensors still own the slab
    REQUIRE(images != nullptr);
    REQUIRE(labels != nullptr);
    CHECK(pool.stats().in_use == 1);
    CHECK_FALSE(pool.try_acquire());

    const DLTensor& t = images->dl_tensor;
    CHECK(t.data == data);
    CHECK(t.device.device_type == kDLCPU);
    CHECK(t.device.device_id == 0);
    CHECK(t.ndim == 4);
    CHECK(t.dtype.code == kDLUInt);
    CHECK(t.dtype.bits == 8);
    CHECK(t.dtype.lanes == 1);
    CHECK(t.shape[0] == 2);
    CHECK(t.shape[3] == 3);
    CHECK(t.strides[0] == 36);
    CHECK(t.strides[3] == 1);
    CHECK(t.byte_offset == 0);

    const DLTensor& l = labels->dl_tensor;
    CHECK(l.ndim == 1);
    CHECK(l.dtype.code == kDLInt);
    CHECK(l.dtype.bits == 64);
    CHECK(l.shape[0] == 2);
    CHECK(static_cast<const std::int64_t*>(l.data)[0] == 7);
    CHECK(static_cast<const std::int64_t*>(l.data)[1] == -1);

    images->deleter(images);
    CHECK(pool.stats().in_use == 1); // the labels still hold it
    labels->deleter(labels);
    CHECK(pool.stats().in_use == 0); // back in the pool, once
    auto again = pool.try_acquire();
    REQUIRE(again);
    CHECK(again->data() == data);
    CHECK(pool.stats().allocated == 1);
}

TEST_CASE("dlpack_type names every element type as DLPack does")
{
    CHECK(image::dlpack_type(image::dtype::float16).code == kDLFloat);
    CHECK(image::dlpack_type(image::dtype::float16).bits == 16);
    CHECK(image::dlpack_type(image::dtype::float32).bits == 32);
    CHECK(image::dlpack_type(image::dtype::int64).code == kDLInt);
    CHECK(image::dlpack_device(image::memory_kind::cuda_host).device_type == kDLCPU);
}

TEST_CASE("the dtype table is the one mapping: sizes, names and DLPack types all read it")
{
    CHECK(image::dtype_table.size() == 4);
    for (const auto& row : image::dtype_table) {
        CAPTURE(row.name);
        CHECK(&image::traits_of(row.type) == &row);
        CHECK(image::size_of(row.type) * 8 == row.bits);
        CHECK(image::name_of(row.type) == row.name);
        CHECK(image::dtype_named(row.name) == row.type);
        const DLDataType dl = image::dlpack_type(row.type);
        CHECK(dl.code == static_cast<std::uint8_t>(row.kind));
        CHECK(dl.bits == row.bits);
        CHECK(dl.lanes == 1);
    }
    // The rows themselves, as NumPy, PyTorch and DLPack name and size these types.
    CHECK(image::size_of(image::dtype::uint8) == 1);
    CHECK(image::size_of(image::dtype::int64) == 8);
    CHECK(image::size_of(image::dtype::float16) == 2);
    CHECK(image::size_of(image::dtype::float32) == 4);
    CHECK(image::dlpack_type(image::dtype::uint8).code == kDLUInt);
    CHECK(image::dlpack_type(image::dtype::int64).code == kDLInt);
    CHECK(image::dlpack_type(image::dtype::float16).code == kDLFloat);
    CHECK(image::dlpack_type(image::dtype::float32).code == kDLFloat);
    CHECK(image::name_of(image::dtype::float16) == "float16");
    CHECK_FALSE(image::dtype_named("float64").has_value());
    CHECK_FALSE(image::dtype_named("").has_value());
    static_assert(std::is_same_v<image::host_element_t<image::dtype::float32>, float>);
    static_assert(std::is_same_v<image::host_element_t<image::dtype::int64>, std::int64_t>);
}
