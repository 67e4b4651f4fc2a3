// conveyor/core/detail/read_file.hpp — a small local file read whole, up to a limit.
#ifndef CONVEYOR_CORE_DETAIL_READ_FILE_HPP
#define CONVEYOR_CORE_DETAIL_READ_FILE_HPP

#include <conveyor/detail/config.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace conveyor::detail {

/// The largest index or listing file (JSON) read whole by default: parsed, it takes a few
/// times its size in memory.
inline constexpr std::uint64_t default_max_index_bytes = std::uint64_t{512} << 20;

/// A file read by `read_whole_file`: its bytes, or why they could not be read.
struct whole_file {
    std::string text;
    std::error_code ec; ///< set when the file could not be read whole
    std::string why;    ///< with `ec`: what failed, e.g. "cannot open it" or "it has N bytes, more than …"
};

/// What a refusal of something read whole says: "it has `size` bytes, more than the
/// `limit` bytes allowed (`limit_name`)".
CONVEYOR_DECL std::string over_limit(std::uint64_t size, std::uint64_t limit, std::string_view limit_name);

/** Reads the whole of a file that is parsed in memory (an index, a label map, a
    configuration or token file), refusing one of more than `limit` bytes before holding it:
    a regular file by its size (`fstat`), anything else (a pipe, `/dev/stdin`) once more
    than `limit` bytes have come. A directory is refused too. `limit_name` names the setting
    that raises the limit, for the message (e.g. "walk_options::max_index_bytes"). Never
    throws for the file's sake: failures are returned in `ec` (`file_too_large` for the
    limit, `is_a_directory`, or the system's error) and `why`. */
CONVEYOR_DECL whole_file read_whole_file(const std::filesystem::path& path, std::uint64_t limit, std::string_view limit_name);

} // namespace conveyor::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/core/detail/impl/read_file.ipp>
#endif

#endif
