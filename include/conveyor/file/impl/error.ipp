// conveyor/file/impl/error.ipp — the file module's error category (see error.hpp).
#ifndef CONVEYOR_FILE_IMPL_ERROR_IPP
#define CONVEYOR_FILE_IMPL_ERROR_IPP

#include <conveyor/file/error.hpp>

namespace conveyor::file {

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

CONVEYOR_DECL const std::error_category& file_category() noexcept
{
    static const detail::file_category_impl cat;
    return cat;
}

CONVEYOR_DECL std::error_code make_error_code(errc e) noexcept
{
    return {static_cast<int>(e), file_category()};
}

} // namespace conveyor::file

#endif
