// conveyor/shard/impl/error.ipp — the shard module's error category (see error.hpp).
#ifndef CONVEYOR_SHARD_IMPL_ERROR_IPP
#define CONVEYOR_SHARD_IMPL_ERROR_IPP

#include <conveyor/shard/error.hpp>

#include <limits>
#include <utility>

namespace conveyor::shard {

namespace detail {
class shard_category_impl final : public std::error_category {
public:
    const char* name() const noexcept override { return "conveyor.shard"; }
    std::string message(int ev) const override
    {
        switch (static_cast<errc>(ev)) {
        case errc::bad_checksum: return "tar header checksum mismatch";
        case errc::bad_number: return "tar header number field is invalid";
        case errc::negative_size: return "tar member size is negative";
        case errc::truncated: return "tar archive is truncated";
        case errc::size_past_end: return "tar member runs past the end of the archive";
        case errc::missing_end_of_archive: return "tar archive has no end-of-archive marker";
        case errc::data_after_end_of_archive: return "data after a tar end-of-archive block";
        case errc::unterminated_name: return "tar long name is not NUL-terminated";
        case errc::bad_pax_record: return "invalid pax extended header record";
        case errc::sparse_member: return "GNU sparse tar members are not supported";
        case errc::member_too_large: return "tar member is too large";
        case errc::metadata_too_large: return "tar extended header is too large";
        case errc::duplicate_field: return "duplicate field in a sample";
        case errc::bad_gzip: return "corrupt gzip data";
        case errc::truncated_gzip: return "gzip data is truncated";
        case errc::index_mismatch: return "shard does not match its dataset index";
        }
        return "unknown conveyor.shard error";
    }
};
} // namespace detail

CONVEYOR_DECL const std::error_category& shard_category() noexcept
{
    static const detail::shard_category_impl cat;
    return cat;
}

CONVEYOR_DECL std::error_code make_error_code(errc e) noexcept
{
    return {static_cast<int>(e), shard_category()};
}

namespace detail {

CONVEYOR_DECL conveyor::error shard_error(errc code, std::string_view url, std::uint64_t offset, std::string detail)
{
    const auto at = offset > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())
                        ? std::numeric_limits<std::int64_t>::max()
                        : static_cast<std::int64_t>(offset);
    return conveyor::error(make_error_code(code), {.where = conveyor::detail::redact_userinfo(url), .offset = at, .detail = std::move(detail)});
}

} // namespace detail

} // namespace conveyor::shard

#endif
