// conveyor/shard/detail/impl/sample_name.ipp — webdataset's key/field split.
#ifndef CONVEYOR_SHARD_DETAIL_IMPL_SAMPLE_NAME_IPP
#define CONVEYOR_SHARD_DETAIL_IMPL_SAMPLE_NAME_IPP

#include <conveyor/shard/detail/sample_name.hpp>

namespace conveyor::shard::detail {

CONVEYOR_DECL std::optional<sample_name> split_sample_name(std::string_view path) noexcept
{
    const auto last_slash = path.rfind('/');
    const std::size_t base = last_slash == std::string_view::npos ? 0 : last_slash + 1;
    const std::string_view base_name = path.substr(base);
    const auto dot = base_name.find('.');
    if (dot == std::string_view::npos) return std::nullopt; // no field
    if (dot > 0) return sample_name{path.substr(0, base + dot), base_name.substr(dot + 1)};
    // The base name starts with a dot. The expression's key part ([^.]+ after an optional
    // "anything/") can then only end at the last '/', reaching back into the last
    // directory's name, which must hold no dot itself.
    if (last_slash == std::string_view::npos) return std::nullopt;
    const auto previous_slash = last_slash == 0 ? std::string_view::npos : path.rfind('/', last_slash - 1);
    const std::size_t dir_start = previous_slash == std::string_view::npos ? 0 : previous_slash + 1;
    if (path.substr(dir_start, last_slash - dir_start).find('.') != std::string_view::npos) return std::nullopt;
    return sample_name{path.substr(0, base), base_name.substr(1)};
}

} // namespace conveyor::shard::detail

#endif
