// conveyor/shard/index.hpp — the dataset index that the shard writer writes: every shard,
// every sample and where its members lie, for random access and for shard lists.
//
// The JSON form (one file for the whole dataset):
//   {"format": "conveyor-shard-index", "version": 1,
//    "shards": [
//      {"url": "shard-000000.tar", "samples": 2, "bytes": 12288,
//       "entries": [
//         {"key": "n01440764_10026", "offset": 0, "size": 5120,
//          "fields": {"jpg": {"offset": 512, "size": 3412}, "cls": {"offset": 4608, "size": 1}}},
//         ...]}]}
// `url` is as written to the shard list: an absolute path or URL, or a path relative to
// the index file's folder. An entry's `offset` is the byte offset of its first member's
// header, `size` runs to the end of its last member's padding; a field's `offset` is
// where its data start, `size` its length.
#ifndef CONVEYOR_SHARD_INDEX_HPP
#define CONVEYOR_SHARD_INDEX_HPP

#include <conveyor/core/detail/read_file.hpp>
#include <conveyor/detail/config.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor::shard {

/// Where one member's data lie in its shard.
struct member_extent {
    std::string name;         ///< the field: "jpg", "cls"
    std::uint64_t offset = 0; ///< first byte of the data
    std::uint64_t size = 0;   ///< bytes of data
};

/// One sample of a shard.
struct index_entry {
    std::string key;
    std::uint64_t offset = 0;            ///< the first member's header
    std::uint64_t size = 0;              ///< through the last member's padding
    std::vector<member_extent> fields;   ///< in member order
};

/// One shard.
struct index_shard {
    std::string url;                     ///< as stored in the file (maybe relative)
    std::uint64_t samples = 0;
    std::uint64_t bytes = 0;             ///< the shard's size
    std::vector<index_entry> entries;
};

/// The whole dataset.
struct dataset_index {
    std::vector<index_shard> shards;
};

/** Parses a dataset index in the JSON form above. `base` is where the text came from (the
    index file's path or URL): errors name it; shard URLs are kept as stored (relative
    ones are relative to `base`'s folder: resolving them is the reader's business).

    Everything is checked, so that random access can trust the offsets: the format and
    version; each shard's `url` (a non-empty string without control characters), `samples`
    (equal to the number of entries), `bytes`; each entry's `key` (non-empty), `offset` and
    `size` (a whole number of 512-byte blocks from a block boundary, inside the shard, after
    the previous entry); each field's `offset` and `size` (inside its entry, after its
    header). Numbers are non-negative integers. Unknown members are ignored (later versions
    may add some).
    @throws conveyor::error (`std::errc::invalid_argument`, stage "shard index") whose
    `where()` is `base` and whose detail names the JSON path of the bad value and says what
    is wrong: `shards[3].entries[17].fields.jpg.offset: expected a non-negative integer`.
    Text that is not JSON says where it stops being JSON. */
CONVEYOR_DECL dataset_index parse_index(std::string_view json, std::string base);

/// Reads and parses the dataset index in `path` (see `parse_index`); errors name `path`.
/// A file of more than `max_bytes` is refused before it is read (`std::errc::file_too_large`).
CONVEYOR_DECL dataset_index read_index(const std::filesystem::path& path,
                                       std::uint64_t max_bytes = conveyor::detail::default_max_index_bytes);

/// The JSON form of `index` (one line per shard, so that a large index stays diffable).
CONVEYOR_DECL std::string to_json(const dataset_index& index);

/** Writes `index` to `path` atomically: a temporary file in the same folder, renamed
    over `path` once complete. Throws `conveyor::error` naming the path when it cannot. */
CONVEYOR_DECL void write_index(const std::filesystem::path& path, const dataset_index& index);

} // namespace conveyor::shard

#if CONVEYOR_HEADER_ONLY
#include <conveyor/shard/impl/index.ipp>
#endif

#endif
