// conveyor/image/detail/batch_assembler.hpp — the bookkeeping of a stage that decodes images
// into the slots of batches: places, slabs, skips and their refill, the batches it hands on.
// A part of conveyor/image/batch.hpp (include that first); its users are the decode_batches
// stages (the CPU's and the CUDA module's) and their tests.
#ifndef CONVEYOR_IMAGE_DETAIL_BATCH_ASSEMBLER_HPP
#define CONVEYOR_IMAGE_DETAIL_BATCH_ASSEMBLER_HPP

#include <conveyor/core/order.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/image/batch.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace conveyor::image::detail {

/** Where images go in a stream of batches of `n` slots, and which batches are done.

    A *position* is a place in the stream of batches: batch `p / n`, slot `p % n`. Each item
    is given a tentative position when it is sent to a decoder (`dispatch`), and its final
    one when its result comes back, in dispatch order (`place`, or `skip` for an item that
    failed). A good item's final position is the count of good items before it, so a skip
    leaves no hole: the items after it move down (`place` says from where to where, the
    caller moves the pixels), and once every item in flight is back (`drained`) the next
    tentative position is the next final one again (`realign`), so only the items in flight
    at a skip are ever moved, and two never share a slot.

    A batch is open from `open` (with the slab its slots are in) to `take_full` or
    `take_partial`; items may be dispatched into batches ahead of the one being assembled
    (a pipelined decoder) or into it alone (one batch at a time). `abandon` gives every open
    slab back, for a consumer that has gone.

    @par Thread Safety
    Distinct objects: safe. Shared objects: unsafe (one task, or one thread, owns it).
*/
class batch_assembler {
public:
    /// Where a good item goes: from its tentative position to its final one.
    struct placement {
        std::uint64_t from = 0;
        std::uint64_t to = 0;
        bool moved() const noexcept { return from != to; }
    };

    /// A batch taken from the assembler: its slab, and its first `count` slots' keys, ids,
    /// labels and extra values (the vectors hold `count` entries; `extras` none when no
    /// item had extra values).
    struct assembled {
        image::slab slab;
        std::vector<std::string> keys;
        std::vector<conveyor::sample_id> ids;
        std::vector<std::int64_t> labels;
        std::vector<std::vector<field_value>> extras;
        std::uint64_t index = 0; ///< the batch's number in the run: 0, 1, 2, ...
        std::size_t count = 0;
    };

    /// An assembler of batches of `batch_size` (at least 1) slots of `item_bytes` each.
    CONVEYOR_DECL batch_assembler(std::size_t batch_size, std::size_t item_bytes);

    std::size_t batch_size() const noexcept { return n_; }

    // ---- the dispatching side -------------------------------------------------------------

    /// An item failed and the next tentative position is not yet the next final one.
    bool realign_pending() const noexcept { return realign_; }
    /// Every dispatched item has been placed or skipped.
    bool drained() const noexcept { return assembled_ == dispatched_; }
    /** When a realignment is pending and the assembler is drained: the next tentative
        position becomes the next final one. Returns whether none is pending now (false:
        items are still in flight; wait until `drained`, then call again). */
    CONVEYOR_DECL bool realign() noexcept;

    /// The batch the next dispatched item goes into (see `realign`).
    std::uint64_t next_batch() const noexcept { return next_ / n_; }
    /// Whether that batch is open (has a slab).
    CONVEYOR_DECL bool next_batch_open() const;
    /// Opens batch `next_batch()` with `s` (whose first `batch_size() * item_bytes` bytes
    /// hold its slots). The batch must not be open.
    CONVEYOR_DECL void open(image::slab s);
    /// The next tentative position, whose batch must be open.
    CONVEYOR_DECL std::uint64_t dispatch();

    /// The slab of an open batch's position, and where the position's slot is in it.
    CONVEYOR_DECL const image::slab& slab_of(std::uint64_t position) const;
    CONVEYOR_DECL std::byte* slot(std::uint64_t position) const;

    // ---- the assembling side --------------------------------------------------------------

    /** The item dispatched at `position` (the oldest not yet placed or skipped) is good: it
        goes to the next final position, which takes its key, id, label and the values of
        its extra fields (`decode_image_options::extra_fields`). The caller moves its pixels
        when `moved()`. */
    CONVEYOR_DECL placement place(std::uint64_t position, std::string key, conveyor::sample_id id, std::int64_t label,
                                  std::vector<field_value> extras = {});
    /// The item dispatched at `position` failed: it takes no place; a realignment is pending.
    CONVEYOR_DECL void skip(std::uint64_t position);

    /// Items placed so far (the next final position).
    std::uint64_t placed() const noexcept { return final_; }
    /// Items placed in the batch being assembled (`batch_size()` when it is full).
    CONVEYOR_DECL std::size_t pending() const noexcept;
    /// The batch being assembled, when all its slots are placed; it is closed.
    CONVEYOR_DECL std::optional<assembled> take_full();
    /// The batch being assembled with what it has, when it has some but is not full (the
    /// last batch of a run); it is closed, and the assembler is done.
    CONVEYOR_DECL std::optional<assembled> take_partial();
    /// Closes every open batch (their slabs go back to their pool): nothing more is taken.
    CONVEYOR_DECL void abandon() noexcept;

    /// Batches open now (for tests).
    std::size_t open_batches() const noexcept { return open_.size(); }

private:
    struct open_batch {
        image::slab slab;
        std::vector<std::string> keys;
        std::vector<conveyor::sample_id> ids;
        std::vector<std::int64_t> labels;
        std::vector<std::vector<field_value>> extras; // by slot, once an item has some
    };
    CONVEYOR_DECL const open_batch& batch_of(std::uint64_t position) const;
    CONVEYOR_DECL assembled close(std::uint64_t batch, std::size_t count);

    std::size_t n_;
    std::size_t item_bytes_;
    std::map<std::uint64_t, open_batch> open_; // by batch number
    std::uint64_t next_ = 0;       // the next tentative position
    std::uint64_t final_ = 0;      // the next final position
    std::uint64_t taken_ = 0;      // the batch being assembled: the next to take
    std::uint64_t dispatched_ = 0;
    std::uint64_t assembled_ = 0;  // placed or skipped
    bool realign_ = false;
};

/// The batch of `a`: its labels written into its slab (after the images, as `plan` lays
/// them out), its tensors shaped as `o` asks, its extra values made the columns `columns`
/// names (`decode_image_options::extra_fields`).
CONVEYOR_DECL image_batch batch_of(batch_assembler::assembled a, const collate_options& o, const batch_plan& plan,
                                   std::span<const std::string> columns = {});

} // namespace conveyor::image::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/detail/impl/batch_assembler.ipp>
#endif

#endif
