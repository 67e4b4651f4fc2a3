// conveyor/image/stage.hpp — the decode_image pipeline stage: shard samples or file blobs to decoded images.
#ifndef CONVEYOR_IMAGE_STAGE_HPP
#define CONVEYOR_IMAGE_STAGE_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/stages.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/image/decode.hpp>
#include <conveyor/image/fields.hpp>
#include <conveyor/image/labels.hpp>
#include <conveyor/shard/sample.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace conveyor::image {

/// What `decode_image` hands on: one decoded image with its label and where it came from.
struct decoded {
    std::string key;           ///< the sample key (shards) or the file's key (files)
    std::string origin;        ///< where it came from: the shard URL or the file's path
    decoded_image image;       ///< the pixels, HWC uint8
    std::int64_t label = -1;   ///< class id (`cls`, a JSON field, a label map, the ImageFolder class), -1 if none
    std::uint64_t index = 0;   ///< the sample's position in its shard, or the file's in its listing
    /// The values of `decode_image_options::extra_fields`, in that order, named as there.
    std::vector<named_value> extras;
};

/** How each item's image is picked, labelled and decoded: the settings of `decode_image`
    and of the batch stages (`decode_batches`, `cuda::decode_batches`), each of which uses
    every field. How `decode_image` hands its images on is `decoded_queue_options`. */
struct decode_image_options {
    /// How each image is decoded and augmented.
    decode_options decode;
    /// Shard samples: the image is the first of these fields that the sample has
    /// (webdataset's `to_tuple("jpg;jpeg;png;webp;avif", ...)`). The format is told from
    /// the bytes, whatever the field's name.
    std::vector<std::string> fields{"jpg", "jpeg", "png", "webp", "avif"};
    /// Shard samples: the field holding the label as decimal text (webdataset's `cls`);
    /// empty: no label (-1). A sample without it, or with anything but an integer in it,
    /// is an error (`errc::missing_field`, `errc::bad_label`). File blobs take the
    /// label their source gives (the ImageFolder class, an S3 listing's prefix class),
    /// whatever this says. Not used when `label_json` or `label_map` gives labels.
    std::string label_field = "cls";
    /// Shard samples: the label is an integer in a JSON field instead (`{"json",
    /// "annotations.class"}`; see `json_label`), when `label_json.field` is not empty.
    /// A sample without the field or the key is `errc::missing_field`; a value that is not
    /// an integer, or a field that is not JSON, `errc::bad_label`. File blobs: not used.
    json_label label_json;
    /// Labels from a validation map instead, for shard samples and file blobs alike, when
    /// `label_map.map` is set (see `label_map_options`, `load_label_map`): it comes
    /// before `label_json`, `label_field` and the source's label. An item the map has no
    /// entry for is `errc::bad_label`.
    label_map_options label_map;
    /// Images decoded at once on the compute pool. 0: twice its threads.
    std::size_t concurrency = 0;
    /// A bad image fails the pipeline, or is skipped, counted and logged.
    on_error errors = on_error::fail;
    /// Counters to add to (images decoded, warnings tolerated); null: the stage's own,
    /// readable through `decode_image_stage::stats()`.
    std::shared_ptr<decode_stats> stats;
    /** Other fields to hand on with each image, decoded by the field decoders
        (`decode_field`, with `extra_decode`): the batch stages' `image_batch::columns`,
        `decode_image`'s `decoded::extras`. Each is a field name (`"txt"`, `"seg.png"`),
        or alternatives (`"json;jsn"`: the first the sample has), or `"__key__"` or
        `"__url__"` (the key and the shard URL or path, as text). File blobs have `cls`
        (their source's label, when it has one) besides those two. An item without one
        of them is `errc::missing_field`, failed or skipped as `errors` says. */
    std::vector<std::string> extra_fields;
    /// How the extra fields are decoded (`decode_field`'s options).
    field_options extra_decode;
};

/// How `decode_image` hands its decoded images on (the batch stages have `collate_options`).
struct decoded_queue_options {
    /// Keep input order (true) or hand images on as they are done (false).
    bool ordered = true;
    /// Images waiting between this stage and the next.
    std::size_t capacity = default_stream_capacity;
};

/** The encoded image of one item, and what goes with it: for stages that decode into
    memory of their own (a batch slab, with `decoder::decode_into`) and pick the image and
    label as `decode_image` does. Views into the item, valid while it lives. */
struct encoded_image {
    std::span<const std::byte> bytes; ///< the encoded image (JPEG, PNG, WebP, AVIF)
    std::string_view key;             ///< sample or file key (the augmentation's key)
    std::string_view origin;          ///< where it came from: shard URL or file path (for errors)
    std::int64_t label = -1;          ///< class id, or -1
    std::uint64_t index = 0;          ///< position in the shard or listing
};

/** The image field of shard sample `s` (the first of `o.fields` present) and its label
    (from `o.label_map`, else `o.label_json`, else `o.label_field`); throws
    `errc::missing_field` or `errc::bad_label` naming the sample. */
CONVEYOR_DECL encoded_image encoded_image_of(const shard::sample& s, const decode_image_options& o);

/// File blob `b` with the label its source gave, or `o.label_map`'s for it.
CONVEYOR_DECL encoded_image encoded_image_of(const blob& b, const decode_image_options& o);

/// What identifies an item for resume (`image_batch::ids`, for `progress::consumed`): a
/// shard sample's place in the epoch; a blob is its whole unit at its place in the epoch.
inline conveyor::sample_id item_id(const shard::sample& s) noexcept
{
    return shard::id_of(s);
}
inline conveyor::sample_id item_id(const blob& b) noexcept
{
    return conveyor::id_of(b);
}

namespace detail {

/// The label of `text` (`parse_decimal`'s rule), for sample `key` of `where`; `errc::bad_label` if none.
CONVEYOR_DECL std::int64_t parse_label(std::string_view text, std::string_view field, std::string_view key, std::string_view where);

/// Decodes what `encoded_image_of(item)` picks into a new `decoded`.
CONVEYOR_DECL decoded decode_item(const decoder& dec, const decode_image_options& o, const encoded_image& e, std::uint64_t epoch);

/// Throws `errc::bad_options` (naming `stage`) when `o.extra_fields` or `o.extra_decode` cannot be used.
CONVEYOR_DECL void check_extra_fields(const decode_image_options& o, std::string_view stage);

/** The values of `o.extra_fields` in shard sample `s` (or file blob `b`), in that order,
    decoded with `o.extra_decode` and `dec` in epoch `epoch`; `errc::missing_field` for a
    field the item lacks, the decoders' errors for one that does not decode. */
CONVEYOR_DECL std::vector<field_value> extra_values(const shard::sample& s, const decode_image_options& o, const decoder& dec,
                                                    std::uint64_t epoch);
CONVEYOR_DECL std::vector<field_value> extra_values(const blob& b, const decode_image_options& o, const decoder& dec, std::uint64_t epoch);

} // namespace detail

/** The `decode_image` stage; see `conveyor::image::decode_image`.

    @par Thread Safety
    Distinct objects: safe. Shared objects: safe (it is immutable once built; its counters
    are atomic).
*/
class decode_image_stage {
public:
    CONVEYOR_DECL explicit decode_image_stage(decode_image_options o, decoded_queue_options q = {});

    template <class T>
        requires(std::is_same_v<T, shard::sample> || std::is_same_v<T, blob>)
    stream<decoded> operator()(const std::shared_ptr<run_context>& ctx, stream<T> in) const
    {
        const std::uint64_t epoch = ctx->epoch();
        const std::size_t threads = std::max<std::size_t>(ctx->rt().options().compute_threads, 1);
        auto f = [o = o_, dec = decoder(ctx->rt().buffers()), epoch](T item) -> decoded {
            std::vector<field_value> extras;
            if (!o->extra_fields.empty()) extras = detail::extra_values(item, *o, dec, epoch);
            decoded d = detail::decode_item(dec, *o, encoded_image_of(item, *o), epoch);
            for (std::size_t i = 0; i < extras.size(); ++i) d.extras.push_back({o->extra_fields[i], std::move(extras[i])});
            return d;
        };
        return conveyor::map(std::move(f), {.concurrency = o_->concurrency ? o_->concurrency : 2 * threads,
                                            .ordered = q_.ordered,
                                            .where = run_on::compute,
                                            .errors = o_->errors,
                                            .capacity = q_.capacity,
                                            .name = "decode_image"})(ctx, std::move(in));
    }

    /// The counters this stage adds to.
    const std::shared_ptr<decode_stats>& stats() const noexcept { return o_->stats; }
    const decode_image_options& options() const noexcept { return *o_; }

private:
    std::shared_ptr<const decode_image_options> o_;
    decoded_queue_options q_;
};

/** Decodes JPEG and PNG images on the runtime's compute pool: a stage on shard samples
    (`shard::sample`: the first present of `fields`, the label from `label_field`) or on
    file blobs (`blob`: the label from the file source, e.g. the ImageFolder class), giving
    `decoded` items (pixels in the runtime's buffer pool, label, key).

    Randomness (crop, flip) is a pure function of (`decode.seed`, the run's epoch, the
    key), so each epoch augments differently and every run of an epoch alike.

    @code
    auto pipe = conveyor::shard::shards("/data/shard-{000000..000146}.tar")
              | conveyor::image::decode_image({.decode = {.size = {224, 224},
                                                           .crop = conveyor::image::crop_mode::random_resized,
                                                           .flip = 0.5, .seed = 7},
                                               .errors = conveyor::on_error::skip});
    for (auto& d : pipe) train_on(d.image, d.label);
    @endcode
*/
inline decode_image_stage decode_image(decode_image_options o = {}, decoded_queue_options q = {})
{
    return decode_image_stage(std::move(o), q);
}

} // namespace conveyor::image

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/impl/stage.ipp>
#endif

#endif
