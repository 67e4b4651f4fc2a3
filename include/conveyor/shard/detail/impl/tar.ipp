// conveyor/shard/detail/impl/tar.ipp — decoding tar headers, numbers and pax records.
#ifndef CONVEYOR_SHARD_DETAIL_IMPL_TAR_IPP
#define CONVEYOR_SHARD_DETAIL_IMPL_TAR_IPP

#include <conveyor/shard/detail/tar.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <limits>

namespace conveyor::shard::detail {

/// Where a field of the header block is, and how long (POSIX ustar, shared by v7 and GNU).
struct tar_field_pos {
    std::size_t at, len;
};
inline constexpr tar_field_pos f_name{0, 100}, f_mode{100, 8}, f_uid{108, 8}, f_gid{116, 8}, f_size{124, 12},
    f_mtime{136, 12}, f_chksum{148, 8}, f_type{156, 1}, f_link{157, 100}, f_magic{257, 6}, f_version{263, 2},
    f_uname{265, 32}, f_gname{297, 32}, f_prefix{345, 155};

/// The bytes of `f` in `block`, as characters.
inline std::string_view tar_field(std::span<const std::byte> block, tar_field_pos f) noexcept
{
    return {reinterpret_cast<const char*>(block.data()) + f.at, f.len};
}

/// A text field up to its first NUL (or whole, when it fills its room).
inline std::string tar_text(std::span<const std::byte> block, tar_field_pos f)
{
    const std::string_view v = tar_field(block, f);
    return std::string(v.substr(0, std::min(v.find('\0'), v.size())));
}

CONVEYOR_DECL bool is_zero_block(std::span<const std::byte> block) noexcept
{
    // Eight bytes at a time (a header is checked for every member).
    std::size_t i = 0;
    std::uint64_t any = 0;
    for (; i + 8 <= block.size(); i += 8) {
        std::uint64_t w;
        std::memcpy(&w, block.data() + i, 8);
        any |= w;
    }
    for (; i < block.size(); ++i) any |= static_cast<std::uint64_t>(block[i]);
    return any == 0;
}

CONVEYOR_DECL bool parse_tar_number(std::string_view field, std::int64_t& out) noexcept
{
    if (!field.empty() && (static_cast<unsigned char>(field[0]) & 0x80)) {
        // Base-256, two's complement: a first byte with 0x40 set starts a negative number.
        // Work on the magnitude's complement in that case, so one loop serves both signs.
        const unsigned char flip = (static_cast<unsigned char>(field[0]) & 0x40) ? 0xFF : 0x00;
        std::uint64_t v = 0;
        for (std::size_t i = 0; i < field.size(); ++i) {
            auto byte = static_cast<unsigned char>(static_cast<unsigned char>(field[i]) ^ flip);
            if (i == 0) byte &= 0x7F; // the marker bit is not part of the number
            if (v >> 56) return false; // one more byte would not fit
            v = (v << 8) | byte;
        }
        if (v >> 63) return false;
        out = flip ? ~static_cast<std::int64_t>(v) : static_cast<std::int64_t>(v);
        return true;
    }
    std::size_t i = 0;
    while (i < field.size() && field[i] == ' ') ++i;
    std::size_t j = i;
    while (j < field.size() && field[j] >= '0' && field[j] <= '7') ++j;
    // What follows the digits: NULs and spaces only.
    for (std::size_t k = j; k < field.size(); ++k)
        if (field[k] != '\0' && field[k] != ' ') return false;
    if (i == j) {
        out = 0; // an empty (all NUL or blank) field
        return true;
    }
    std::uint64_t v = 0;
    for (std::size_t k = i; k < j; ++k) {
        if (v > (static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) >> 3)) return false;
        v = v * 8 + static_cast<std::uint64_t>(field[k] - '0');
    }
    out = static_cast<std::int64_t>(v);
    return true;
}

CONVEYOR_DECL std::string decode_tar_header(std::span<const std::byte> block, tar_header& out)
{
    if (block.size() != tar_block) return "a header needs " + std::to_string(tar_block) + " bytes, got " + std::to_string(block.size());
    std::int64_t stored = 0;
    if (!parse_tar_number(tar_field(block, f_chksum), stored)) return "checksum field is not a number";
    // The sum of the bytes with the checksum field's eight taken as spaces: one plain loop
    // (the compiler vectorizes it), then the field's own bytes swapped for spaces. The
    // signed sum that some old tars wrote is computed only when the unsigned one differs.
    const auto* bytes = reinterpret_cast<const unsigned char*>(block.data());
    std::uint32_t sum = 0;
    for (std::size_t i = 0; i < tar_block; ++i) sum += bytes[i];
    for (std::size_t i = f_chksum.at; i < f_chksum.at + f_chksum.len; ++i) sum = sum - bytes[i] + ' ';
    const std::int64_t unsigned_sum = sum;
    const auto signed_sum = [&] {
        std::int64_t v = 0;
        for (std::size_t i = 0; i < tar_block; ++i) {
            const bool in_chksum = i >= f_chksum.at && i < f_chksum.at + f_chksum.len;
            v += in_chksum ? std::int64_t{' '} : std::int64_t{static_cast<signed char>(bytes[i])};
        }
        return v;
    };
    if (stored != unsigned_sum && stored != signed_sum()) {
        char text[96];
        std::snprintf(text, sizeof text, "header checksum mismatch (stored %llo, computed %llo)",
                      static_cast<unsigned long long>(stored), static_cast<unsigned long long>(unsigned_sum));
        return text;
    }

    tar_header h;
    const std::string_view magic = tar_field(block, f_magic), version = tar_field(block, f_version);
    h.ustar = magic == std::string_view("ustar\0", 6) && version == "00";
    h.gnu = magic == "ustar " && version == std::string_view(" \0", 2);
    const struct {
        tar_field_pos f;
        std::int64_t* to;
        const char* what;
    } numbers[] = {{f_size, &h.size, "size"}, {f_mode, &h.mode, "mode"}, {f_uid, &h.uid, "uid"},
                   {f_gid, &h.gid, "gid"},    {f_mtime, &h.mtime, "mtime"}};
    for (const auto& n : numbers)
        if (!parse_tar_number(tar_field(block, n.f), *n.to)) return std::string(n.what) + " field is not a number";
    if (h.size < 0) return "size is negative (" + std::to_string(h.size) + ")";

    h.name = tar_text(block, f_name);
    h.link_name = tar_text(block, f_link);
    if (h.ustar || h.gnu) {
        h.uname = tar_text(block, f_uname);
        h.gname = tar_text(block, f_gname);
    }
    if (h.ustar) {
        // GNU keeps other fields where ustar has its prefix.
        const std::string prefix = tar_text(block, f_prefix);
        if (!prefix.empty()) h.name = prefix + "/" + h.name;
    }
    h.typeflag = tar_field(block, f_type)[0];
    switch (h.typeflag) {
    case '0': case '\0': case '7': h.kind = tar_kind::regular; break;
    case '1': h.kind = tar_kind::hard_link; break;
    case '2': h.kind = tar_kind::symlink; break;
    case '3': h.kind = tar_kind::char_device; break;
    case '4': h.kind = tar_kind::block_device; break;
    case '5': h.kind = tar_kind::directory; break;
    case '6': h.kind = tar_kind::fifo; break;
    case 'x': h.kind = tar_kind::pax_local; break;
    case 'g': h.kind = tar_kind::pax_global; break;
    case 'L': h.kind = tar_kind::gnu_long_name; break;
    case 'K': h.kind = tar_kind::gnu_long_link; break;
    case 'S': h.kind = tar_kind::gnu_sparse; break;
    default: h.kind = tar_kind::other; break;
    }
    // v7 marks a directory with a trailing '/' on a regular entry.
    if (h.typeflag == '\0' && !h.name.empty() && h.name.back() == '/') h.kind = tar_kind::directory;
    out = std::move(h);
    return {};
}

CONVEYOR_DECL std::string parse_pax_records(std::string_view data, std::vector<std::pair<std::string, std::string>>& out)
{
    std::size_t n = 0;
    while (!data.empty()) {
        ++n;
        const std::string where = "record " + std::to_string(n) + ": ";
        // Some writers pad the data with NULs after the last record.
        if (data.front() == '\0' && std::all_of(data.begin(), data.end(), [](char c) { return c == '\0'; })) break;
        const auto space = data.find(' ');
        if (space == std::string_view::npos || space == 0) return where + "no length";
        std::size_t len = 0;
        const auto [end, ec] = std::from_chars(data.data(), data.data() + space, len);
        if (ec != std::errc{} || end != data.data() + space) return where + "length '" + std::string(data.substr(0, std::min<std::size_t>(space, 20))) + "' is not a number";
        if (len <= space + 1) return where + "length " + std::to_string(len) + " is too short for the record";
        if (len > data.size()) return where + "length " + std::to_string(len) + " runs past the end (" + std::to_string(data.size()) + " bytes left)";
        const std::string_view record = data.substr(space + 1, len - space - 1);
        if (record.empty() || record.back() != '\n') return where + "does not end with a newline";
        const std::string_view kv = record.substr(0, record.size() - 1);
        const auto eq = kv.find('=');
        if (eq == std::string_view::npos || eq == 0) return where + "no key=value";
        out.emplace_back(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
        data.remove_prefix(len);
    }
    return {};
}

} // namespace conveyor::shard::detail

#endif
