// conveyor/core/detail/replace_file.hpp — a local file replaced whole or not at all.
#ifndef CONVEYOR_CORE_DETAIL_REPLACE_FILE_HPP
#define CONVEYOR_CORE_DETAIL_REPLACE_FILE_HPP

#include <conveyor/detail/config.hpp>

#include <filesystem>
#include <string>
#include <string_view>

namespace conveyor::detail {

/** A name for a temporary file beside `path` that no other writer uses:
    `.<name>.tmp-<pid>-<serial>-<random>` in `path`'s folder (the random part because hosts
    sharing a file system may run writers of the same pid). Hidden, so that listings skip it. */
CONVEYOR_DECL std::string temporary_beside(const std::filesystem::path& path);

/** Writes `bytes` to `path` whole or not at all.

    The bytes go to a temporary file in the same folder whose name no other writer uses
    (`temporary_beside`), which is synced and then renamed over `path`. A reader of `path`
    sees the old file or the whole new one, never a part; of two writers of one path the
    last rename wins, each with its whole file. On any failure (a full disk, a read-only
    or missing folder, a quota) the temporary file is removed, `path` is left as it was,
    and a `conveyor::error` is thrown with `stage`, `where` = `path` and a detail naming the
    step that failed and the temporary file. */
CONVEYOR_DECL void replace_file(const std::filesystem::path& path, std::string_view bytes, std::string_view stage);

} // namespace conveyor::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/core/detail/impl/replace_file.ipp>
#endif

#endif
