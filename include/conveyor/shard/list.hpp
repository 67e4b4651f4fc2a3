// conveyor/shard/list.hpp — shard lists: brace ranges, several lists, local paths and
// URLs, an S3 prefix listing, or the dataset index the shard writer wrote.
#ifndef CONVEYOR_SHARD_LIST_HPP
#define CONVEYOR_SHARD_LIST_HPP

#include <conveyor/core/detail/read_file.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/shard/index.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor::s3 {
class client;
} // namespace conveyor::s3

namespace conveyor::store {
class context;
} // namespace conveyor::store

namespace conveyor::shard {

/** Expands the brace groups of `pattern` as the shell and Python's braceexpand (which
    webdataset uses) do:
    - numeric ranges `{000000..000146}`: zero-padded to the width of the wider end when
      either end has a leading zero; descending ranges count down; an optional step
      `{0..100..10}`;
    - single-letter ranges `{a..e}`;
    - alternatives `{train,val}` (an alternative may hold groups of its own);
    - several groups multiply out, left to right (`{a,b}-{0..1}`: a-0 a-1 b-0 b-1).
    A backslash makes the next character plain. Text with no group is returned as it is.
    Throws `conveyor::error` (`errc::invalid_argument`) naming the pattern and the byte
    position for an unbalanced brace, and when the expansion would exceed `max_items`
    (a typo such as `{0..99999999}` must not eat the machine's memory). */
CONVEYOR_DECL std::vector<std::string> expand_braces(std::string_view pattern, std::size_t max_items = 10'000'000);

/// One shard of a list.
struct shard_ref {
    std::string url;           ///< its location's `url()`: a local path, `s3://bucket/key` or `http(s)://…`
    std::int64_t size = -1;    ///< bytes, when known (from a listing or an index)
    std::int64_t samples = -1; ///< samples, when known (from an index)
};

namespace detail {
/// The folder of `url` with its trailing '/' ("" for a bare file name).
CONVEYOR_DECL std::string folder_of(std::string_view url);
/// `url` as a shard list or index stores it, made whole: one that is relative (no leading
/// '/', no scheme) is taken relative to `folder` (from `folder_of`); others are unchanged.
CONVEYOR_DECL std::string beside(std::string_view folder, std::string_view url);
/// True for a gzip-compressed shard by its name (`.gz`, `.tgz`): one that cannot be
/// entered at an offset.
CONVEYOR_DECL bool compressed_by_name(std::string_view url) noexcept;
} // namespace detail

/** The dataset index at `url`: any location a store reads (a local path, `file://…`,
    `s3://bucket/key` read with `s3`, `http(s)://…`). Shard URLs are kept as stored (see
    `detail::beside`). Blocking. Throws `conveyor::error` naming the index when it cannot be
    read or parsed, when it is on S3 and no client was given, or when it has more than
    `max_bytes` (`std::errc::file_too_large`, refused before it is read where its size is
    known first: a local file, an S3 object). */
CONVEYOR_DECL dataset_index load_index(const std::string& url, const s3::client* s3 = nullptr,
                                       std::uint64_t max_bytes = conveyor::detail::default_max_index_bytes);

/// `load_index` read through the stores of `stores` (its S3 client, web client settings, cache).
CONVEYOR_DECL dataset_index load_index(const std::string& url, const store::context& stores,
                                       std::uint64_t max_bytes = conveyor::detail::default_max_index_bytes);

/// Settings for resolving shard lists.
struct list_options {
    /// The client for `s3://` prefix listings and `s3://` index files (null: such specs
    /// fail with a message saying a client is needed).
    const s3::client* s3 = nullptr;
    /// The store context index reads and prefix listings go through (its S3 client and web
    /// client settings); when given, `s3` is not used.
    std::shared_ptr<const store::context> store;
    /// Names of a prefix listing (S3 keys, files under a folder) that count as shards.
    std::vector<std::string> suffixes{".tar", ".tar.gz", ".tgz"};
    /// The largest dataset index read (see `load_index`).
    std::uint64_t max_index_bytes = conveyor::detail::default_max_index_bytes;
};

/** The shards named by `specs`, in order. Each spec is one of:
    - a brace pattern of paths or URLs (`/data/shard-{000000..000146}.tar`,
      `s3://bucket/train/shard-{0000..0099}.tar`, `file://…`, `http(s)://…`); several
      patterns in one spec are separated by `::` (as in webdataset);
    - a prefix, written with a trailing slash (`s3://bucket/train/`, `/data/train/`): every
      object under it (all levels down) ending in one of `suffixes`, sorted by URL, with
      its size, as its store lists it (`store::store::list`);
    - a dataset index (a spec ending in `.json`, wherever a store reads it): its shards in order,
      with sizes and sample counts; relative shard URLs are taken relative to the index's
      folder.
    Every URL is parsed once (`conveyor::location`) and kept in its one spelling
    (`location::url()`: `file://` taken off, the scheme in lower case).
    Blocking (an S3 listing or index read waits for the reply): call it before training,
    not on an I/O thread. Throws `conveyor::error` naming the spec when one cannot be
    resolved or the list comes out empty. */
CONVEYOR_DECL std::vector<shard_ref> resolve(const std::vector<std::string>& specs, const list_options& o = {});

/** True when one of `specs` (as `resolve` takes them, `::`-joined lists included) names an
    `s3://` location itself (its scheme as `conveyor::location` reads it, in any case): the
    specs that need `list_options::s3`. An index elsewhere that lists S3 shards is not seen
    here. Only schemes are read (a brace pattern is no URL until it is expanded): a part
    that is not a location is `resolve`'s error to report. */
CONVEYOR_DECL bool names_s3(const std::vector<std::string>& specs);

/// `resolve({spec}, o)`.
inline std::vector<shard_ref> resolve(std::string_view spec, const list_options& o = {})
{
    return resolve(std::vector<std::string>{std::string(spec)}, o);
}

} // namespace conveyor::shard

#if CONVEYOR_HEADER_ONLY
#include <conveyor/shard/impl/list.ipp>
#endif

#endif
