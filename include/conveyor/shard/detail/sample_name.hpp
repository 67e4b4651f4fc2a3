// conveyor/shard/detail/sample_name.hpp — webdataset's rule for which sample a tar member
// belongs to, and under which field.
#ifndef CONVEYOR_SHARD_DETAIL_SAMPLE_NAME_HPP
#define CONVEYOR_SHARD_DETAIL_SAMPLE_NAME_HPP

#include <conveyor/detail/config.hpp>

#include <optional>
#include <string_view>

namespace conveyor::shard::detail {

/// A member's name split into its sample key and its field.
struct sample_name {
    std::string_view key;   ///< "train/n01440764/img_0001"
    std::string_view field; ///< "jpg", "seg.png", "cls" (as stored; webdataset lower-cases it)
};

/// Splits a member's path the way webdataset does (its `base_plus_ext`, the regular
/// expression `^((?:.*/|)[^.]+)[.]([^/]*)$`), so that shards group into the same samples
/// here as there:
/// - the key is the path up to the first dot of the base name, the field is the rest:
///   `a/b.seg.png` -> (`a/b`, `seg.png`); dots in directory names do not count;
/// - a base name without a dot has no field: nullopt (webdataset skips such members);
/// - a base name that starts with a dot (`a/.x.jpg`) falls back, as the expression does,
///   to the key `a/` and the field `x.jpg`, provided the last directory has no dot in its
///   name; otherwise, and with no directory at all (`.x.jpg`), nullopt.
CONVEYOR_DECL std::optional<sample_name> split_sample_name(std::string_view path) noexcept;

} // namespace conveyor::shard::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/shard/detail/impl/sample_name.ipp>
#endif

#endif
