// conveyor/shard/order.hpp — which shards each rank and worker reads in an epoch, in what
// order, and how far a run got (resume state that survives a change of world size).
#ifndef CONVEYOR_SHARD_ORDER_HPP
#define CONVEYOR_SHARD_ORDER_HPP

#include <conveyor/detail/config.hpp>
#include <conveyor/shard/sample.hpp>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor::shard {

/** Which share of the data this reader takes: rank `rank` of `world_size` processes, and
    worker `worker` of `workers` inside that process. The `world_size × workers` slots
    divide every epoch between them; slot `rank × workers + worker` is this one. */
struct split {
    std::uint64_t rank = 0;
    std::uint64_t world_size = 1;
    std::uint64_t worker = 0;
    std::uint64_t workers = 1;

    std::uint64_t slot() const noexcept { return rank * workers + worker; }
    std::uint64_t slots() const noexcept { return world_size * workers; }
};

/** The rank and world size the launcher set in the environment, first found of:
    `RANK`/`WORLD_SIZE` (torchrun, torch.distributed), `SLURM_PROCID`/`SLURM_NTASKS`,
    `OMPI_COMM_WORLD_RANK`/`OMPI_COMM_WORLD_SIZE`; rank 0 of 1 when none is set. Worker
    `worker` of `workers` is taken as given. Throws `conveyor::error`
    (`errc::invalid_argument`) naming the variables when a pair is half set, not a number,
    or the rank is not below the size. */
CONVEYOR_DECL split split_from_environment(std::uint64_t worker = 0, std::uint64_t workers = 1);

/** What an epoch does when its shards do not divide evenly among the slots. Every rank
    must take the same number of steps in data-parallel training (one that runs out first
    leaves the others waiting in a collective forever), so an epoch always gives every
    slot the same number of shards:
    - `drop`: the shards past the last whole round are left out of this epoch. Shard order
      changes each epoch, so a different few are left out each time; none is lost for
      good. Fewer shards than slots is an error (nothing to give some slots).
    - `pad`: the last round is filled by reading shards from the start of the epoch's
      order again; those samples are seen twice in that epoch. */
enum class uneven { drop, pad };

/// How an epoch's shards are ordered and divided.
struct order_options {
    /// With the epoch, fixes the order: every rank computes the same order alone.
    std::uint64_t seed = 0;
    /// Shuffle the shards each epoch (false: list order, every epoch).
    bool shuffle = true;
    uneven policy = uneven::drop;
};

/** The epoch's work list: shard indices (into a list of `shards` shards) in the order the
    epoch reads them, after `policy` made its length a multiple of `slots`. A pure function
    of its arguments. Slot `s` reads positions `s`, `s + slots`, `s + 2 × slots`, ….
    Throws `conveyor::error` (`errc::invalid_argument`) when there are no shards, or, under
    `uneven::drop`, fewer shards than slots. */
CONVEYOR_DECL std::vector<std::uint64_t> epoch_work(std::uint64_t shards, std::uint64_t slots, std::uint64_t epoch, const order_options& o);

/** Draw `k` of slot `slot` in resampled mode (webdataset's ResampledShards): a shard index
    uniform in [0, shards), independent for each (seed, epoch, slot, k). Shards are drawn
    with replacement, forever. */
CONVEYOR_DECL std::uint64_t resampled_draw(std::uint64_t shards, std::uint64_t seed, std::uint64_t epoch, std::uint64_t slot, std::uint64_t k) noexcept;

/** One piece of an epoch left to read: the shard at work position `work`, from sample
    `first` (which starts at byte `offset`), leaving out the samples in `skip` (consumed
    before a restart, while earlier ones were still in a shuffle buffer). */
struct work_piece {
    std::uint64_t work = 0;
    std::uint64_t shard = 0;
    std::uint64_t first = 0;
    std::uint64_t offset = 0;
    std::vector<std::uint64_t> skip; ///< sorted sample indices, each >= first
};

/** How far an epoch got: which samples the consumer has used, per shard of the epoch's
    work list. Save it with `to_json()` (a small text: one entry per shard begun) and
    restore it by passing it to `shards()` (see `source_options::resume`).

    Mark each sample with `consumed()` once the training step has used it (after the
    optimizer step, say), not when it leaves the pipeline: samples that wait in a shuffle
    buffer, a queue or a batch when the job stops are then read again after the restart.
    **The guarantee:** after a restore, the rest of the epoch delivers exactly the samples
    of the epoch that were not marked, each once, and none that was — whatever the shuffle
    buffer held. The order of those samples is not the order the interrupted run would have
    taken (the shuffle buffer starts empty again); it is a pure function of the seed, the
    epoch and the saved state.

    **Elastic restarts.** Each rank saves its own state; `merge()` joins the states of all
    ranks (gather them, e.g. with `torch.distributed.all_gather_object`), and the merged
    state restored with a different number of ranks or workers re-divides what is left of
    the epoch among the new slots, still each sample once. After such a re-division the
    slots' shares may differ by one piece of work: limit steps with `take()` where every
    rank must take the same number.

    @par Thread Safety
    Safe: `consumed()` may be called from the training thread while another saves.
*/
class progress {
public:
    progress() = default;
    CONVEYOR_DECL progress(const progress& o);
    CONVEYOR_DECL progress& operator=(const progress& o);

    /// Starts recording epoch `epoch` of a list of `shards` shards divided among `slots`
    /// slots (the shard source does this when a run starts).
    CONVEYOR_DECL void begin(std::uint64_t epoch, std::uint64_t shards, std::uint64_t slots, const order_options& o);

    /// Records that the sample `id` was used.
    CONVEYOR_DECL void consumed(const sample_id& id);
    void consumed(const sample& s) { consumed(id_of(s)); }

    /// Samples recorded (all shards, all slots merged in).
    CONVEYOR_DECL std::uint64_t samples() const;
    /// The epoch this state belongs to.
    CONVEYOR_DECL std::uint64_t epoch() const;
    /// True when nothing was recorded (no epoch begun).
    CONVEYOR_DECL bool empty() const;

    /** The state as JSON, e.g. `{"format":"conveyor-shard-progress","version":1,
        "epoch":3,"seed":7,"shuffle":true,"policy":"drop","shards":147,"slots":8,
        "work":[{"work":12,"shard":40,"next":118,"offset":13096448,"done":[120,121]}]}`. */
    CONVEYOR_DECL std::string to_json() const;
    /// Reads `to_json()`'s text; throws `conveyor::error` (`errc::invalid_argument`) saying
    /// what is wrong with it.
    CONVEYOR_DECL static progress from_json(std::string_view text);

    /** The union of the states of several slots of one epoch. Throws `conveyor::error`
        (`errc::invalid_argument`) when they belong to different epochs, seeds or lists. */
    CONVEYOR_DECL static progress merge(const std::vector<progress>& parts);

    /** What slot `slot` of `slots` has left to read of the epoch, in order: the epoch's
        work list (recomputed from the saved seed, policy and the slot count *at the time
        the epoch began*) less what was consumed, divided round-robin among the new
        `slots`. With nothing recorded, this is the plain division of the epoch. Throws
        `conveyor::error` (`errc::invalid_argument`) when `shards` differs from the saved
        count (a different list). */
    CONVEYOR_DECL std::vector<work_piece> remaining(std::uint64_t shards, std::uint64_t slot, std::uint64_t slots) const;

    /// The options the epoch began with.
    CONVEYOR_DECL order_options options() const;

private:
    struct shard_state {
        std::uint64_t shard = 0;
        std::uint64_t next = 0;     // every sample below `next` was consumed
        std::uint64_t offset = 0;   // where sample `next` starts
        std::map<std::uint64_t, std::uint64_t> done; // consumed samples past `next`: index -> end
    };
    static void add(shard_state& st, std::uint64_t index, std::uint64_t end);

    mutable std::mutex mu_;
    bool begun_ = false;
    std::uint64_t epoch_ = 0;
    std::uint64_t shards_ = 0;
    std::uint64_t slots_ = 1;
    order_options opts_{};
    std::map<std::uint64_t, shard_state> work_; // by work position
};

} // namespace conveyor::shard

#if CONVEYOR_HEADER_ONLY
#include <conveyor/shard/impl/order.ipp>
#endif

#endif
