// conveyor/file/index.hpp — lists of files: directory walks, index files, class labels.
#ifndef CONVEYOR_FILE_INDEX_HPP
#define CONVEYOR_FILE_INDEX_HPP

#include <conveyor/detail/config.hpp>

#include <conveyor/core/detail/read_file.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/file/error.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor::file {

/// One file of a listing.
struct entry {
    std::string path;        ///< relative to the listing's root (or absolute, for plain path lists)
    std::int64_t size = -1;  ///< bytes when listed, as a regular file (not checked again when read), or -1 if unknown (then it is stat'ed when read)
    std::int64_t label = -1; ///< class id, or -1
};

/// Files to read: a root and paths below it, with class names where labels are known.
struct listing {
    std::filesystem::path root;       ///< what entry paths are relative to (empty: as given)
    std::vector<entry> entries;       ///< in a fixed, deterministic order
    std::vector<std::string> classes; ///< class names by id (ImageFolder: directory names)

    std::size_t size() const noexcept { return entries.size(); }
    /// The path to open for entry `i`.
    CONVEYOR_DECL std::string full_path(std::size_t i) const;
};

/// One class of a classes file (the seeds' `{"n01440764": {"id": 0, "name": "tench"}}`).
struct class_info {
    std::string dir;  ///< the key: a directory name such as "n01440764"
    std::int64_t id;  ///< the label
    std::string name; ///< a human name such as "tench"
};

/// Settings of `walk` and `read_index`.
struct walk_options {
    /// Keep only these extensions (".jpg", ".JPEG"...; compared without regard to case).
    /// Empty: every regular file.
    std::vector<std::string> extensions;
    /// ImageFolder labels: the first directory below the root is the class. Classes get
    /// ids in sorted order unless `classes` gives them; files directly in the root, or in
    /// directories that `classes` does not name, are left out.
    bool labels = false;
    /// Ids from a classes file (see `read_classes`) instead of sorted order.
    std::vector<class_info> classes;
    /// `read_index`: the largest index file read (parsed, it takes a few times its size in
    /// memory); a larger one is refused before it is read.
    std::uint64_t max_index_bytes = conveyor::detail::default_max_index_bytes;
};

/** True when `extensions` is empty, or when the extension of `path`'s file name (from its
    last '.', as `std::filesystem::path::extension` takes it: none for "x", ".hidden",
    "dir/" or "..") is one of them, compared without regard to ASCII case (".jpeg" keeps
    "a/b.JPEG"). The rule of `walk_options::extensions`, for local paths and object keys
    alike (`s3::listing_options::extensions`). */
CONVEYOR_DECL bool has_extension(std::string_view path, const std::vector<std::string>& extensions);

/// True if `rel` would leave the root it is relative to: absolute, or `..` going above it.
CONVEYOR_DECL bool escapes_root(std::string_view rel);

/** Lists every regular file below `root` (recursively, following no symlinked
    directories), sorted by path so the order is the same on every run and machine.
    Sizes are recorded, so reads need no extra stat and a file that changed since is
    detected. Throws `conveyor::error` naming the path that could not be read, or one that
    holds a control character (as `read_index` would refuse it when read back). */
CONVEYOR_DECL listing walk(const std::filesystem::path& root, const walk_options& o = {});

/// A listing of the given paths, as given (relative to the working directory, or
/// absolute), in the given order; sizes are found when read. Throws `conveyor::error`
/// (`std::errc::invalid_argument`) naming the first path that is empty, longer than a path
/// can be, or holds a NUL or another control character, and its position.
CONVEYOR_DECL listing from_paths(const std::vector<std::string>& paths);

/** Reads an index file: a JSON array of paths relative to `root` (the seeds' format).
    Every entry must be a string that stays inside `root`, is not empty, is no longer
    than a path can be and holds no NUL or other control character; the first that is
    not is an error naming the file, the entry's position and its value (escaped and
    shortened). With `o.labels`, labels come from each path's first directory as in `walk`. */
CONVEYOR_DECL listing read_index(const std::filesystem::path& index_file, const std::filesystem::path& root,
                                 const walk_options& o = {});

/// Writes `l`'s paths as an index file (a JSON array of strings), atomically.
CONVEYOR_DECL void write_index(const listing& l, const std::filesystem::path& index_file);

/// Reads a classes file: `{"n01440764": {"id": 0, "name": "tench"}, ...}`, of at most
/// `detail::default_max_index_bytes`.
CONVEYOR_DECL std::vector<class_info> read_classes(const std::filesystem::path& classes_file);

/// Writes `l`'s classes as a classes file; `names` may give human names by directory.
CONVEYOR_DECL void write_classes(const listing& l, const std::filesystem::path& classes_file,
                                 const std::map<std::string, std::string>& names = {});

namespace detail {
/// The text of an index file listing `paths` (what `write_index` writes; the S3 module
/// writes object keys with it).
CONVEYOR_DECL std::string index_text(const std::vector<std::string_view>& paths);
/// The text of a classes file for class names by id (empty names are left out), with
/// human names from `names` where it has them (what `write_classes` writes).
CONVEYOR_DECL std::string classes_text(const std::vector<std::string>& classes, const std::map<std::string, std::string>& names);
/// Writes `text` to `file` whole or not at all (`conveyor::detail::replace_file`).
CONVEYOR_DECL void write_text_file(const std::filesystem::path& file, const std::string& text);
} // namespace detail

} // namespace conveyor::file

#if CONVEYOR_HEADER_ONLY
#include <conveyor/file/impl/index.ipp>
#endif

#endif
