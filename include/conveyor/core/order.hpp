// conveyor/core/order.hpp — what each rank and worker reads of a list (files, objects,
// shards) in an epoch, in what order, and how far a run got: one resume state for every
// source, mergeable across ranks and restorable on another world size.
#ifndef CONVEYOR_CORE_ORDER_HPP
#define CONVEYOR_CORE_ORDER_HPP

#include <conveyor/detail/config.hpp>

#include <concepts>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor {

class mix_progress;
namespace detail {
struct mix_access;
} // namespace detail

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

/// `s`; throws `conveyor::error` (`errc::invalid_argument`, naming `stage`) when it is not
/// a valid share (a count of 0, a rank or worker not below its count).
CONVEYOR_DECL split checked_split(const split& s, std::string_view stage);

/** What an epoch does when its list (of shards, files or objects: its *units*) does not
    divide evenly among the slots. Every rank must take the same number of steps in
    data-parallel training (one that runs out first leaves the others waiting in a
    collective forever), so an epoch always gives every slot the same number of units:
    - `drop`: the units past the last whole round are left out of this epoch. The order
      changes each epoch (when shuffled), so a different few are left out each time; none
      is lost for good. Fewer units than slots is an error (nothing to give some slots).
    - `pad`: the last round is filled by reading units from the start of the epoch's order
      again; those are seen twice in that epoch. */
enum class uneven { drop, pad };

/// How an epoch's units are ordered and divided.
struct order_options {
    /// With the epoch, fixes the order: every rank computes the same order alone.
    std::uint64_t seed = 0;
    /// Shuffle the units each epoch (false: list order, every epoch).
    bool shuffle = true;
    uneven policy = uneven::drop;
};

/** The epoch's work list: unit indices (into a list of `units` shards, files or objects)
    in the order the epoch reads them, after `policy` made its length a multiple of `slots`.
    A pure function of its arguments. Slot `s` reads positions `s`, `s + slots`,
    `s + 2 × slots`, …. Throws `conveyor::error` (`errc::invalid_argument`) when there are
    no units, or, under `uneven::drop`, fewer units than slots. */
CONVEYOR_DECL std::vector<std::uint64_t> epoch_work(std::uint64_t units, std::uint64_t slots, std::uint64_t epoch, const order_options& o);

/** Draw `k` of slot `slot` in resampled mode (webdataset's ResampledShards): a unit index
    uniform in [0, units), independent for each (seed, epoch, slot, k). Units are drawn
    with replacement, forever. */
CONVEYOR_DECL std::uint64_t resampled_draw(std::uint64_t units, std::uint64_t seed, std::uint64_t epoch, std::uint64_t slot, std::uint64_t k) noexcept;

/** What identifies an item for resume: small enough to carry along with decoded samples
    and batches to the point where the training step has used them. A sample of a shard
    names its place inside the shard; a file or object stands for its whole unit (`whole`). */
struct sample_id {
    std::uint64_t work = 0;  ///< position of its unit (shard, file, object) in the epoch's work list
    std::uint64_t shard = 0; ///< index of its unit in the list: the shard, or the file or object itself
    std::uint64_t index = 0; ///< its position in the shard (0 for a whole unit)
    std::uint64_t end = 0;   ///< byte offset just past it in the shard (0 for a whole unit)
    /// Which pass over its source it belongs to, in a `mix` whose exhausted sources start
    /// again (`mix_stop::never`: 0, 1, 2, ...); 0 for the first pass and outside a mix.
    std::uint64_t pass = 0;
    /// The index of its source in a `mix` (0 outside one): which source's state records it.
    std::uint32_t source = 0;
    bool whole = false;      ///< the item is its whole unit (a file or object of a list source)
};

/// An item whose `id_of(item)` (found by argument-dependent lookup) is its `sample_id`: a
/// `blob`, a `shard::sample`, an item type of your own.
template <class Item>
concept identified_item = requires(const Item& i) {
    { id_of(i) } -> std::convertible_to<sample_id>;
};

/** One piece of an epoch left to read: the unit at work position `work`, from sample
    `first` (which starts at byte `offset`), leaving out the samples in `skip` (consumed
    before a restart, while earlier ones were still in a shuffle buffer). */
struct work_piece {
    std::uint64_t work = 0;
    std::uint64_t shard = 0;
    std::uint64_t first = 0;
    std::uint64_t offset = 0;
    std::vector<std::uint64_t> skip; ///< sorted sample indices, each >= first
};

/// One unit of a list source left to read: its work position and its index in the list.
struct work_item {
    std::uint64_t work = 0;
    std::uint64_t item = 0;

    friend bool operator==(const work_item&, const work_item&) = default;
};

/** The plain division of an epoch: what slot `s.slot()` of `s.slots()` reads of a list of
    `units`, in order (positions `slot`, `slot + slots`, … of `epoch_work`). */
CONVEYOR_DECL std::vector<work_item> epoch_share(std::uint64_t units, const split& s, std::uint64_t epoch, const order_options& o);

/** How far an epoch got: which items the consumer has used, for any source. A list source
    (files, objects) records each used unit whole; the shard source records the samples
    used inside each shard begun. Save it with `to_json()` (a small text) and restore it by
    passing it to the source (`epochs.resume` in a list source's options, `resume` in the
    shard source's).

    Mark each item with `consumed()` once the training step has used it (after the
    optimizer step, say), not when it leaves the pipeline: items that wait in a shuffle
    buffer, a queue or a batch when the job stops are then read again after the restart.
    Batches carry their items' ids (`image::image_batch::ids`) for this.
    **The guarantee:** after a restore, the rest of the epoch delivers exactly the items of
    the epoch that were not marked, each once, and none that was — whatever the shuffle
    buffer held. The order of those items is not the order the interrupted run would have
    taken (the shuffle buffer starts empty again); it is a pure function of the seed, the
    epoch and the saved state.

    **Elastic restarts.** Each rank saves its own state; `merge()` joins the states of all
    ranks (gather them, e.g. with `torch.distributed.all_gather_object`), and the merged
    state restored with a different number of ranks or workers re-divides what is left of
    the epoch among the new slots, still each item once. After such a re-division the
    slots' shares may differ by one unit: limit steps with `take()` where every rank must
    take the same number.

    The state of a list source stays small however long the epoch: per slot of the epoch's
    first division, the length of the run of its units used from its start, and the units
    used beyond that run (those still in a shuffle buffer elsewhere).

    @par Thread Safety
    Safe: `consumed()` may be called from the training thread while another saves.
*/
class progress {
public:
    progress() = default;
    CONVEYOR_DECL progress(const progress& o);
    CONVEYOR_DECL progress& operator=(const progress& o);

    /// Starts recording epoch `epoch` of a list of `units` units divided among `slots`
    /// slots (the source does this when a run starts).
    CONVEYOR_DECL void begin(std::uint64_t epoch, std::uint64_t units, std::uint64_t slots, const order_options& o);

    /// Records that the item `id` was used; false when it was recorded already.
    CONVEYOR_DECL bool consumed(const sample_id& id);
    /// Records that `item` was used: anything with an `id_of(item)` (a `blob`, a
    /// `shard::sample`); false when it was recorded already.
    template <identified_item Item>
    bool consumed(const Item& item)
    {
        return consumed(sample_id(id_of(item)));
    }

    /// Items recorded (all units, all slots merged in).
    CONVEYOR_DECL std::uint64_t samples() const;
    /// The epoch this state belongs to.
    CONVEYOR_DECL std::uint64_t epoch() const;
    /// True when nothing was recorded (no epoch begun).
    CONVEYOR_DECL bool empty() const;

    /** The state as JSON, e.g. `{"format":"conveyor-progress","version":1,"epoch":3,
        "seed":7,"shuffle":true,"policy":"drop","shards":147,"slots":8,
        "work":[{"work":12,"shard":40,"next":118,"offset":13096448,"done":[[120,13111296]]}],
        "whole":{"next":[40,41,...],"done":[331]}}` (`work`: shards begun; `whole`: the
        units of a list source used, per slot of the first division). */
    CONVEYOR_DECL std::string to_json() const;
    /// Reads `to_json()`'s text (and the shard source's earlier `conveyor-shard-progress`);
    /// throws `conveyor::error` (`errc::invalid_argument`) saying what is wrong with it.
    CONVEYOR_DECL static progress from_json(std::string_view text);

    /** The union of the states of several slots of one epoch. Throws `conveyor::error`
        (`errc::invalid_argument`) when they belong to different epochs, seeds or lists. */
    CONVEYOR_DECL static progress merge(const std::vector<progress>& parts);

    /** What slot `slot` of `slots` has left to read of the epoch, in order: the epoch's
        work list (recomputed from the saved seed, policy and the slot count *at the time
        the epoch began*) less the units used whole, the `k`-th of what is left going to
        slot `k mod slots`; each with the samples of it used left out. With nothing
        recorded, this is the plain division of the epoch. Throws `conveyor::error`
        (`errc::invalid_argument`) when `units` differs from the saved count (a different
        list). */
    CONVEYOR_DECL std::vector<work_piece> remaining(std::uint64_t units, std::uint64_t slot, std::uint64_t slots) const;

    /// `remaining()` for a list source, whose units are read whole: the units left.
    CONVEYOR_DECL std::vector<work_item> remaining_items(std::uint64_t units, std::uint64_t slot, std::uint64_t slots) const;

    /// The options the epoch began with.
    CONVEYOR_DECL order_options options() const;

private:
    // A mix keeps one per source and pass, and reads their division.
    friend class mix_progress;
    friend struct detail::mix_access;

    struct shard_state {
        std::uint64_t shard = 0;
        std::uint64_t next = 0;     // every sample below `next` was consumed
        std::uint64_t offset = 0;   // where sample `next` starts
        std::map<std::uint64_t, std::uint64_t> done; // consumed samples past `next`: index -> end
    };
    static bool add(shard_state& st, std::uint64_t index, std::uint64_t end);
    bool add_whole(std::uint64_t work);
    void raise_whole(std::uint64_t slot, std::uint64_t next);
    bool used_whole(std::uint64_t work) const;
    template <class F>
    void for_each_left(std::uint64_t units, std::uint64_t slot, std::uint64_t slots, F&& f) const;

    mutable std::mutex mu_;
    bool begun_ = false;
    std::uint64_t epoch_ = 0;
    std::uint64_t shards_ = 0;
    std::uint64_t slots_ = 1;
    order_options opts_{};
    std::map<std::uint64_t, shard_state> work_; // by work position
    // Units used whole: slot `s` of the first division used its units at positions
    // s, s + slots_, … below s + whole_next_[s] × slots_; `whole_done_` the others.
    std::vector<std::uint64_t> whole_next_;
    std::set<std::uint64_t> whole_done_;
    // Calls of remaining() and remaining_items() on this object (not copied): how a mix
    // sees that a source plans its run from the state it was given.
    mutable std::uint64_t plans_ = 0;
};

/** How a list source (files, S3 objects, a `keyed_source` of your own) takes each epoch:
    its order, this reader's share and the resume state. The default reads every unit in
    list order, each run, as the list was given. */
struct epoch_options {
    /// Seed, whether the list is shuffled each epoch, and the rule for uneven counts.
    order_options order{.seed = 0, .shuffle = false, .policy = uneven::drop};
    /// Which share of each epoch this reader takes; unset: the whole list. A training job
    /// sets `split_from_environment()` (its rank and world size) or its own. (Never the
    /// environment by default: a tool run inside a Slurm step must still read everything.)
    std::optional<split> share;
    /** Where the run records how far it got, and where a restart resumes from (see
        `progress`): a state for the run's epoch is resumed, anything else begun afresh.
        Mark items used with `progress::consumed()`. Null: no state kept. */
    std::shared_ptr<progress> resume;
};

/** The units one run of a list source reads, in order: this slot's share of epoch
    `epoch`'s order less what `o.resume` records as used (beginning `o.resume` for the epoch
    when it holds another). Null when the run reads the list as it stands (one slot, list
    order, no state kept). Throws `conveyor::error` (`errc::invalid_argument`, naming
    `stage`) for a share that is not valid. */
CONVEYOR_DECL std::shared_ptr<const std::vector<work_item>> plan_run(std::uint64_t units, std::uint64_t epoch, const epoch_options& o,
                                                                     std::string_view stage);

} // namespace conveyor

#if CONVEYOR_HEADER_ONLY
#include <conveyor/core/impl/order.ipp>
#endif

#endif
