// conveyor/file/error.hpp — error codes of the file module.
#ifndef CONVEYOR_FILE_ERROR_HPP
#define CONVEYOR_FILE_ERROR_HPP

#include <conveyor/detail/config.hpp>

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

/// The category of `conveyor::file::errc`.
CONVEYOR_DECL const std::error_category& file_category() noexcept;

/// Makes a `std::error_code` from a file error value.
CONVEYOR_DECL std::error_code make_error_code(errc e) noexcept;

} // namespace conveyor::file

template <>
struct std::is_error_code_enum<conveyor::file::errc> : std::true_type {};

#if CONVEYOR_HEADER_ONLY
#include <conveyor/file/impl/error.ipp>
#endif

#endif
