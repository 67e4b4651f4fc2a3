// conveyor/shard/error.hpp — error codes of the shard module (tar and gzip reading, grouping).
#ifndef CONVEYOR_SHARD_ERROR_HPP
#define CONVEYOR_SHARD_ERROR_HPP

#include <conveyor/detail/config.hpp>

#include <conveyor/core/error.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

namespace conveyor::shard {

/** Error codes of the shard module. Each comes to users inside a `conveyor::error` whose
    `where()` is the shard's URL and whose `offset()` is the byte offset of the problem in
    the shard's uncompressed stream (for a gzip-compressed shard the detail names the
    compressed offset too). */
enum class errc {
    /// A tar header's checksum does not match its bytes (summed unsigned or signed).
    bad_checksum = 1,
    /// A numeric field of a tar header (size, mode, uid, gid, mtime) is neither octal
    /// digits nor a base-256 number that fits in 63 bits.
    bad_number,
    /// A tar header gives a negative size (base-256 allows it; no archive means it).
    negative_size,
    /// The input ended inside a header, inside a member's data, or inside its padding.
    truncated,
    /// A member's size runs past the end of the archive, whose length was known before its
    /// data were read (a whole shard in memory, or a reader that knew the object's size).
    size_past_end,
    /// The input ended at a header boundary without the end-of-archive marker (two zero
    /// blocks, or one at the very end), which is what a shard cut short at a block
    /// boundary looks like. `tar_options::require_end_of_archive = false` accepts it.
    missing_end_of_archive,
    /// A zero block (the first half of the end-of-archive marker) is followed by a block
    /// that is neither zero nor the end of the input: data after the end would be lost.
    data_after_end_of_archive,
    /// A GNU long name or long link ('L'/'K' member) is not ended by a NUL within its data
    /// (GNU tar writes the name with its NUL and counts it in the size).
    unterminated_name,
    /// A pax extended header ('x' or 'g') holds a record that is not
    /// "<length> <key>=<value>\n", or a value that is invalid for its key (a path with a NUL,
    /// a size that is not a decimal number).
    bad_pax_record,
    /// A GNU sparse member ('S', or pax GNU.sparse.* records): its stored bytes are not the
    /// file's bytes, and reading them as such would be a misread.
    sparse_member,
    /// A member is larger than `tar_options::max_member_size` (its bytes would have to be
    /// gathered into one buffer of that size).
    member_too_large,
    /// A pax extended header or GNU long name is larger than `tar_options::max_metadata_size`.
    metadata_too_large,
    /// Two members of one sample have the same field (webdataset raises the same error).
    duplicate_field,
    /// The gzip stream is corrupt (bad header, bad deflate data, CRC or length mismatch),
    /// or non-zero bytes follow its last member.
    bad_gzip,
    /// The gzip stream ends in the middle of a member.
    truncated_gzip,
    /// A shard does not hold what its dataset index says (the shard was rewritten after
    /// the index was made): random access found another sample, or fewer bytes, there.
    index_mismatch,
};

/// The category of `conveyor::shard::errc`.
CONVEYOR_DECL const std::error_category& shard_category() noexcept;

/// Makes a `std::error_code` from a shard error value.
CONVEYOR_DECL std::error_code make_error_code(errc e) noexcept;

namespace detail {

/** The `conveyor::error` of a bad shard: `code` with the shard's `url` as `where`, the
    uncompressed byte `offset` where the problem is, and `detail` saying what it is. */
CONVEYOR_DECL conveyor::error shard_error(errc code, std::string_view url, std::uint64_t offset, std::string detail);

} // namespace detail

} // namespace conveyor::shard

template <>
struct std::is_error_code_enum<conveyor::shard::errc> : std::true_type {};

#if CONVEYOR_HEADER_ONLY
#include <conveyor/shard/impl/error.ipp>
#endif

#endif
