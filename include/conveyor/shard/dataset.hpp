// conveyor/shard/dataset.hpp — random access to the samples of a sharded dataset through
// its index: sample i fetched by one ranged read of its shard.
#ifndef CONVEYOR_SHARD_DATASET_HPP
#define CONVEYOR_SHARD_DATASET_HPP

#include <conveyor/core/runtime.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/s3/client.hpp>
#include <conveyor/store/context.hpp>
#include <conveyor/shard/index.hpp>
#include <conveyor/shard/sample.hpp>
#include <conveyor/shard/tar_options.hpp>

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace conveyor::shard {

namespace detail {
struct dataset_state;
} // namespace detail

/// Settings of a sharded dataset.
struct dataset_options {
    /// The client for `s3://` shards and an `s3://` index.
    std::optional<s3::client> s3;
    /// Settings of the web clients for `http(s)://` shards and indexes (TLS, timeouts).
    http::client_options http{};
    /** The store context every read goes through, shared with other readers. Null: the
        dataset makes one of `s3` and `http` on its runtime. When given, `s3` and `http`
        are not used. */
    std::shared_ptr<const store::context> store;
    /// Tar rules and limits, as for the shard source.
    tar_options tar{};
    /// Shards kept open at once (each read opens its shard when it is not): a local one
    /// holds its file open; a remote one is its name and client.
    std::size_t max_open_files = 256;
    /// The largest index read (see `load_index`).
    std::uint64_t max_index_bytes = conveyor::detail::default_max_index_bytes;
};

/** Map-style random access to the samples of a sharded dataset, through the index the shard
    writer wrote (`examples/make_shards --index`): `async_get(i)` (or the blocking `get(i)`)
    reads sample `i` — numbered across the shards in index order — with one ranged read of
    its shard: `pread` through the I/O lane's io_uring ring for a local shard, a ranged GET
    for an `s3://` one or an `http(s)://` one (on its server's pooled keep-alive
    connections). Only that sample's bytes are read; its members are parsed as the
    shard reader parses them, so the sample is the one the stream would give, with its
    offsets. Calls may overlap freely (many in flight is the point).
    A sample whose bytes do not hold what the index says (the shard was rewritten since)
    fails with `errc` naming the shard and offset. Compressed shards cannot be entered at an
    offset: a dataset refuses them when it is made.
    @par Thread Safety
    Safe.
*/
class dataset {
public:
    /** A dataset over `index`; relative shard URLs are taken relative to `base` (the folder
        the index came from, with its trailing '/'; empty: as they are). */
    CONVEYOR_DECL dataset(dataset_index index, std::string base, runtime& rt = runtime::shared(), dataset_options o = {});

    /** Reads the index at `index_url` (any location a store reads: a local path, `s3://…`,
        `http(s)://…`; blocking) and makes the dataset over it. Throws `conveyor::error` naming the index when it cannot. */
    CONVEYOR_DECL static dataset open(const std::string& index_url, runtime& rt = runtime::shared(), dataset_options o = {});

    /// Samples in all shards.
    CONVEYOR_DECL std::size_t size() const noexcept;
    /// The index, with shard URLs as given.
    CONVEYOR_DECL const dataset_index& index() const noexcept;
    /// Which shard and which of its entries sample `i` is.
    CONVEYOR_DECL std::pair<std::size_t, std::size_t> locate(std::size_t i) const;
    /// The URL shard `s` is read from (relative URLs resolved).
    CONVEYOR_DECL const std::string& shard_url(std::size_t s) const;

    /** Reads sample `i`. Throws `conveyor::error` naming the shard and offset when it cannot
        (and `errc::result_out_of_range` for an `i` past the end).
        @par Completion Signature
        `shard::sample` */
    [[nodiscard]] CONVEYOR_DECL asio::awaitable<sample> async_get(std::size_t i) const;

    /// Reads sample `i`, blocking the calling thread (which must not be an I/O thread).
    CONVEYOR_DECL sample get(std::size_t i) const;

private:
    std::shared_ptr<detail::dataset_state> s_;
};

} // namespace conveyor::shard

#if CONVEYOR_HEADER_ONLY
#include <conveyor/shard/impl/dataset.ipp>
#endif

#endif
