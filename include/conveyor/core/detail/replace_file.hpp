// conveyor/core/detail/replace_file.hpp — a local file replaced whole or not at all: the one
// temporary-file-then-rename writer of the library (listings, indexes, the local store's
// objects, node-cache entries).
#ifndef CONVEYOR_CORE_DETAIL_REPLACE_FILE_HPP
#define CONVEYOR_CORE_DETAIL_REPLACE_FILE_HPP

#include <conveyor/detail/config.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

namespace conveyor::detail {

/** A name for a temporary file beside `path` that no other writer uses:
    `.<name>.tmp-<pid>-<serial>-<random>` in `path`'s folder (the random part because hosts
    sharing a file system may run writers of the same pid). Hidden, so that listings skip it. */
CONVEYOR_DECL std::string temporary_beside(const std::filesystem::path& path);

/** A file that replaces `target` whole or not at all: written under a temporary name in
    the same folder, then (on `commit`) synced if asked and renamed over `target`. A reader
    of `target` sees the old file or the whole new one, never a part; of two writers of one
    path the last rename wins, each with its whole file. Abandoned (closed, its temporary
    file removed, `target` untouched) on any failure, by `abandon()`, or when destroyed
    before `commit`.

    Failures are returned as error codes, with the step that failed in `failed_step()`
    ("cannot create", "cannot write", "cannot sync", "cannot close", "cannot rename"), so
    that a caller that throws and one that carries on (the node cache) share the writer and
    phrase their own messages.

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe. */
class replacing_file {
public:
    replacing_file() noexcept = default;
    replacing_file(const replacing_file&) = delete;
    replacing_file& operator=(const replacing_file&) = delete;
    CONVEYOR_DECL replacing_file(replacing_file&& other) noexcept;
    CONVEYOR_DECL replacing_file& operator=(replacing_file&& other) noexcept;
    ~replacing_file() { abandon(); }

    /** Creates the temporary file for `target`: `temporary` if given (the caller's naming
        rule), else `temporary_beside(target)`; exclusively (`O_EXCL`: never someone else's
        file) with `mode` less the umask. */
    [[nodiscard]] CONVEYOR_DECL std::error_code open(std::string target, unsigned mode = 0666, std::string temporary = {});

    /// Writes all of `bytes` after those appended so far (EINTR retried; a write that takes
    /// nothing is `no_space_on_device`).
    [[nodiscard]] CONVEYOR_DECL std::error_code append(std::span<const std::byte> bytes);

    /// Writes all of `bytes` at `offset` (for a header written last); `size()` unchanged.
    [[nodiscard]] CONVEYOR_DECL std::error_code write_at(std::uint64_t offset, std::span<const std::byte> bytes);

    /** Syncs the file (if `sync`: otherwise a crash may leave `target` naming an empty
        file), closes it (NFS reports write errors here), renames it over `target`, and
        syncs the folder (if `sync_folder`, so that the rename itself survives a crash). */
    [[nodiscard]] CONVEYOR_DECL std::error_code commit(bool sync = true, bool sync_folder = false);

    /// Closes and removes the temporary file, if any: `target` stays as it was.
    CONVEYOR_DECL void abandon() noexcept;

    bool is_open() const noexcept { return fd_ >= 0; }
    /// The open descriptor of the temporary file (-1 when none): to `fstat` it before `commit`.
    int native_handle() const noexcept { return fd_; }
    const std::string& target() const noexcept { return target_; }
    /// The temporary file's path (the last one `open` tried; "" before).
    const std::string& temporary() const noexcept { return temporary_; }
    /// Bytes appended so far.
    std::uint64_t size() const noexcept { return size_; }
    /// The step the last failure happened in (see the class), "" when none failed.
    const char* failed_step() const noexcept { return step_; }

private:
    std::error_code failed(const char* step, int e) noexcept;

    std::string target_, temporary_;
    int fd_ = -1;
    bool created_ = false; // the temporary file is ours to remove
    std::uint64_t size_ = 0;
    const char* step_ = "";
};

/** Writes `bytes` to `path` whole or not at all (`replacing_file`, synced). On any failure
    (a full disk, a read-only or missing folder, a quota) `path` is left as it was and a
    `conveyor::error` is thrown with `stage`, `where` = `path` and a detail naming the step
    that failed and the temporary file. */
CONVEYOR_DECL void replace_file(const std::filesystem::path& path, std::string_view bytes, std::string_view stage);

} // namespace conveyor::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/core/detail/impl/replace_file.ipp>
#endif

#endif
