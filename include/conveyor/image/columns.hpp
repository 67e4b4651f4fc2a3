// conveyor/image/columns.hpp — batches of any fields: one column per field, its values
// stacked into one tensor where they share a shape and a type, else one value per item;
// the collate_fields stage that makes such batches of decoded samples.
#ifndef CONVEYOR_IMAGE_COLUMNS_HPP
#define CONVEYOR_IMAGE_COLUMNS_HPP

#include <conveyor/core/order.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/image/dtype.hpp>
#include <conveyor/image/fields.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor::image {

/** The values of a column stacked into one dense tensor, in memory of its own (`owner`
    keeps it: the item values it was made from are gone).

    `descr` is the elements' NumPy dtype descriptor (`<i8` integers in this machine's byte
    order, `|u1` pixels, or the arrays' own, byte order and all: see `array_value`);
    `shape` starts with the items; `strides` are in elements, as DLPack and PyTorch count
    them: C order, or the arrays' Fortran order within each item.

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe.
*/
struct stacked_tensor {
    std::shared_ptr<const void> owner;
    void* data = nullptr;
    std::string descr;
    std::size_t item_size = 0; ///< bytes per element
    std::vector<std::int64_t> shape;
    std::vector<std::int64_t> strides;

    /// Elements in the tensor.
    CONVEYOR_DECL std::size_t elements() const noexcept;
    /// Bytes the elements take.
    std::size_t bytes() const noexcept { return elements() * item_size; }
    /// The `dtype` of the elements when `descr` is one (uint8, or int64, float16, float32 in
    /// this machine's byte order): what `tensor`, DLPack and the CUDA module take.
    CONVEYOR_DECL std::optional<dtype> type() const noexcept;
};

/** One field of a batch's items: `stacked` when its values stack, else `values`, one per
    item in batch order.

    Values stack when every item's is (webdataset's `default_collation_fn`, with lists
    where it would fail):
    - an integer: an int64 tensor of shape {n};
    - a NumPy array of one descr, shape and order: a tensor of shape {n, ...shape};
    - an image of one height, width and channels: a uint8 tensor of shape {n, h, w, c}.
    Anything else (text, JSON, bytes, arrays or images of differing shapes, values of
    mixed kinds, objects) is a list.

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe.
*/
struct batch_column {
    std::string name;                      ///< the field as asked (`"txt"`, `"jpg;png"`, `"__key__"`)
    std::optional<stacked_tensor> stacked; ///< the values, stacked
    std::vector<field_value> values;       ///< the values, when not stacked

    /// Items in the column.
    std::size_t size() const noexcept
    {
        return stacked ? (stacked->shape.empty() ? 0 : static_cast<std::size_t>(stacked->shape.front())) : values.size();
    }
};

/// The column called `name` of `values` (one per item, in batch order), stacked where the
/// rules of `batch_column` stack them.
CONVEYOR_DECL batch_column collate_column(std::string name, std::vector<field_value> values);

/** N decoded samples collated into columns: what `collate_fields` hands on.

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe.
*/
struct sample_batch {
    /// The items' keys, in batch order.
    std::vector<std::string> keys;
    /// Each item's place, for resume (`conveyor::progress::consumed`).
    std::vector<conveyor::sample_id> ids;
    /// One per field asked for, in that order.
    std::vector<batch_column> columns;
    /// The position of this batch in the run (0, 1, 2, ...).
    std::uint64_t index = 0;

    std::size_t size() const noexcept { return keys.size(); }
    /// The column called `name` (as asked), or null.
    CONVEYOR_DECL const batch_column* column(std::string_view name) const noexcept;
};

/// How `collate_fields` makes its batches.
struct collate_fields_options {
    /** The columns, by field name: each may be alternatives (`"jpg;png"`: the first the
        sample has), or `"__key__"` or `"__url__"` (the sample's key and shard, as text).
        Empty: every field of the run's first sample, in its order. */
    std::vector<std::string> fields;
    /// Deliver a last batch of fewer items (true) or drop it (false).
    bool partial = true;
    /// Batches waiting between this stage and the next.
    std::size_t capacity = 4;
    /// A sample without a field asked for fails the run (`errc::missing_field`, naming the
    /// fields it has), or is skipped, counted and logged, the next sample taking its place.
    on_error errors = on_error::fail;
};

/** The `collate_fields` stage; see `conveyor::image::collate_fields`.

    @par Thread Safety
    Distinct objects: safe. Shared objects: safe (immutable once built).
*/
class collate_fields_stage {
public:
    CONVEYOR_DECL collate_fields_stage(std::size_t n, collate_fields_options o);

    CONVEYOR_DECL stream<sample_batch> operator()(const std::shared_ptr<run_context>& ctx, stream<decoded_sample> in) const;

    std::size_t size() const noexcept { return n_; }
    const collate_fields_options& options() const noexcept { return *o_; }

private:
    std::size_t n_;
    std::shared_ptr<const collate_fields_options> o_;
};

/** Collates decoded samples (`decode_fields`) into `sample_batch`es of `n`: a column per
    field of `o.fields`, stacked where the values stack (see `batch_column`), the columns
    made on the compute pool. For datasets whose samples have no image to batch, or whose
    images differ in size; `decode_batches` (with `decode_image_options::extra_fields`)
    batches an image with other fields.

    @code
    auto pipe = conveyor::shard::shards("/data/shard-{000000..000099}.tar")
              | conveyor::image::decode_fields()
              | conveyor::image::collate_fields(64, {.fields = {"npy", "cls", "json"}});
    for (auto& b : pipe) train_step(*b.column("npy")->stacked, *b.column("cls")->stacked);
    @endcode
*/
inline collate_fields_stage collate_fields(std::size_t n, collate_fields_options o = {})
{
    return collate_fields_stage(n, std::move(o));
}

namespace detail {

/** The value of field spec `spec` (see `collate_fields_options::fields`) in `s`, moved out
    of it; `errc::missing_field` naming the fields it has when it has none of them. */
CONVEYOR_DECL field_value take_value(decoded_sample& s, std::string_view spec);

/// The columns named `names` of `rows` (one row per item, a value per name in each).
CONVEYOR_DECL std::vector<batch_column> columns_of(std::span<const std::string> names, std::vector<std::vector<field_value>> rows);

} // namespace detail

} // namespace conveyor::image

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/impl/columns.ipp>
#endif

#endif
