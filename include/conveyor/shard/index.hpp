// conveyor/shard/index.hpp — the dataset index that the shard writer writes: every shard,
// every sample and where its members lie, for random access and for shard lists.
//
// The JSON form (one file for the whole dataset):
//   {"format": "conveyor-shard-index", "version": 1,
//    "shards": [
//      {"url": "shard-000000.tar", "samples": 2, "bytes": 12288,
//       "entries": [
//         {"key": "n01440764_10026", "offset": 0, "size": 4608,
//          "fields": {"jpg": {"offset": 512, "size": 3412}, "cls": {"offset": 4096, "size": 1}}},
//         ...]}]}
// `url` is as written to the shard list: an absolute path or URL, or a path relative to
// the index file's folder. An entry's `offset` is the byte offset of its first member's
// header, `size` runs to the end of its last member's padding; a field's `offset` is
// where its data start, `size` its length.
#ifndef CONVEYOR_SHARD_INDEX_HPP
#define CONVEYOR_SHARD_INDEX_HPP

#include <conveyor/detail/config.hpp>

#include <cstdint>
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

} // namespace conveyor::shard

#endif
