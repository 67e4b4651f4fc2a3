// conveyor/shard/source.hpp — the shard source: a list of tar shards read as a stream of
// samples, several shards at once, each streamed in prefetched chunks, divided among ranks
// and workers, in a per-epoch order, resumable.
#ifndef CONVEYOR_SHARD_SOURCE_HPP
#define CONVEYOR_SHARD_SOURCE_HPP

#include <conveyor/core/chunks.hpp>
#include <conveyor/core/order.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/run_context.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/s3/client.hpp>
#include <conveyor/shard/list.hpp>
#include <conveyor/shard/sample.hpp>
#include <conveyor/shard/tar_options.hpp>
#include <conveyor/store/context.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor::shard {

/// Settings of the shard source.
struct source_options {
    /// Seed, whether shards are shuffled each epoch, and the rule for uneven counts.
    order_options order{};
    /// Which share of each epoch this reader takes; unset: rank and world size from the
    /// launcher's environment (`split_from_environment()`), one worker.
    std::optional<split> share;
    /// Draw shards at random with replacement, forever (webdataset's ResampledShards),
    /// instead of reading each shard of the epoch once. A run then never ends: bound it
    /// with `take()`. Resume state is not kept in this mode.
    bool resampled = false;
    /// Shards read at once. Their samples are interleaved one by one, in a fixed order (the
    /// first open shard's next sample, then the second's, ...), so for a given seed and
    /// epoch the stream's order does not depend on timing. 0: `default_shards_in_flight`
    /// of the list: more when any shard is on S3 or a web server, where one connection
    /// alone streams far below the link. Each costs its read-ahead
    /// (`chunks.chunks_in_flight` x `chunks.chunk_size`) of memory, taken chunk by chunk
    /// from the runtime's memory budget.
    unsigned shards_in_flight = 0;
    /// How each shard is read: chunk size and chunks requested ahead (prefetch).
    chunk_options chunks{};
    /// Tar rules and limits.
    tar_options tar{};
    /// A shard that cannot be read or parsed fails the run, or (`skip`) the rest of that
    /// shard is left out, counted in the run's stats and logged, and the epoch goes on.
    on_error errors = on_error::fail;
    /// Samples waiting between the source and the next stage.
    std::size_t capacity = 256;
    /// The client for `s3://` shards (a `client` is a cheap handle; copies share it).
    std::optional<s3::client> s3;
    /// Settings of the web clients for `http(s)://` shards and indexes: TLS (CA file or
    /// folder, verification), timeouts, connections per server.
    http::client_options http{};
    /// A node-local cache for remote shards (`store::cached_store`): the first epoch writes
    /// each shard to it as it is read, later epochs (and other processes) read it from there.
    std::optional<store::cache_options> cache;
    /** The store context every read of the source goes through, shared with other sources
        (its S3 client, web clients and cache; its runtime serves local and web reads).
        Null: each run makes one of `s3`, `http` and `cache` on the run's runtime. When
        given, `s3`, `http` and `cache` are not used (set them in the context). */
    std::shared_ptr<const store::context> store;
    /** Where the run records how far it got, and where a restart resumes from. At the start
        of a run: when it holds a state for the run's epoch (restored with
        `progress::from_json`, or merged from all ranks with `progress::merge`), the run
        reads only what that state has left, divided among this run's slots; otherwise it
        is begun afresh for the epoch. Mark samples with `progress::consumed()` as training
        uses them; save `to_json()` whenever a checkpoint is saved. Null: no state kept. */
    std::shared_ptr<progress> resume;
};

/// The shards a source reads at once when `source_options::shards_in_flight` is 0: 4 for a
/// list of local shards, 12 when any is remote (`store::is_remote`: S3, http). Throws
/// `conveyor::error` naming a URL that is not a location (`conveyor::location`).
CONVEYOR_DECL unsigned default_shards_in_flight(const std::vector<shard_ref>& list);

/** The samples of the shards in `list`: each epoch (each run of the pipeline) reads this
    slot's share of the epoch's work list (see `epoch_work`), `shards_in_flight` shards at
    once, each streamed in chunks of `chunks.chunk_size` with `chunks.chunks_in_flight`
    prefetched; tar members are grouped into samples by webdataset's rule (see untar.hpp).
    Each shard is read by the store of its location (`store::open_chunks`): local paths
    through the runtime's io_uring rings, `s3://` URLs with `options.s3`, `http(s)://` URLs
    with a plain streamed GET each. Memory per open shard is at most the chunks in flight
    plus the largest member that spans two chunks.
    Each sample carries its key, its shard's URL, its fields (slices of the chunks, no
    copies), and its place (`shard`, `work`, `index`, `offset`, `end`) for resume and
    random access.
    @code
    auto state = std::make_shared<conveyor::progress>();
    auto pipe = conveyor::shard::shards(conveyor::shard::resolve("/data/shard-{000000..000146}.tar"),
                                        {.order = {.seed = 7}, .resume = state})
              | conveyor::shuffle({.buffer = 10'000, .seed = 7});
    for (auto& s : pipe) { train(s); state->consumed(s); }
    @endcode
*/
CONVEYOR_DECL pipeline<sample> shards(std::vector<shard_ref> list, source_options options = {});

/// The shards of `spec` (see `resolve`; S3 specs use `options.s3`).
CONVEYOR_DECL pipeline<sample> shards(std::string_view spec, source_options options = {});

} // namespace conveyor::shard

#if CONVEYOR_HEADER_ONLY
#include <conveyor/shard/impl/source.ipp>
#endif

#endif
