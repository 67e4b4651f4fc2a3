// conveyor/file/error.hpp — error codes of the file module.
#ifndef CONVEYOR_FILE_ERROR_HPP
#define CONVEYOR_FILE_ERROR_HPP

#include <conveyor/core/error.hpp>

#include <string>
#include <system_error>
#include <type_traits>

namespace conveyor::file {

/// Error codes of the file module. System call failures keep their `errno` in
/// `std::system_category()`; these are the failures that have no errno.
enum class errc {
    /// The path names a directory or a special file where a regular file was expected.
    not_a_regular_file = 1,
    /// A path in an index or list leads outside the dataset's root (`..`, or absolute).
    path_escapes_root,
    /// An index file is valid JSON but not an array.
    index_not_array,
    /// An index file's array holds something other than a string.
    index_entry_not_string,
    /// An index or classes file is not valid JSON.
    invalid_json,
    /// A classes file is not an object of `{"name": {"id": N, "name": "..."}}` entries.
    classes_file_invalid,
    /// A file had fewer bytes when read than when it was listed or stat'ed.
    file_shrank,
    /// A file had more bytes when read than when it was listed or stat'ed.
    file_grew,
    /// io_uring was required (`io_backend::uring`) but the kernel refused it.
    uring_unavailable,
    /// A read did not finish within `source_options::read_timeout` (a hung mount, a stuck
    /// device); it was abandoned.
    read_timed_out,
};

namespace detail {
class file_category_impl final : public std::error_category {
public:
    const char* name() const noexcept override { return "conveyor.file"; }
    std::string message(int ev) const override
    {
        switch (static_cast<errc>(ev)) {
        case errc::not_a_regular_file: return "not a regular file";
        case errc::path_escapes_root: return "path escapes the dataset root";
        case errc::index_not_array: return "index is not a JSON array";
        case errc::index_entry_not_string: return "index entry is not a string";
        case errc::invalid_json: return "invalid JSON";
        case errc::classes_file_invalid: return "classes file is not an object of {\"id\": N, \"name\": \"...\"} entries";
        case errc::file_shrank: return "file shrank while being read";
        case errc::file_grew: return "file grew while being read";
        case errc::uring_unavailable: return "io_uring is unavailable";
        case errc::read_timed_out: return "read timed out";
        }
        return "unknown conveyor.file error";
    }
};
} // namespace detail

/// The category of `conveyor::file::errc`.
inline const std::error_category& file_category() noexcept
{
    static const detail::file_category_impl cat;
    return cat;
}

/// Makes a `std::error_code` from a file error value.
inline std::error_code make_error_code(errc e) noexcept
{
    return {static_cast<int>(e), file_category()};
}

} // namespace conveyor::file

template <>
struct std::is_error_code_enum<conveyor::file::errc> : std::true_type {};

#endif
