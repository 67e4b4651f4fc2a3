// conveyor/shard/detail/impl/tar_write.ipp — tar headers encoded (see tar_write.hpp).
#ifndef CONVEYOR_SHARD_DETAIL_IMPL_TAR_WRITE_IPP
#define CONVEYOR_SHARD_DETAIL_IMPL_TAR_WRITE_IPP

#include <conveyor/shard/detail/tar_write.hpp>
#include <conveyor/shard/writer.hpp>

#include <algorithm>
#include <cstring>

namespace conveyor::shard::detail {

CONVEYOR_DECL bool split_ustar_name(std::string_view path, std::string_view& prefix, std::string_view& name) noexcept
{
    if (path.size() <= ustar_name_max) {
        prefix = {};
        name = path;
        return true;
    }
    if (path.size() > ustar_prefix_max + 1 + ustar_name_max) return false;
    // The first '/' that leaves at most 100 bytes after it gives the longest name field,
    // and a prefix as short as it can be; the prefix must then fit 155 bytes.
    const std::size_t earliest = path.size() - ustar_name_max - 1;
    for (std::size_t i = earliest; i < path.size(); ++i) {
        if (path[i] != '/') continue;
        if (i == 0 || i > ustar_prefix_max || i + 1 == path.size()) return false;
        prefix = path.substr(0, i);
        name = path.substr(i + 1);
        return true;
    }
    return false;
}

CONVEYOR_DECL std::string pax_record(std::string_view key, std::string_view value)
{
    // "<n> key=value\n": n counts its own digits, so find the fixed point.
    const std::size_t body = 1 + key.size() + 1 + value.size() + 1;
    std::size_t n = body + 1;
    while (std::to_string(n).size() + body != n) n = std::to_string(n).size() + body;
    std::string r = std::to_string(n);
    r += ' ';
    r += key;
    r += '=';
    r += value;
    r += '\n';
    return r;
}

namespace {

// An octal number in `width` bytes: width-1 zero-padded digits and a NUL (POSIX's form).
inline void put_octal(std::byte* field, std::size_t width, std::uint64_t v) noexcept
{
    field[width - 1] = std::byte{0};
    for (std::size_t i = width - 1; i-- > 0;) {
        field[i] = static_cast<std::byte>('0' + (v & 7));
        v >>= 3;
    }
}

inline void put_text(std::byte* field, std::size_t width, std::string_view s) noexcept
{
    if (!s.empty()) std::memcpy(field, s.data(), std::min(width, s.size()));
}

} // namespace

CONVEYOR_DECL void encode_ustar_block(std::byte* b, std::string_view prefix, std::string_view name, std::uint64_t size, char typeflag,
                                      const tar_write_options& meta) noexcept
{
    std::memset(b, 0, tar_block);
    put_text(b + 0, 100, name);
    put_octal(b + 100, 8, meta.mode & 07777);
    put_octal(b + 108, 8, meta.uid & 07777777);
    put_octal(b + 116, 8, meta.gid & 07777777);
    put_octal(b + 124, 12, size);
    put_octal(b + 136, 12, static_cast<std::uint64_t>(std::clamp<std::int64_t>(meta.mtime, 0, 077777777777LL)));
    std::memset(b + 148, ' ', 8);
    b[156] = static_cast<std::byte>(typeflag);
    put_text(b + 257, 6, std::string_view("ustar\0", 6));
    put_text(b + 263, 2, "00");
    put_text(b + 265, 31, meta.uname);
    put_text(b + 297, 31, meta.gname);
    put_octal(b + 329, 8, 0);
    put_octal(b + 337, 8, 0);
    put_text(b + 345, 155, prefix);
    unsigned sum = 0;
    for (std::size_t i = 0; i < tar_block; ++i) sum += static_cast<unsigned char>(b[i]);
    // "%06o\0 ": six digits, a NUL, then the space that was counted.
    put_octal(b + 148, 7, sum);
    b[155] = static_cast<std::byte>(' ');
}

CONVEYOR_DECL std::size_t append_member_header(std::vector<std::byte>& out, std::string_view path, std::uint64_t size,
                                               const tar_write_options& meta)
{
    const std::size_t start = out.size();
    std::string_view prefix, name;
    const bool fits_name = split_ustar_name(path, prefix, name);
    const bool fits_size = size <= ustar_size_max;
    if (!fits_name || !fits_size) {
        std::string records;
        if (!fits_name) records += pax_record("path", path);
        if (!fits_size) records += pax_record("size", std::to_string(size));
        const std::size_t at = out.size();
        out.resize(at + tar_block + tar_padded(records.size()));
        encode_ustar_block(out.data() + at, {}, "././@PaxHeader", records.size(), 'x', meta);
        std::memcpy(out.data() + at + tar_block, records.data(), records.size());
        if (!fits_name) {
            prefix = {};
            name = path.substr(0, ustar_name_max);
        }
    }
    const std::size_t at = out.size();
    out.resize(at + tar_block);
    encode_ustar_block(out.data() + at, prefix, name, fits_size ? size : 0, '0', meta);
    return out.size() - start;
}

} // namespace conveyor::shard::detail

#endif
