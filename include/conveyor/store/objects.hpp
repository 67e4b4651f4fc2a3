// conveyor/store/objects.hpp — the object source: whole objects of any store (local files,
// s3://, http(s)://) read through one store context, many at once, as blobs; the node
// cache serves them when the context has one.
#ifndef CONVEYOR_STORE_OBJECTS_HPP
#define CONVEYOR_STORE_OBJECTS_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/order.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/store/context.hpp>
#include <conveyor/store/store.hpp>

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace conveyor::store {

/** The objects an object source reads: their URLs (of any store), with sizes where a
    listing gave them (`store::list` does), and labels. */
struct object_list {
    std::vector<listed_object> objects;
    /// The class id of each object, in the order of `objects`; empty: no labels (the
    /// blobs' label is -1). Either empty or as long as `objects` (the source refuses a list
    /// where it is neither).
    std::vector<std::int64_t> labels;
    /// Class names by id, when `labels` is set.
    std::vector<std::string> classes;

    std::size_t size() const noexcept { return objects.size(); }
    bool empty() const noexcept { return objects.empty(); }

    /// A list of the given URLs or paths (sizes unknown).
    static object_list from_urls(const std::vector<std::string>& urls)
    {
        object_list l;
        l.objects.reserve(urls.size());
        for (const auto& u : urls) l.objects.push_back({u, -1});
        return l;
    }
};

/** Settings of the object sources: `store::objects` and `s3::objects` (whose
    `s3::source_options` this is). */
struct objects_options {
    /// Objects in flight at once, spread over the I/O threads. (Large S3 objects add their
    /// ranged parts; the client's connection limit bounds both.)
    std::size_t concurrency = 64;
    /// Deliver in list order (true) or as objects arrive (false).
    bool ordered = true;
    /// An object that cannot be read fails the pipeline, or is skipped, counted and logged.
    on_error errors = on_error::fail;
    /// Blobs waiting between the source and the next stage (at least `concurrency`).
    std::size_t capacity = 64;
    /// Called on an I/O thread after each object arrives, with the time it took (retries
    /// included). Must be thread-safe and cheap.
    std::function<void(const blob&, std::chrono::nanoseconds)> on_read;
    /// Which objects each run reads, in what order, and its resume state (`epoch_options`;
    /// default: the whole list, in list order).
    epoch_options epochs{};
    /** A node-local cache of the remote objects (`store::cached_store`): the first epoch
        fetches each object and writes it to the folder, later epochs (and other processes
        of the node) read it from there. Not used when `store` is given (set it in the
        context). */
    std::optional<cache_options> cache;
    /** The store context the reads go through (its S3 client, web clients per server and
        node cache), shared with other sources. Null: a context of the source's own, on the
        run's runtime, with `cache` (and, for `s3::objects`, its client). `s3::objects`
        refuses a context whose S3 client (`store_options::s3`) is not the one it is given. */
    std::shared_ptr<const context> store;
};

/** The object source: reads every object of a list whole, many at once, each through the
    store of its location (`context::store_for`), so a list may mix local paths, `s3://`
    and `http(s)://` objects; with a cache in the context, remote objects are served from
    the node's folder after their first read (`cached_store`).

    A blob's key is the object's name in its store (the key of an `s3://` object, the path
    of a local file, the path of a web object), its origin the URL (user-info hidden), its
    label the list's label for it (or -1). Errors name the URL.

    @code
    auto ctx = conveyor::store::make_context({.s3 = client, .cache = conveyor::store::cache_options{.dir = "/local/cache"}});
    auto list = conveyor::store::object_list::from_urls({"s3://bucket/a.jpg", "https://host/b.jpg", "/data/c.jpg"});
    for (auto& b : conveyor::store::objects(std::move(list), {.store = ctx}))
        use(b.key, b.data.span());
    @endcode */
CONVEYOR_DECL pipeline<blob> objects(std::shared_ptr<const object_list> list, objects_options o = {});

/// Reads the objects of `list` (moved into the pipeline).
CONVEYOR_DECL pipeline<blob> objects(object_list list, objects_options o = {});

/// Reads the objects at the given URLs or paths.
CONVEYOR_DECL pipeline<blob> objects(const std::vector<std::string>& urls, objects_options o = {});

namespace detail {

/// The name of the object at `where` in its store: the blob key the object sources give.
CONVEYOR_DECL std::string object_name(const location& where);

/// Throws `conveyor::error` naming `where` (and `stage`) unless `labels` is empty or has one
/// label for each of `count` objects.
CONVEYOR_DECL void check_labels(std::size_t labels, std::size_t count, std::string_view stage, std::string_view where);

/** Reads the object at `where` whole through `st`, as object `i` of its list: `b` (its key,
    origin and label set by the caller) with the bytes. The one read of the object sources
    (this one and `s3::objects`).
    @par Completion Signature
    `blob` */
CONVEYOR_DECL asio::awaitable<blob> read_object_blob(std::shared_ptr<const store> st, location where, std::int64_t size_hint,
                                                     blob b);

} // namespace detail

} // namespace conveyor::store

#if CONVEYOR_HEADER_ONLY
#include <conveyor/store/impl/objects.ipp>
#endif

#endif
