// conveyor/shard/tar_options.hpp — how tar shards are read: the tar rules, the limits on
// outside input and webdataset's grouping that a reader of shards may adjust.
#ifndef CONVEYOR_SHARD_TAR_OPTIONS_HPP
#define CONVEYOR_SHARD_TAR_OPTIONS_HPP

#include <conveyor/core/buffer.hpp>

#include <cstddef>
#include <cstdint>

namespace conveyor::shard {

/** How shards are read (tar rules, limits, and webdataset's grouping); see `untar.hpp` for
    the rules these settings adjust. */
struct tar_options {
    /// The input must end with the end-of-archive marker (two zero blocks, or one at the
    /// very end of the input). GNU tar, bsdtar and Python's tarfile also accept an archive
    /// that simply stops after a member's padding; so does this reader when false. True by
    /// default: a shard cut short exactly at a block boundary looks just like that.
    bool require_end_of_archive = true;
    /// The largest member whose bytes may be gathered into one buffer when they span chunks
    /// (a member inside one chunk costs nothing and is not limited). Larger: an error.
    std::uint64_t max_member_size = std::uint64_t{1} << 30;
    /// The largest pax extended header or GNU long name/link member.
    std::size_t max_metadata_size = std::size_t{1} << 20;
    /// Field names lower-cased, as webdataset does by default (`group_by_keys(lcase=True)`).
    bool lowercase_fields = true;
    /// Where the buffers for members that span chunks (and for inflated data) come from;
    /// null: a pool private to the library.
    buffer_pool* pool = nullptr;
};

} // namespace conveyor::shard

#endif
