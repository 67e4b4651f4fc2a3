// conveyor/image/labels.hpp — labels that are not a `cls` field: an integer inside a JSON
// field of a shard sample, and validation map files (`{"0": 490, "1": 361, ...}`).
#ifndef CONVEYOR_IMAGE_LABELS_HPP
#define CONVEYOR_IMAGE_LABELS_HPP

#include <conveyor/detail/config.hpp>
#include <conveyor/image/error.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace conveyor::image {

/** Where a shard sample's label lies inside one of its JSON fields (webdataset's `json`).

    `path` names the value:
    - dotted keys, `"label"` or `"annotations.class"`; where the value reached is an
      array, a decimal component indexes it (`"boxes.0.cls"`);
    - or, when it starts with `/`, a JSON Pointer (RFC 6901: `"/annotations/class"`), for
      keys that hold dots;
    - empty: the document itself is the label (`7`).

    The value must be a JSON integer (`3`; not `3.0`, `"3"` or `true`) that fits in 64
    signed bits.

    @code
    image::decode_image({.label_json = {"json", "annotations.class"}});
    @endcode
*/
struct json_label {
    std::string field; ///< the field holding the JSON document ("json"); empty: not used
    std::string path;  ///< the key path of the label within it (see above)
};

/** Class ids by index or by key, from a validation map file: a JSON object whose names are
    either all dataset indices in decimal (`{"0": 490, "1": 361, ...}`, the seeds' format:
    the n-th image of the validation set in sorted order, counted from 0) or item keys
    (`{"ILSVRC2012_val_00000001": 65, ...}`), and whose values are integer class ids.

    A map is "indexed" when every name is a decimal number as JSON would write one (no
    sign, no leading zero but in "0"); then `find(std::uint64_t)` looks entries up by
    number. `find(std::string_view)` looks names up as written, in either kind.

    @par Thread Safety
    Distinct objects: safe. Shared objects: safe (immutable once made).
*/
class label_map {
public:
    label_map() = default;

    /// The class of entry `index`, if an indexed map has one.
    std::optional<std::int64_t> find(std::uint64_t index) const
    {
        const auto it = by_index_.find(index);
        if (it == by_index_.end()) return std::nullopt;
        return it->second;
    }

    /// The class of the entry named `name` (as written in the file), if there is one.
    std::optional<std::int64_t> find(std::string_view name) const
    {
        const auto it = by_name_.find(name);
        if (it == by_name_.end()) return std::nullopt;
        return it->second;
    }

    /// True if every name is a decimal index (the seeds' format).
    bool indexed() const noexcept { return indexed_; }
    /// Entries in the map.
    std::size_t size() const noexcept { return by_name_.size(); }
    bool empty() const noexcept { return by_name_.empty(); }
    /// Where the map came from (a path, or what `parse_label_map` was told), for errors.
    const std::string& source() const noexcept { return source_; }

    /** Adds an entry (for maps built in code); throws `errc::bad_label` if `name` is
        already there. Keeps `indexed()` true only while every name is a decimal index. */
    CONVEYOR_DECL void insert(std::string name, std::int64_t label);

    /// A map whose errors say it came from `source`.
    explicit label_map(std::string source) : source_(std::move(source)) {}

private:
    std::map<std::string, std::int64_t, std::less<>> by_name_;
    std::unordered_map<std::uint64_t, std::int64_t> by_index_;
    bool indexed_ = true;
    std::string source_;
};

/** Parses a validation map from `text` (see `label_map`); `source` names it in errors.
    Throws `conveyor::error` with `errc::bad_label` and `where() == source`, saying at which
    line and column the JSON is malformed, or which entry is not an integer, is named
    twice or has an empty name; the top level must be an object. */
CONVEYOR_DECL std::shared_ptr<const label_map> parse_label_map(std::string_view text, std::string_view source = "label map");

/** Reads a validation map file (see `label_map` and `parse_label_map`). A file that cannot
    be read is a `conveyor::error` with the system's error code, naming the path; so is one
    larger than `detail::default_max_index_bytes` (`std::errc::file_too_large`), refused
    before it is read. */
CONVEYOR_DECL std::shared_ptr<const label_map> load_label_map(const std::filesystem::path& path);

/// Which entry of a label map an item takes (`label_map_options::by`).
enum class label_lookup {
    /** A map that is not indexed: `key`. An indexed one: `position` for files and
        `key_number` for shard samples (whose `index` counts within one shard only, so
        that the dataset position of a sample is not known; the number in its key is,
        whatever the sharding and order). */
    automatic,
    /** The item's position in its dataset: a file's index in its listing (`blob::index`;
        ImageNet's validation directory, sorted, gives entry "0" to
        ILSVRC2012_val_00000001). Shard samples are refused (see `automatic`). */
    position,
    /** The number in the item's key: the last run of decimal digits in the key's stem
        (its last path component up to the first dot: "val/ILSVRC2012_val_00000007" and
        "n01440764/ILSVRC2012_val_00000007.JPEG" both give 7), less `first_number`. */
    key_number,
    /// The entry named by the item's key as it is, or failing that by the key's stem.
    key,
};

/** Labels from a validation map (`decode_image_options::label_map`).

    @code
    // ImageNet validation shards with keys ILSVRC2012_val_00000001..., labels from a map file:
    image::decode_image({.label_map = {.map = image::load_label_map("val_map.json"), .first_number = 1}});
    @endcode
*/
struct label_map_options {
    /// The map; null: labels come from elsewhere (`label_field`, `label_json`, the source).
    std::shared_ptr<const label_map> map;
    /// How an item finds its entry.
    label_lookup by = label_lookup::automatic;
    /** For `key_number` (and `automatic` on shard samples with an indexed map): the key
        number of entry "0". ImageNet numbers its validation images from 1
        (ILSVRC2012_val_00000001 is entry "0"): 1; keys counted from 0: 0. There is no
        default, since either guess would be silently off by one for the other kind of
        dataset: a lookup by key number without it is `errc::bad_options`. */
    std::optional<std::uint64_t> first_number;
};

namespace detail {

/** The label in JSON document `text` at `l.path` (see `json_label`), for sample `key` of
    shard `where`: `errc::bad_label` if the document is not JSON or the value is not an
    integer, `errc::missing_field` if the path leads nowhere (saying how far it got). */
CONVEYOR_DECL std::int64_t json_label_of(std::string_view text, const json_label& l, std::string_view key, std::string_view where);

/// Line and column (from 1) of byte `at` of `text`, for messages: "line 3, column 14".
CONVEYOR_DECL std::string line_and_column(std::string_view text, std::size_t at);

/// The stem of `key`: its last path component up to the first dot.
CONVEYOR_DECL std::string_view key_stem(std::string_view key) noexcept;

/// The last run of decimal digits in `key_stem(key)`, if any (and if it fits in 64 bits).
CONVEYOR_DECL std::optional<std::uint64_t> key_number(std::string_view key) noexcept;

/** The label `o.map` gives the item `key` of `where` at `position` (a file's listing
    index; null for a shard sample); `errc::bad_label` naming the item and the entry
    sought when the map has none, `errc::bad_options` when the lookup cannot apply. */
CONVEYOR_DECL std::int64_t map_label_of(const label_map_options& o, std::string_view key, std::string_view where,
                                        const std::uint64_t* position);

} // namespace detail

} // namespace conveyor::image

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/impl/labels.ipp>
#endif

#endif
