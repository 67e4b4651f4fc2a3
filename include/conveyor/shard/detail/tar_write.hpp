// conveyor/shard/detail/tar_write.hpp — tar headers encoded for the shard writer: ustar
// blocks, with a pax 'x' member before one whose name or size ustar cannot hold (not for
// users; the writer's format choices are documented in shard/writer.hpp).
#ifndef CONVEYOR_SHARD_DETAIL_TAR_WRITE_HPP
#define CONVEYOR_SHARD_DETAIL_TAR_WRITE_HPP

#include <conveyor/detail/config.hpp>

#include <conveyor/shard/detail/tar.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor::shard {
struct tar_write_options; // shard/writer.hpp: what every member header says besides name and size
} // namespace conveyor::shard

namespace conveyor::shard::detail {

/// ustar's name field: 100 bytes (no NUL needed when full).
inline constexpr std::size_t ustar_name_max = 100;
/// ustar's prefix field: 155 bytes.
inline constexpr std::size_t ustar_prefix_max = 155;
/// The largest size an 11-digit octal field holds (8 GiB - 1); larger sizes go in a pax record.
inline constexpr std::uint64_t ustar_size_max = 077777777777ULL;

/** Splits `path` for ustar: `name` alone when it fits in 100 bytes, else at the last '/'
    that leaves at most 155 bytes before it and 1..100 bytes after it (the prefix is
    joined back with a '/'). False when there is no such '/' (then a pax record holds it). */
CONVEYOR_DECL bool split_ustar_name(std::string_view path, std::string_view& prefix, std::string_view& name) noexcept;

/** A pax record "<length> <key>=<value>\n", its length counting the whole record. */
CONVEYOR_DECL std::string pax_record(std::string_view key, std::string_view value);

/** Encodes one ustar header block into `block` (512 bytes): regular file `typeflag` '0',
    or 'x' for a pax member. `name` and `prefix` must fit their fields. */
CONVEYOR_DECL void encode_ustar_block(std::byte* block, std::string_view prefix, std::string_view name, std::uint64_t size,
                                      char typeflag, const tar_write_options& meta) noexcept;

/** Appends the header of a regular member named `path` with `size` bytes of data to `out`:
    one ustar block, or, when the path does not fit ustar (longer than 100 bytes with no
    usable prefix split, longer than 255) or the size does not fit 11 octal digits, a pax
    'x' member named "././@PaxHeader" (as Python's tarfile names it) with `path` / `size`
    records, its data padded, then the ustar block (its name the path's first 100 bytes, its
    size 0 when the pax record holds it). Returns the bytes appended (a multiple of 512).
    `path` must not be empty or hold a NUL: the writer checks that first. */
CONVEYOR_DECL std::size_t append_member_header(std::vector<std::byte>& out, std::string_view path, std::uint64_t size,
                                               const tar_write_options& meta);

} // namespace conveyor::shard::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/shard/detail/impl/tar_write.ipp>
#endif

#endif
