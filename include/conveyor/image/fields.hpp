// conveyor/image/fields.hpp — a sample's fields decoded into values by the name of each field,
// as webdataset's default decoders do (text, integers, JSON, NumPy arrays, images), or by
// decoders of the user's own; and the decode_fields stage.
#ifndef CONVEYOR_IMAGE_FIELDS_HPP
#define CONVEYOR_IMAGE_FIELDS_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/order.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/slice.hpp>
#include <conveyor/core/stages/map.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/image/decode.hpp>
#include <conveyor/image/npy.hpp>
#include <conveyor/shard/sample.hpp>

#include <boost/json/value.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

namespace conveyor::image {

/// A field that is not bytes (`shard::field::object`: a binding's value that a user's stage
/// put in the sample), handed on as it is: only its maker knows what it is.
struct object_value {
    std::shared_ptr<const void> object;
};

/** The value of one decoded field:
    - `std::monostate`: none (what a user decoder returns to hand a field on, see
      `field_options`);
    - `slice`: the bytes as they are (a field no decoder reads), no copy;
    - `std::int64_t`: an integer (`cls`);
    - `std::string`: UTF-8 text (`txt`);
    - `boost::json::value`: a JSON document (`json`);
    - `array_value`: a NumPy array (`npy`), its elements a view into the bytes;
    - `decoded_image`: an image's pixels, HWC uint8 (`jpg`, `png`, ...);
    - `object_value`: a value that was not bytes to begin with, passed through. */
using field_value = std::variant<std::monostate, slice, std::int64_t, std::string, boost::json::value, array_value, decoded_image,
                                 object_value>;

/// A decoded field and its name (`"jpg"`, `"seg.png"`).
struct named_value {
    std::string name;
    field_value value;
};

/** A shard sample with its fields decoded: what `decode_fields` hands on.

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe.
*/
struct decoded_sample {
    std::string key;                 ///< `__key__`
    std::string origin;              ///< `__url__`: the shard's URL (a file's path)
    std::vector<named_value> fields; ///< in the sample's order
    conveyor::sample_id id;          ///< its place, for resume (`progress::consumed`)

    /// The value of the field called `name`, or null.
    CONVEYOR_DECL const field_value* find(std::string_view name) const noexcept;
    CONVEYOR_DECL field_value* find(std::string_view name) noexcept;
};

/// Where a field is being decoded: what a field decoder (the built-in ones and the user's)
/// is given beside the field. Views, valid during the call.
struct field_context {
    std::string_view key;                   ///< the sample's key
    std::string_view origin;                ///< the shard's URL (a file's path)
    std::uint64_t epoch = 0;                ///< the run's epoch (random crops and flips are drawn from it)
    const decode_options* image = nullptr;  ///< how images are decoded (null: the field options' `image`)
    const image::decoder* decoder = nullptr; ///< the image decoder (null: one of the process's own)
    decode_stats* stats = nullptr;          ///< counters the image decoder adds to, or null
};

/** A decoder of one field: its value from the field's bytes (`f.data`) and where it is
    (`c`). Returning `std::monostate` hands the field on to the next decoder in line (see
    `field_options`), as a webdataset handler that returns None does. What it throws fails
    the sample, as the built-in decoders' errors do, named by key, field and shard. May be
    called from any compute thread at once. */
using field_decoder = std::function<field_value(const shard::field& f, const field_context& c)>;

/// What the built-in decoder of a field's extension makes.
enum class field_kind {
    bytes,   ///< none reads it: the bytes as they are
    integer, ///< `cls cls2 index inx id`: decimal text to `std::int64_t`
    text,    ///< `txt text transcript`: UTF-8 text to `std::string`
    json,    ///< `json jsn`: a JSON document to `boost::json::value`
    array,   ///< `npy`: a NumPy array to `array_value`
    image,   ///< `jpg jpeg jpe jfif png webp avif` (any case): an image to `decoded_image`
};

/// The last extension of field name `name`, the part after its last dot (`seg.png` → `png`;
/// `cls` → `cls`): what picks a field's decoder, as in webdataset.
CONVEYOR_DECL std::string_view field_extension(std::string_view name) noexcept;

/** What the built-in decoders make of field `name`, by its last extension: webdataset's
    default decoders (`autodecode.basichandlers`, compared with case), and for images the
    extensions of the formats the image decoder reads (compared without case, as
    webdataset's image handler compares them). */
CONVEYOR_DECL field_kind default_field_kind(std::string_view name) noexcept;

/** How the fields of a sample are decoded.

    A field's decoder is, in this order: a user decoder for its whole name (`by_name`,
    `"seg.png"`), one for its last extension (`by_extension`, `"png"`, compared without
    case), then the built-in one of its extension (`default_field_kind`). A user decoder
    that returns `std::monostate` hands the field on to the next. A field outside `only`
    (when `only` is not empty) keeps its bytes, whatever decoder it has; so does a field
    no decoder reads. A field whose `object` is set is handed on as an `object_value`, no
    decoder called. */
struct field_options {
    /// Decoders by whole field name, tried first.
    std::map<std::string, field_decoder, std::less<>> by_name;
    /// Decoders by last extension (keys without the dot), tried next.
    std::map<std::string, field_decoder, std::less<>> by_extension;
    /// How image fields are decoded: the whole image as it is by default; crops, resizes
    /// and flips as `decode_image` takes them (random ones drawn from (seed, epoch, key), so
    /// two fields of one sample given the same options get the same crop).
    decode_options image;
    /// The fields to decode, by whole name; empty: all.
    std::vector<std::string> only;
    /// JSON fields: the longest document read, in bytes, and the deepest nesting.
    std::size_t max_json_bytes = std::size_t{64} << 20;
    std::size_t max_json_depth = 256;
    /// NumPy fields: the longest header read (see `npy_limits`).
    std::size_t max_npy_header_bytes = npy_limits{}.max_header_bytes;
};

/** The value of field `f` of the sample `c` names, decoded as `o` says (see
    `field_options`):
    - integers: decimal text with an optional sign, white space around it allowed
      (Python's `int()` of webdataset's `cls`); anything else is `errc::bad_label`;
    - text: UTF-8 (Python's strict decode: no overlong forms, surrogates or code points
      past U+10FFFF), a byte order mark kept; else `errc::bad_field` at the first bad byte;
    - JSON: RFC 8259 (a UTF-8 byte order mark allowed, as Python's `json.loads` of bytes
      allows it; no NaN or Infinity); a document that does not parse, or is longer than
      `max_json_bytes`, or nested deeper than `max_json_depth`, is `errc::bad_field`
      with the byte, line and column where it fails;
    - NumPy arrays: `read_npy`, its errors `errc::bad_field`;
    - images: `c.decoder->decode` with `o.image`, its errors the image decoder's.
    Every error is a `conveyor::error` naming the sample's key, the shard, the field and its
    decoder. A user decoder's exception that is not a `conveyor::error` becomes
    `errc::field_decoder_failed`, the original nested in it (`std::rethrow_if_nested`). */
CONVEYOR_DECL field_value decode_field(const shard::field& f, const field_context& c, const field_options& o);

/// Every field of `s` decoded (`decode_field`), with `dec` for images, in epoch `epoch`.
CONVEYOR_DECL decoded_sample decode_sample(const shard::sample& s, const field_options& o, const decoder& dec, std::uint64_t epoch = 0,
                                           decode_stats* stats = nullptr);

/// How `decode_fields` runs and hands its samples on.
struct fields_queue_options {
    /// Samples decoded at once on the compute pool. 0: twice its threads.
    std::size_t concurrency = 0;
    /// Keep input order (true) or hand samples on as they are done (false).
    bool ordered = true;
    /// Samples waiting between this stage and the next.
    std::size_t capacity = default_stream_capacity;
    /// A sample with a field that does not decode fails the pipeline, or is skipped,
    /// counted and logged.
    on_error errors = on_error::fail;
};

/** The `decode_fields` stage; see `conveyor::image::decode_fields`.

    @par Thread Safety
    Distinct objects: safe. Shared objects: safe (immutable once built; its counters are
    atomic).
*/
class decode_fields_stage {
public:
    CONVEYOR_DECL explicit decode_fields_stage(field_options o, fields_queue_options q = {});

    template <class T>
        requires(std::is_same_v<T, shard::sample> || std::is_same_v<T, blob>)
    stream<decoded_sample> operator()(const std::shared_ptr<run_context>& ctx, stream<T> in) const;

    const field_options& options() const noexcept { return *o_; }
    /// The image decoder's counters (images decoded, warnings tolerated).
    const std::shared_ptr<decode_stats>& stats() const noexcept { return stats_; }

private:
    std::shared_ptr<const field_options> o_;
    fields_queue_options q_;
    std::shared_ptr<decode_stats> stats_;
};

/** Decodes every field of each sample on the runtime's compute pool (see `decode_field`
    for the rules): shard samples, or file blobs taken as webdataset takes a loose file
    (`shard::sample_of`: one field named by the file's extension, and `cls` when the source
    gives a label). Hands on `decoded_sample`s; `collate_fields` makes batches of them.

    @code
    auto pipe = conveyor::shard::shards("/data/shard-{000000..000099}.tar")
              | conveyor::image::decode_fields({.only = {"jpg", "json", "cls"}})
              | conveyor::image::collate_fields(32, {.fields = {"jpg", "json", "cls"}});
    @endcode
*/
inline decode_fields_stage decode_fields(field_options o = {}, fields_queue_options q = {})
{
    return decode_fields_stage(std::move(o), q);
}

namespace detail {

/** The integer `text` holds as Python's `int()` reads webdataset's `cls` fields: decimal
    digits with an optional sign (`-`, `+`), white space around them allowed; nothing if
    it is anything else or does not fit in 64 signed bits. */
CONVEYOR_DECL std::optional<std::int64_t> parse_decimal(std::string_view text) noexcept;

/// The alternatives of a field spec, webdataset's `"jpg;png"`: its parts between semicolons.
CONVEYOR_DECL std::vector<std::string_view> alternatives(std::string_view spec);

/// Why `o` cannot be used (a JSON depth of 0), or "".
CONVEYOR_DECL std::string field_options_problem(const field_options& o);

/// Why a field spec is not one (empty, or with an empty alternative), or "".
CONVEYOR_DECL std::string spec_problem(std::string_view spec);

/** The error of a sample (`key`, from `origin`) that has none of the fields of `spec`:
    `errc::missing_field`, naming the spec and the fields the sample has (`have`). */
CONVEYOR_DECL conveyor::error missing_field_error(std::string_view spec, std::string_view key, std::string_view origin,
                                                  const std::vector<std::string_view>& have);

} // namespace detail

} // namespace conveyor::image

#include <conveyor/image/impl/fields.hpp>

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/impl/fields.ipp>
#endif

#endif
