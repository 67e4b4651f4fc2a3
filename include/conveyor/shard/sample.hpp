// conveyor/shard/sample.hpp — one sample of a shard: its key, where it came from, its fields.
#ifndef CONVEYOR_SHARD_SAMPLE_HPP
#define CONVEYOR_SHARD_SAMPLE_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/order.hpp>
#include <conveyor/core/slice.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/shard/detail/sample_name.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor::shard {

/// One member of a sample: `name` is the field (`jpg`, `cls`, `seg.png`), `data` its bytes,
/// a zero-copy view into the shard's chunk where the member lay inside one chunk.
struct field {
    std::string name;
    slice data;
    std::uint64_t offset = 0; ///< byte offset of the member's data in the (uncompressed) shard
    /** A value a user's stage put in the sample that is not bytes (a binding's object: a
        Python value returned by a `map`), carried through the library's stages as it is;
        `data` is then empty. Decoders pass it through; only its maker knows what it is. */
    std::shared_ptr<const void> object;
};

/** The run of consecutive tar members sharing a key (webdataset's rule: the member's path
    up to the first dot of its basename; the rest is the field name).
    `key` and `origin` are webdataset's `__key__` and `__url__`. */
struct sample {
    std::string key;              ///< `__key__`, e.g. "train/n01440764_10026"
    std::string origin;           ///< `__url__`: where it came from, the shard's URL
    std::vector<field> fields;    ///< in the order of the members in the shard
    std::uint64_t offset = 0;     ///< byte offset of the first member's header in the shard
    std::uint64_t end = 0;        ///< byte offset just past its last member (and padding)
    std::uint64_t shard = 0;      ///< index of the shard in the run's shard list
    std::uint64_t index = 0;      ///< position of the sample in its shard (0, 1, ...)
    /// Position of the shard in the epoch's work list (see core/order.hpp); what resume
    /// state is kept by, since a padded epoch may read one shard twice.
    std::uint64_t work = 0;
    /// The sample is a whole unit of a list source (a file or an S3 object made a sample):
    /// its id is the unit's (`sample_id::whole`), not a place inside a shard.
    bool whole = false;
    /// The index of its source and the pass over it, set by `mix` (see `sample_id`).
    std::uint32_t source = 0;
    std::uint64_t pass = 0;

    /// The field called `name`, or null.
    const field* find(std::string_view name) const noexcept
    {
        for (const auto& f : fields)
            if (f.name == name) return &f;
        return nullptr;
    }
};

/** Copies the fields of `s` that are small views of larger storage (a member in its
    chunk) into storage of their own, so that holding `s` for long (a shuffle buffer) does
    not keep whole chunks alive. Called by `conveyor::shuffle` on the samples it holds. */
inline void compact_for_holding(sample& s)
{
    for (auto& f : s.fields)
        if (f.data.storage_size() > f.data.size() + f.data.size() / 4) f.data = f.data.compact();
}

/** File or object `b` as a sample, as webdataset names a loose file: `key` its key up to
    the first dot of the base name (`n01440764/img_0001`), one field named by the rest,
    lower-cased (`jpeg`; `bin` when the name has none) holding the bytes (no copy), and a
    `cls` field with the label in decimal when the source gave one (`b.label >= 0`).
    `origin` is the path or URL; the sample is its whole unit (`whole`), its id `b`'s. */
inline sample sample_of(blob b)
{
    sample s;
    std::string field = "bin";
    if (const auto n = detail::split_sample_name(b.key)) {
        s.key = std::string(n->key);
        field.assign(n->field);
        for (char& c : field)
            if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    } else {
        s.key = b.key;
    }
    s.origin = std::move(b.origin);
    s.fields.push_back({.name = std::move(field), .data = slice(std::move(b.data))});
    if (b.label >= 0) s.fields.push_back({.name = "cls", .data = slice(buffer::copy_of(std::to_string(b.label)))});
    s.shard = b.index;
    s.work = b.work;
    s.source = b.source;
    s.pass = b.pass;
    s.whole = true;
    return s;
}

/// The id of `s` for resume (`progress::consumed`).
inline sample_id id_of(const sample& s) noexcept
{
    return {.work = s.work, .shard = s.shard, .index = s.index, .end = s.end, .pass = s.pass, .source = s.source, .whole = s.whole};
}

} // namespace conveyor::shard

#endif
