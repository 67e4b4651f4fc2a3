// conveyor/store/store.hpp — the one interface to where data lives: read whole, read a
// range, stream chunks, list, write. A location (core/location.hpp) says which store
// serves it; a store context (store/context.hpp) maps one to the other.
#ifndef CONVEYOR_STORE_STORE_HPP
#define CONVEYOR_STORE_STORE_HPP

#include <conveyor/core/chunks.hpp>
#include <conveyor/core/location.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/slice.hpp>
#include <conveyor/detail/config.hpp>

#include <boost/asio/awaitable.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor::store {

/** A node-local cache of remote objects (`store/cache.hpp`): where it lives and how big it
    may grow. Several processes of one node may share one folder. */
struct cache_options {
    /// The cache's folder (made if missing). Files in it are named by a hash of the key,
    /// never by the key.
    std::string dir;
    /// Bytes of cached objects kept at most (least recently used evicted first); 0: no limit.
    std::uint64_t max_bytes = 0;
    /** Serve a cached object without asking the remote store whether it changed. False:
        the first read of each object in a run asks for its version (an S3 HeadObject)
        and refetches a changed object. */
    bool trust = false;
    /// fsync each object's file before it is renamed into place (and its folder after).
    bool fsync = true;
};

/// Which version of an object a store holds (`store::async_version`).
struct object_version {
    std::string etag;       ///< the ETag as the store sent it (quotes included); empty: unknown
    std::int64_t size = -1; ///< bytes, or -1 when unknown
};

/// One object found by `store::list`.
struct listed_object {
    std::string url;        ///< its location's `url()`
    std::int64_t size = -1; ///< bytes, when the listing says
};

/// Settings of an object being written.
struct write_options {
    /// S3: the object's MIME type.
    std::string content_type = "application/octet-stream";
    /// Local: fsync the file before it is renamed into place, and its folder after.
    bool fsync = false;
    /// Local: bytes gathered before each write(2).
    std::size_t write_buffer = 4u << 20;
};

/** An object opened for ranged reads (a local file stays open while this lives; a remote
    object is a name and a client).
    @par Thread Safety
    Safe: reads may overlap. */
class ranged_object {
public:
    virtual ~ranged_object() = default;
    /** Reads `length` bytes from `offset` (fewer when the object ends first).
        @par Completion Signature
        `slice` */
    [[nodiscard]] virtual asio::awaitable<slice> async_read(std::uint64_t offset, std::uint64_t length) const = 0;
};

/** An object being written: bytes go in order, and it appears under its name only when
    committed, whole. Local files are written beside their name and renamed into place;
    S3 objects go up as a multipart upload, parts sent as they fill (one PutObject when
    the object stays under one part).
    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe. */
class object_writer {
public:
    /// Abandons the object unless it was committed.
    virtual ~object_writer() = default;
    /// Appends `bytes`. Blocking. @throws conveyor::error naming the object.
    virtual void write(std::span<const std::byte> bytes) = 0;
    /// Makes the object visible under its name. Blocking. @throws conveyor::error naming it.
    virtual void commit() = 0;
    /// Removes what was written (the temporary file, the upload). Never throws.
    virtual void abandon() noexcept = 0;
};

/** Where objects of one kind live. A store is made by `open_store` for a location and
    serves every location of that kind (with the same options).

    The asynchronous reads run on the I/O threads of the store's runtime (a call from
    elsewhere hops there); the blocking calls (`read`, `list`, `open_writer` and the
    writer's calls) must not be made on one of them. Errors are `conveyor::error` naming
    the location.
    @par Thread Safety
    Safe. */
class store {
public:
    virtual ~store() = default;

    /// The runtime whose I/O threads serve the reads.
    virtual runtime& rt() const = 0;

    /// True when every read costs a round trip over a network (the shard source then
    /// opens more objects at once).
    virtual bool remote() const noexcept = 0;

    /** Reads the whole object at `where`. `size_hint` is its size in bytes when a listing
        told it (-1: unknown): a hint, never a check, that lets a remote store fetch a large
        object in parallel parts at once (S3) and a small one in a single request.
        @par Completion Signature
        `slice` */
    [[nodiscard]] virtual asio::awaitable<slice> async_read(location where, std::int64_t size_hint = -1) const = 0;

    /** The version of the object at `where` now (S3: a HeadObject), without its bytes.
        By default unknown (an empty ETag): such objects are taken as never changing.
        @par Completion Signature
        `object_version` */
    [[nodiscard]] CONVEYOR_DECL virtual asio::awaitable<object_version> async_version(location where) const;

    /** Opens the object at `where` for ranged reads (a local file is opened on the
        runtime's blocking pool, so a hung mount does not stall the I/O thread).
        @par Completion Signature
        `std::shared_ptr<const ranged_object>` */
    [[nodiscard]] virtual asio::awaitable<std::shared_ptr<const ranged_object>> async_open(location where) const = 0;

    /** Reads `length` bytes from `offset` of the object at `where` (fewer when it ends
        first): `async_open`, then one read.
        @par Completion Signature
        `slice` */
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<slice> async_read_range(location where, std::uint64_t offset, std::uint64_t length) const;

    /** A reader of the object at `where` in chunks, from `o.offset`, with `o.chunks_in_flight`
        read ahead and each chunk taken from the runtime's memory budget when
        `o.use_memory_budget` (see `chunk_reader`). */
    virtual std::unique_ptr<chunk_reader> read_chunks(const location& where, const chunk_options& o) const = 0;

    /** The objects under the prefix `where` (a folder, or an S3 prefix; see
        `location::is_prefix`), all levels down, sorted by URL. Blocking. */
    virtual std::vector<listed_object> list(const location& where) const = 0;

    /// Starts writing the object at `where` (see `object_writer`). Blocking.
    virtual std::unique_ptr<object_writer> open_writer(const location& where, const write_options& o) const = 0;

    /// Reads the whole object at `where`, blocking the calling thread (which must not be
    /// one of the runtime's I/O threads). By default `async_read` run on the runtime.
    CONVEYOR_DECL virtual slice read(const location& where) const;

    /** Reads the whole of a small object at `where` (an index, a listing, a label map),
        blocking as `read` does, and refuses one of more than `max_bytes` with a
        `conveyor::error` (`std::errc::file_too_large`) whose detail names `limit_name`, the
        setting that raises the limit: a local file before any of it is read, a remote
        object before its bytes are fetched where the store tells its size first
        (`async_version`: S3's HeadObject), otherwise once it has come. */
    CONVEYOR_DECL slice read_small(const location& where, std::uint64_t max_bytes, std::string_view limit_name) const;

private:
    CONVEYOR_DECL slice run_blocking(const location& where, asio::awaitable<slice> a) const;
    CONVEYOR_DECL asio::awaitable<slice> async_read_small(location where, std::uint64_t max_bytes, std::string limit_name) const;
};

} // namespace conveyor::store

#if CONVEYOR_HEADER_ONLY
#include <conveyor/store/impl/store.ipp>
#endif

#endif
