// conveyor/shard/detail/tar.hpp — the tar format's 512-byte headers, numeric fields and pax
// records, decoded from bytes (the ground floor of the shard reader; not for users).
//
// The formats, as GNU tar, libarchive, Python's tarfile and Go's archive/tar read them:
// - v7: name, mode, uid, gid, size, mtime, checksum, type, link name;
// - ustar (POSIX.1-1988, magic "ustar\0" "00"): adds owner names, device numbers and a
//   155-byte prefix that goes before the name with a '/';
// - GNU (magic "ustar " " \0"): numbers may be base-256 (high bit of the first byte set),
//   the prefix area holds other fields, and long names come as 'L'/'K' members;
// - pax (POSIX.1-2001): 'x' and 'g' members whose data are "<len> <key>=<value>\n" records.
#ifndef CONVEYOR_SHARD_DETAIL_TAR_HPP
#define CONVEYOR_SHARD_DETAIL_TAR_HPP

#include <conveyor/detail/config.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace conveyor::shard::detail {

/// Every header and every member's data (padded) fill whole blocks of this size.
inline constexpr std::size_t tar_block = 512;

/// What a header stands for.
enum class tar_kind {
    regular,       ///< '0', '\0' (v7), '7' (contiguous file: a regular file everywhere)
    hard_link,     ///< '1'
    symlink,       ///< '2'
    char_device,   ///< '3'
    block_device,  ///< '4'
    directory,     ///< '5'
    fifo,          ///< '6'
    pax_local,     ///< 'x': pax records for the next member
    pax_global,    ///< 'g': pax records for every member after it
    gnu_long_name, ///< 'L': the next member's name
    gnu_long_link, ///< 'K': the next member's link name
    gnu_sparse,    ///< 'S': a GNU sparse file (its data are not its bytes as stored)
    other,         ///< anything else ('V' volume label, 'M' multi-volume, vendor types)
};

/// One header block, decoded.
struct tar_header {
    std::string name;      ///< ustar: prefix + '/' + name; as stored, without trailing NULs
    std::string link_name;
    char typeflag = '0';
    tar_kind kind = tar_kind::regular;
    std::int64_t size = 0; ///< bytes of data after the header (before padding)
    std::int64_t mode = 0;
    std::int64_t uid = 0;
    std::int64_t gid = 0;
    std::int64_t mtime = 0;
    std::string uname;
    std::string gname;
    bool ustar = false;    ///< POSIX ustar magic
    bool gnu = false;      ///< GNU magic
};

/// True when all of `block` is zero bytes (two of them end an archive).
CONVEYOR_DECL bool is_zero_block(std::span<const std::byte> block) noexcept;

/** A numeric field: octal digits (leading spaces allowed, ended by NUL or space; an empty
    field is 0, as every reader takes it), or, when the first byte's high bit is set, a
    big-endian base-256 two's complement number (GNU; 0xFF first means negative). False
    when the field is neither, or the number does not fit in 63 bits. */
CONVEYOR_DECL bool parse_tar_number(std::string_view field, std::int64_t& out) noexcept;

/** Decodes a 512-byte header block into `out`. Returns "" when it is a valid header, else
    why not, for an error message: "header checksum mismatch (stored 012105, computed
    012106)", "size field is not a number", "size is negative". The checksum is the sum of
    the block's bytes with its own field taken as spaces, unsigned or (as some old tars
    wrote it) signed. */
CONVEYOR_DECL std::string decode_tar_header(std::span<const std::byte> block, tar_header& out);

/** Parses the data of a pax member: records "<length> <key>=<value>\n", the length in
    decimal counting the whole record. Appends each (key, value) to `out` in order. Returns
    "" or why the data are not pax records ("record 2: length 40 runs past the end"). */
CONVEYOR_DECL std::string parse_pax_records(std::string_view data, std::vector<std::pair<std::string, std::string>>& out);

/// Bytes that a member of `size` bytes takes after its header: rounded up to whole blocks.
constexpr std::uint64_t tar_padded(std::uint64_t size) noexcept
{
    return (size + tar_block - 1) / tar_block * tar_block;
}

} // namespace conveyor::shard::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/shard/detail/impl/tar.ipp>
#endif

#endif
