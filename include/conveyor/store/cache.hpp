// conveyor/store/cache.hpp — a node-local cache of remote objects: a store that wraps
// another, keyed by URL and ETag. `open_store` puts one around every remote store when
// `store_options::cache` is set.
#ifndef CONVEYOR_STORE_CACHE_HPP
#define CONVEYOR_STORE_CACHE_HPP

#include <conveyor/detail/config.hpp>
#include <conveyor/store/store.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace conveyor::store {

/// What a cache did in this process (all the stores over one folder together).
struct cache_stats {
    std::uint64_t hits = 0;     ///< reads served from the cache's folder
    std::uint64_t misses = 0;   ///< objects fetched from the remote store and written to the folder
    std::uint64_t stale = 0;    ///< cached files of another version (ETag) found, and fetched again
    std::uint64_t invalid = 0;  ///< cached files found truncated or altered (size, CRC-32C), fetched again
    std::uint64_t waits = 0;    ///< reads that waited while another reader (any process) fetched the object
    std::uint64_t bypassed = 0; ///< reads sent straight to the remote store (the folder unusable, or a ranged read of an uncached object)
    std::uint64_t evicted = 0;  ///< files removed to stay under `cache_options::max_bytes`
    std::uint64_t leftovers = 0;     ///< temporary files of crashed runs removed when the cache was opened
    std::uint64_t bytes_written = 0; ///< object bytes written to the folder
    std::uint64_t warnings = 0;      ///< 0, or 1 once the folder was found unusable (said once on stderr)
};

namespace detail {
struct cache_state;
} // namespace detail

/** A node-local cache of the objects of a remote store, in one folder that several
    processes of a node (one per GPU) may share.

    - **Keys.** An object is cached under its location's URL (`location::url()`) and its
      ETag (`store::async_version`). The file's name is a hash of the URL (a key such as
      `../../etc/x` names nothing outside the folder); a header in the file holds the URL,
      the ETag, the object's size and its CRC-32C.
    - **Versions.** The first read of each object in a run (a run: this process, or since
      `start_cache_run`) asks the remote store for its version (an S3 HeadObject); a
      cached file of another version is fetched again. With `cache_options::trust` a
      cached file is served without asking.
    - **Checks.** A cached file is served only when its size is the header's; the first
      time a run opens it, its CRC-32C is checked over the whole file too (files this run
      wrote are known good). A file that fails either is fetched again, never served.
      (So a file altered in place, same size, after a run checked it, is served until the
      next run.)
    - **Writes.** An object is written to a temporary file as it is fetched (one GET: the
      bytes the reader gets are those written), fsynced (`cache_options::fsync`) and
      renamed to its name when whole, so no reader ever sees a partial file. Temporary
      files of crashed runs are removed when a run first opens the folder.
    - **One fetch per node.** An advisory lock (`flock`) per object, in `locks/`, is held
      by the reader fetching it; readers of the same object in other processes (or this
      one) wait for it to be published and read the file.
    - **Eviction.** Least recently used first (by the files' modification times, touched on
      each hit) when the files' bytes pass `cache_options::max_bytes`, checked as objects
      are published; several processes may each be one object over before they see it.
    - **Failure.** A folder that cannot be written (read-only, full disk, quota, a file size
      limit) is said once on stderr (`cache_stats::warnings`); from then on the run reads
      around it (objects already cached are still served). The read that met the failure
      goes on: its object is read again from the remote store.

    Reads: `async_read` reads the object whole (fetch, then write from memory);
    `read_chunks` of an uncached object streams it to the cache file at the network's pace,
    whatever the consumer's, then serves the chunks from the file (so a slow consumer never
    holds another process waiting on the lock); `async_open` (ranged reads) serves a cached
    object from its file, and passes an uncached one through to the remote store, uncached
    (a few members of a shard do not justify fetching all of it).

    @par Thread Safety
    Safe. */
class cached_store final : public store {
public:
    /// A cache in `o.dir` (made if missing) over `inner`; stores over the same folder in one
    /// process share their run's state and statistics.
    CONVEYOR_DECL cached_store(std::shared_ptr<const store> inner, const cache_options& o);

    /// The store the objects come from.
    const std::shared_ptr<const store>& inner() const noexcept { return inner_; }

    runtime& rt() const override { return inner_->rt(); }
    bool remote() const noexcept override { return inner_->remote(); }
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<slice> async_read(location where, std::int64_t size_hint = -1) const override;
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<object_version> async_version(location where) const override;
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<std::shared_ptr<const ranged_object>> async_open(location where) const override;
    CONVEYOR_DECL std::unique_ptr<chunk_reader> read_chunks(const location& where, const chunk_options& o) const override;
    /// The remote store's listing.
    CONVEYOR_DECL std::vector<listed_object> list(const location& where) const override;
    /// Writes go to the remote store (a cached copy is found stale by its ETag next run).
    CONVEYOR_DECL std::unique_ptr<object_writer> open_writer(const location& where, const write_options& o) const override;

    /// What this cache's folder did in this process so far.
    CONVEYOR_DECL cache_stats stats() const;

private:
    std::shared_ptr<const store> inner_;
    std::shared_ptr<detail::cache_state> state_;
};

/// The statistics of the cache in `dir` in this process (zeros when none was opened).
CONVEYOR_DECL cache_stats cache_stats_of(const std::string& dir);

/** Starts a new run of the cache in `dir` in this process: stores opened from now on
    check versions and checksums again and clean up leftovers, as a new process would
    (stores already open keep the old run). For tools and tests that model several runs
    in one process. */
CONVEYOR_DECL void start_cache_run(const std::string& dir);

} // namespace conveyor::store

#if CONVEYOR_HEADER_ONLY
#include <conveyor/store/impl/cache.ipp>
#endif

#endif
