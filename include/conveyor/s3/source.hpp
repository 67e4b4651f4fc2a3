// conveyor/s3/source.hpp — the S3 source (objects → blobs), random access, and the upload sink.
#ifndef CONVEYOR_S3_SOURCE_HPP
#define CONVEYOR_S3_SOURCE_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/detail/read_file.hpp>
#include <conveyor/core/order.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/stages.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/file/index.hpp>
#include <conveyor/s3/client.hpp>
#include <conveyor/store/context.hpp>
#include <conveyor/store/objects.hpp>

#include <boost/asio/awaitable.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace conveyor::s3 {

/** The objects a source reads: a bucket and keys (with sizes when a listing gave them).
    Keys are full object keys within the bucket. */
struct object_list {
    std::string bucket;
    std::vector<object_info> objects;
    /// The class id of each object (ImageFolder-style labels, see `assign_labels`), in the
    /// order of `objects`; empty: no labels (the blobs' label is -1). Either empty or as
    /// long as `objects` (the source refuses a list where it is neither).
    std::vector<std::int64_t> labels;
    /// Class names by id (the prefix "directories"), when `labels` is set.
    std::vector<std::string> classes;

    std::size_t size() const noexcept { return objects.size(); }
    bool empty() const noexcept { return objects.empty(); }

    /// A list of the given keys (sizes unknown).
    static object_list from_keys(std::string bucket, const std::vector<std::string>& keys)
    {
        object_list l{std::move(bucket), {}};
        l.objects.reserve(keys.size());
        for (const auto& k : keys) l.objects.push_back(object_info{k});
        return l;
    }
};

/// Settings of the S3 source: the object sources' (`store::objects_options`).
using source_options = store::objects_options;

/// Settings of `list_objects` and `list_url`.
struct listing_options {
    /// The top level's "directories" listed at once.
    unsigned parallel = 16;
    /// ImageFolder labels, as `file::walk_options::labels` gives for directories: the
    /// first path component below the prefix is the class (see `assign_labels`).
    bool labels = false;
    /// With `labels`: ids from a classes file (`file::read_classes`) instead of sorted order.
    std::vector<file::class_info> classes;
    /// Keep only the keys with these extensions (".jpg", ".JPEG"...): the rule of
    /// `file::walk_options::extensions` (`file::has_extension`), applied before `labels`,
    /// so a "directory" left with no object is no class. Empty: every object.
    std::vector<std::string> extensions;
    /** Called after each page of the listing with the objects listed so far and their
        bytes (all the parallel listers together, before `extensions` and `labels` leave
        any out): progress for listings that take a while. Runs on the I/O thread that
        lists, never twice at once; must be cheap and must not block. */
    std::function<void(std::size_t objects, std::uint64_t bytes)> on_progress;
};

/** Lists every object under `prefix` of `bucket` (ListObjectsV2, following continuation
    tokens; the top level's "directories" are listed in parallel, `parallel` at once).
    Blocks the calling thread, which must not be one of the runtime's I/O threads.
    A server that sends a continuation token again (the listing would never end) fails
    it with `errc::bad_reply`, naming the bucket, prefix and token. */
CONVEYOR_DECL object_list list_objects(const client& c, std::string bucket, std::string prefix = {}, unsigned parallel = 16);

/** Lists every object under `prefix` of `bucket` as `list_objects` does, with labels
    when `o.labels` is set (see `assign_labels`).
    @code
    // s3://imagenet/train/n01440764/x.JPEG is class 0, .../n01443537/y.JPEG class 1, ...
    auto list = conveyor::s3::list_url(c, "s3://imagenet/train/", {.labels = true});
    @endcode */
CONVEYOR_DECL object_list list_objects(const client& c, std::string bucket, std::string prefix, const listing_options& o);

/// Lists the objects under an `s3://bucket/prefix` URL (see `list_objects`).
CONVEYOR_DECL object_list list_url(const client& c, std::string_view url, unsigned parallel = 16);

/// Lists the objects under an `s3://bucket/prefix` URL, with labels if `o.labels` is set.
CONVEYOR_DECL object_list list_url(const client& c, std::string_view url, const listing_options& o);

/** Gives `l`'s objects ImageFolder labels from their keys, as `file::walk` does with
    directories: the prefix is the root (as a directory: "train" and "train/" both mean
    the keys under "train/"), and the first path component below it is the class.
    Classes get ids in sorted (byte) order, or those of `classes` (a classes file) when it
    is not empty. Objects directly under the root, outside it, or in a "directory" that
    `classes` does not name are left out, as `walk` leaves out files in the root. Sets
    `l.labels` and `l.classes`; the objects keep their order. Throws `conveyor::error`
    (`std::errc::invalid_argument`) for a class id below 0 or above 2^24. */
CONVEYOR_DECL void assign_labels(object_list& l, std::string_view prefix, const std::vector<file::class_info>& classes = {});

/** Reads an index — a JSON array of object keys relative to the bucket, as the seeds keep
    it — from a local file. `prefix` is put before every key. A file of more than
    `max_bytes` is refused before it is read (`std::errc::file_too_large`). */
CONVEYOR_DECL object_list read_index(std::string bucket, const std::string& path, std::string_view prefix = {},
                                     std::uint64_t max_bytes = conveyor::detail::default_max_index_bytes);

/** Reads an index kept in the bucket itself (`s3://bucket/path/index.json`): the keys in
    it are relative to the same bucket, with `prefix` put before each. Blocks. An object of
    more than `max_bytes` (its size from a HeadObject) is refused before it is fetched. */
CONVEYOR_DECL object_list read_index(const client& c, std::string_view index_url, std::string_view prefix = {},
                                     std::uint64_t max_bytes = conveyor::detail::default_max_index_bytes);

/** Writes `l`'s keys as an index file — a JSON array of object keys relative to the
    bucket, what `read_index` reads back — to `destination`: an `s3://bucket/key` URL
    (stored with `c`'s PutObject) or a local path (written atomically, as
    `file::write_index` writes). Throws `conveyor::error` naming the first key that
    `read_index` would refuse (empty, longer than S3's 1024 bytes, a control character)
    and its position, or the file or object that could not be written. Blocks. */
CONVEYOR_DECL void write_index(const client& c, const object_list& l, std::string_view destination);

/// Writes `l`'s keys as an index file to a local path (see the overload above).
CONVEYOR_DECL void write_index(const object_list& l, const std::filesystem::path& file);

/** Writes `l`'s classes (`assign_labels`'s) as a classes file, in `file::write_classes`'s
    format (`{"n01440764": {"id": 0, "name": "n01440764"}, ...}`, human names from
    `names` where it has them), to an `s3://bucket/key` URL or a local path. Blocks. */
CONVEYOR_DECL void write_classes(const client& c, const object_list& l, std::string_view destination,
                                 const std::map<std::string, std::string>& names = {});

/// Writes `l`'s classes as a classes file to a local path (see the overload above).
CONVEYOR_DECL void write_classes(const object_list& l, const std::filesystem::path& file,
                                 const std::map<std::string, std::string>& names = {});

/** The S3 source: GETs every object of a list, many at once, as blobs (key = object key,
    origin = `s3://bucket/key`, label = the list's label for it, or -1), each through the
    S3 store of a store context (`store::objects` over the list's `s3://` locations), so
    the node cache serves them when one is set (`source_options::cache` or the context's).

    Requests are spread over the runtime's I/O threads, `concurrency` objects in flight,
    over the client's keep-alive connections. Objects larger than the client's
    `part_size` come in ranged parts fetched in parallel and reassembled in place.
    Transient failures are retried by the client; a retried object is delivered once.

    @code
    conveyor::s3::client c(rt, {.endpoint_url = "http://127.0.0.1:9000"});
    for (auto& b : conveyor::s3::objects(c, conveyor::s3::list_url(c, "s3://imagenet/train/")).on(rt))
        use(b.key, b.data.span());
    @endcode
*/
CONVEYOR_DECL pipeline<blob> objects(client c, std::shared_ptr<const object_list> list, source_options o = {});

/// Reads the objects of `list` (moved into the pipeline).
CONVEYOR_DECL pipeline<blob> objects(client c, object_list list, source_options o = {});

/// Reads the given keys of `bucket`.
CONVEYOR_DECL pipeline<blob> objects(client c, std::string bucket, const std::vector<std::string>& keys, source_options o = {});

/** Map-style random access to the objects of a list: `async_get(i)` (or the blocking `get(i)`) fetches object `i`.
    Calls may overlap freely. @par Thread Safety Safe. */
class dataset {
public:
    /// Reads through `ctx` (its S3 store: give one with a cache to serve the objects from
    /// the node's folder), or through a context of its own over `c`.
    CONVEYOR_DECL dataset(client c, object_list l, std::shared_ptr<const store::context> ctx = nullptr);

    std::size_t size() const noexcept { return list_->size(); }
    const object_list& objects() const noexcept { return *list_; }

    /** Fetches object `i`; throws `request_error` naming it if it cannot.
        @par Completion Signature `blob` */
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<blob> async_get(std::size_t i) const;

    /// Fetches object `i`, blocking the calling thread (which must not be an I/O thread).
    CONVEYOR_DECL blob get(std::size_t i) const;

private:
    client c_;
    std::shared_ptr<const object_list> list_;
    std::shared_ptr<const store::store> st_; // the S3 store every read goes through
};

/// Settings of the upload sink.
struct upload_options {
    std::string prefix;          ///< put before each blob's key
    std::size_t concurrency = 16;
    std::string content_type;    ///< empty: none sent (S3 stores binary/octet-stream)
};

namespace detail {
/// Stores one blob as `prefix + blob.key` in `bucket`: the function `upload` maps.
struct upload_one {
    client c;
    std::string bucket;
    std::string prefix;
    std::string content_type;
    CONVEYOR_DECL asio::awaitable<put_result> operator()(blob b) const;
};
} // namespace detail

/// The `upload` stage; see `s3::upload`.
class upload_stage {
public:
    CONVEYOR_DECL upload_stage(client c, std::string bucket, upload_options o);

    CONVEYOR_DECL stream<put_result> operator()(const std::shared_ptr<run_context>& ctx, stream<blob> in) const;

private:
    map_stage<detail::upload_one> map_;
};

/** The upload sink as a stage: each blob becomes the object `prefix + blob.key` in `bucket`
    (multipart when large), and the stage yields what was stored, in input order.
    Iterate the pipeline (or call `upload_all`) to drive it.

    @code
    auto stored = conveyor::file::files(listing) | conveyor::s3::upload(c, "bucket", {.prefix = "train/"});
    for (const auto& r : stored.on(rt)) std::printf("%s %s\n", r.key.c_str(), r.etag.c_str());
    @endcode
*/
CONVEYOR_DECL upload_stage upload(client c, std::string bucket, upload_options o = {});

/// Drives `p | upload(...)` to the end and returns how many objects and bytes were stored.
template <class Pipeline>
std::pair<std::size_t, std::uint64_t> upload_all(Pipeline&& p, client c, std::string bucket, upload_options o = {})
{
    std::size_t n = 0;
    std::uint64_t bytes = 0;
    for (const auto& r : (std::forward<Pipeline>(p) | upload(std::move(c), std::move(bucket), std::move(o)))) {
        ++n;
        bytes += r.bytes;
    }
    return {n, bytes};
}

} // namespace conveyor::s3

#if CONVEYOR_HEADER_ONLY
#include <conveyor/s3/impl/source.ipp>
#endif

#endif
