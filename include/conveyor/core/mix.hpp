// conveyor/core/mix.hpp — several pipelines of one item type drawn from by weight, in an
// order that is a pure function of (seed, epoch, slot, draw), resumable with one state.
#ifndef CONVEYOR_CORE_MIX_HPP
#define CONVEYOR_CORE_MIX_HPP

#include <conveyor/core/order.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/detail/config.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor {

/// When a `mix` ends.
enum class mix_stop {
    /// When the first source drawn from has nothing left.
    first,
    /// When every source has nothing left: a source that runs out drops out, and the
    /// weights of the others are renormalised over them.
    all,
    /// Never: a source that runs out starts again with its next epoch (see `mix`). Bound the
    /// run with `take()`.
    never,
};

/// The name of `s` ("first", "all", "never").
CONVEYOR_DECL std::string_view to_string(mix_stop s) noexcept;

/** The weights of a mix at global draw index `index` (see `mix_options::schedule`): one per
    source, each finite and 0 or more, not all 0. */
using mix_schedule = std::function<std::vector<double>(std::uint64_t index)>;

class mix_progress;

namespace detail {
struct mix_access;
} // namespace detail

/// Settings of `mix`.
struct mix_options {
    /// One weight per source: source `k` is drawn with probability `weights[k] / sum`.
    /// Empty: equal weights. Each finite and 0 or more, not all 0.
    std::vector<double> weights;
    /** Weights that change with the draws: called with the global draw index `g` (see
        `mix`) and returning the weights for it (as `weights`). When set, `weights` is not
        used. Asked only at multiples of `schedule_step` (its weights hold until the next),
        on an I/O thread, so it must be quick and thread-safe; it must be a pure function of
        the index (every rank, and a resumed run, asks it again). */
    mix_schedule schedule;
    /// How often `schedule` is asked: at global indices 0, step, 2 step, .... At least 1.
    std::uint64_t schedule_step = 1;
    /// When the mix ends.
    mix_stop stop = mix_stop::all;
    /// With the epoch and the slot, fixes the draws.
    std::uint64_t seed = 0;
    /** This reader's share: its slot keys the draws, and `slot`/`slots` place its draws in
        the global index. Unset: `split_from_environment()` (the split its shard sources take
        by default). Give each source the same share. */
    std::optional<split> share;
    /** Where the run records how far it got (every source's progress and the draws used),
        and where a restart resumes from (see `mix_progress`). Give source `k`
        `resume->source(k)` as its own resume state. Null: no state kept. */
    std::shared_ptr<mix_progress> resume;
    /// Items waiting between the mix and the next stage.
    std::size_t capacity = default_stream_capacity;
};

/** Where an item of a mix came from: an item type with `source` and `pass` members (`blob`,
    `shard::sample`) receives them, and `id_of(item)` then tells `mix_progress::consumed`
    which source's state records it. Others keep none (such a mix keeps no state). */
template <class T>
void set_mix_origin(T& item, std::uint32_t source, std::uint64_t pass) noexcept
{
    if constexpr (requires {
                      item.source = source;
                      item.pass = pass;
                  }) {
        item.source = source;
        item.pass = pass;
    }
}

/// True when items of type `T` carry their mix origin (see `set_mix_origin`).
template <class T>
inline constexpr bool carries_mix_origin = requires(T& item) {
    item.source = std::uint32_t{};
    item.pass = std::uint64_t{};
};

/** Items drawn from several pipelines of the same item type by weight: shard sources, file
    or object sources turned into samples (`shard::sample_of`), or any pipelines of one type.

    Each source is a pipeline of its own, with its own order, shuffle and share of each
    epoch (give each the mix's share), and its own resume state. Every run of the mix runs
    all its sources at once, each reading ahead into its own bounded stream; the mix then
    takes the `i`-th item of this reader from the source that draw `i` names:

    - **The draws.** Draw `i` of slot `s` of `S` (`share.slot()`, `share.slots()`) is a
      number `u` in [0, 1), a pure function of (`seed`, epoch, `S`, `s`, `i`); it names the
      first source whose cumulative weight passes `u × total`, over the sources still in the
      mix. Which source the `i`-th item comes from thus depends on the seed, the epoch, the
      slot and `i` (and on which sources ran out before it), never on timing. A source's
      items keep their own order.
    - **The global index** of draw `i` of slot `s` is `g = i × S + s`: the number of items
      drawn before it by all `S` slots together when every slot draws at the same pace (as
      data-parallel training does). `schedule` is a function of `g`, so that it means the
      same on any number of ranks, and after an elastic restart.
    - **Waiting.** The mix waits only for the source whose turn it is; items already drawn
      go on first. The others read ahead meanwhile as far as their own streams allow.
    - **Ending** (`stop`): `first` ends the run when the drawn source has nothing left;
      `all` drops that source and draws again over the others until none with weight is
      left; `never` starts it again with its next epoch and goes on for ever. In run epoch
      `e`, a source's first pass reads its epoch `e`, the `p`-th start again its epoch
      `e + p` (the source's next epochs, as a loop over it alone would read them; a mix of
      `never` is meant to be one endless run: run for several epochs, mix epoch `e + 1`
      reads the sources' epochs `e + 1`, `e + 2`, ... again). A pass that starts again and
      yields nothing fails the run (a source that is empty cannot be resampled).
    - **Items** learn their source and pass (`set_mix_origin`), which their ids carry
      (`sample_id::source`, `sample_id::pass`; batches' `ids` too), so that
      `mix_progress::consumed` records each in its source's state.
    - **Stats.** The sources' stages appear in the run's snapshot before the `mix` stage
      (a source started again in `never` runs in a nested run and is not shown again).

    A failure in any source fails the run. Breaking out of the loop stops every source.

    Throws `conveyor::error` (`errc::invalid_argument`, stage `mix`) when there are no
    sources, when `weights` does not have one weight per source, or has a negative, NaN or
    infinite weight, or only zeros, when `schedule_step` is 0, when `schedule` gives such
    weights at index 0, for a share that is not valid, or when `resume` is given for items
    that cannot carry their origin or for another number of sources. A schedule that gives
    bad weights later fails the run, naming the index.

    @code
    auto state = std::make_shared<conveyor::mix_progress>(3);
    auto web = conveyor::shard::shards(web_list, {.order = {.seed = 7}, .resume = state->source(0)});
    auto books = conveyor::shard::shards(book_list, {.order = {.seed = 7}, .resume = state->source(1)});
    auto code = conveyor::shard::shards(code_list, {.order = {.seed = 7}, .resume = state->source(2)});
    auto pipe = conveyor::mix<conveyor::shard::sample>({web, books, code}, {.weights = {0.6, 0.3, 0.1}, .seed = 7, .resume = state})
              | conveyor::shuffle({.buffer = 10'000, .seed = 7});
    for (auto& s : pipe) { train(s); state->consumed(s); }
    @endcode
*/
template <class T>
pipeline<T> mix(std::vector<pipeline<T>> sources, mix_options options = {});

/** How far a `mix` got: each source's `progress`, for each pass over it still in use, and
    the draws this reader used. Save it with `to_json()` and restore it with `from_json()`
    (assigned into the state the sources were given, or into a new one the sources are then
    built with); `merge()` joins the states of all ranks.

    Give source `k` of the mix `source(k)` as its resume state (`shard::source_options::resume`,
    `epoch_options::resume`), and mark each item, or each id of a batch, with `consumed()` once
    training has used it, as with `progress`.

    **The guarantee:** after a restore, each source delivers exactly the items of each of its
    passes that were not marked, each once, and none that was, whatever buffers held; and the
    draws go on from the number of items this reader marked: with the same number of slots,
    slot `s` draws again from `i = ` the draws it used, so the rest of the run draws as the
    interrupted one would have from there; on another number of slots `S'`, every slot starts
    at the first whole round of the global index at or past the items all slots marked
    (`ceil(total / S')`), its draws then keyed by the new division.

    **Elastic restarts.** As with `progress`: merge the states of all ranks, restore the merged
    state on any number of ranks or workers, and each source's rest is divided among the new
    slots. Under `mix_stop::never` a reader drops a pass from its state once it has read its
    share of it and every item of it was marked (keeping only the passes still in use); the
    merged state then records that reader's share of the pass as used, which needs the source
    to be divided like the mix (the same share; otherwise the pass is kept instead).

    One state belongs to one reader (one rank or worker) at a time.

    @par Thread Safety
    Safe: `consumed()` may be called from the training thread while the mix runs and another
    thread saves.
*/
class mix_progress {
public:
    /// A state for a mix of `sources` sources, with nothing recorded.
    CONVEYOR_DECL explicit mix_progress(std::size_t sources = 0);
    /// A copy with progress objects of its own.
    CONVEYOR_DECL mix_progress(const mix_progress& o);
    /// Copies `o` into this state, keeping this state's source objects (`source(k)`), so
    /// sources built with them resume from `o`. Throws `conveyor::error`
    /// (`errc::invalid_argument`) when `o` has another number of sources.
    CONVEYOR_DECL mix_progress& operator=(const mix_progress& o);

    /// The number of sources.
    CONVEYOR_DECL std::size_t sources() const;

    /** The state source `k` keeps: give it to the source as its resume state. The mix sets it
        to the pass the source reads next before each of its runs. Throws `conveyor::error`
        (`errc::invalid_argument`) when `k` is not below `sources()`. */
    CONVEYOR_DECL std::shared_ptr<progress> source(std::size_t k) const;

    /** Records that the item `id` was used, in the state of source `id.source`, pass
        `id.pass`; false when it was recorded already (or its pass is done). Throws
        `conveyor::error` (`errc::invalid_argument`) when `id.source` is not below `sources()`. */
    CONVEYOR_DECL bool consumed(const sample_id& id);
    /// Records that `item` was used: anything with an `id_of(item)` (a `blob`, a `shard::sample`).
    template <identified_item Item>
    bool consumed(const Item& item)
    {
        return consumed(sample_id(id_of(item)));
    }

    /// Items recorded, over all slots and sources: the global index the draws go on from.
    CONVEYOR_DECL std::uint64_t samples() const;
    /// The mix's epoch this state belongs to.
    CONVEYOR_DECL std::uint64_t epoch() const;
    /// True when nothing was recorded (no epoch begun).
    CONVEYOR_DECL bool empty() const;

    /** The state as one JSON document, e.g. `{"format":"conveyor-mix-progress","version":1,
        "epoch":3,"seed":7,"stop":"never","slots":2,"start":0,"drawn":[120,118],
        "sources":[{"floor":[0,1],"units":147,"order":{"seed":7,"shuffle":true,"policy":"drop"},
        "passes":[{"pass":1,"progress":{"format":"conveyor-progress",...}}]},...]}`:
        the draws (`slots` of the division, each slot's first draw `start` and the draws it
        used, `drawn`), and per source the passes kept, each with its `progress` document,
        the first pass each slot still reads (`floor`) and the source's list size and order
        (`units`, `order`, once known). */
    CONVEYOR_DECL std::string to_json() const;
    /// Reads `to_json()`'s text; throws `conveyor::error` (`errc::invalid_argument`)
    /// saying what is wrong with it.
    CONVEYOR_DECL static mix_progress from_json(std::string_view text);

    /** The union of the states of all slots of one mix epoch. A state restored on another
        number of slots and saved before a run began holds the old division: it is left out
        (the states that ran from the same restore hold what it holds). Throws
        `conveyor::error` (`errc::invalid_argument`) when they belong to different epochs,
        seeds, stop rules, numbers of sources or divisions, or a source's states cannot be
        merged. */
    CONVEYOR_DECL static mix_progress merge(const std::vector<mix_progress>& parts);

private:
    friend struct detail::mix_access;

    // A pass over a source kept in the state.
    struct pass_entry {
        std::shared_ptr<progress> state; // the source's own object while the pass is read
        // This run's reading of it (not saved):
        bool reading = false;  // read (or being read) in this run
        bool closed = false;   // its stream ended: `delivered` is final
        bool finished = false; // closed, and every item delivered marked (`mix_stop::never`)
        bool droppable = false; // finished as this slot's share of the mix's division
        std::uint64_t delivered = 0;
        std::uint64_t used = 0; // of those, marked
        std::set<std::uint64_t> touched; // work positions of the items marked in this run
    };
    struct source_state {
        std::shared_ptr<progress> live; // what the source was given (never replaced)
        std::map<std::uint64_t, pass_entry> passes;
        std::vector<std::uint64_t> floor; // per slot of the division: the first pass it still reads
        std::optional<std::uint64_t> units;
        order_options order{};
    };

    void finish_pass(std::size_t k, std::uint64_t pass); // lock held
    std::uint64_t floor_of(const source_state& s, std::uint64_t slot) const;

    mutable std::mutex mu_;
    bool begun_ = false;
    std::uint64_t epoch_ = 0;
    std::uint64_t seed_ = 0;
    mix_stop stop_ = mix_stop::all;
    std::uint64_t slots_ = 1;  // the division of the draws
    std::uint64_t start_ = 0;  // each slot's first draw in this division
    std::vector<std::uint64_t> drawn_; // per slot: items marked since `start_`
    std::uint64_t slot_ = 0;   // the slot of the run reading it (not saved)
    std::vector<source_state> src_;
};

} // namespace conveyor

#include <conveyor/core/impl/mix.hpp>

#if CONVEYOR_HEADER_ONLY
#include <conveyor/core/impl/mix.ipp>
#endif

#endif
