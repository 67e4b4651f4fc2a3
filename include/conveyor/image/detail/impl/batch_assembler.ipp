// conveyor/image/detail/impl/batch_assembler.ipp — definitions for
// conveyor/image/detail/batch_assembler.hpp.
#ifndef CONVEYOR_IMAGE_DETAIL_IMPL_BATCH_ASSEMBLER_IPP
#define CONVEYOR_IMAGE_DETAIL_IMPL_BATCH_ASSEMBLER_IPP

#include <conveyor/image/detail/batch_assembler.hpp>

#include <algorithm>
#include <cassert>
#include <utility>

namespace conveyor::image::detail {

CONVEYOR_DECL batch_assembler::batch_assembler(std::size_t batch_size, std::size_t item_bytes)
    : n_(std::max<std::size_t>(batch_size, 1)), item_bytes_(item_bytes)
{
}

CONVEYOR_DECL bool batch_assembler::realign() noexcept
{
    if (!realign_) return true;
    if (!drained()) return false;
    next_ = final_;
    realign_ = false;
    return true;
}

CONVEYOR_DECL bool batch_assembler::next_batch_open() const
{
    return open_.contains(next_ / n_);
}

CONVEYOR_DECL void batch_assembler::open(image::slab s)
{
    assert(!next_batch_open());
    auto& b = open_[next_ / n_];
    b.slab = std::move(s);
    b.keys.resize(n_);
    b.ids.resize(n_);
    b.labels.assign(n_, -1);
}

CONVEYOR_DECL std::uint64_t batch_assembler::dispatch()
{
    assert(next_batch_open());
    ++dispatched_;
    return next_++;
}

CONVEYOR_DECL const batch_assembler::open_batch& batch_assembler::batch_of(std::uint64_t position) const
{
    return open_.at(position / n_);
}

CONVEYOR_DECL const image::slab& batch_assembler::slab_of(std::uint64_t position) const
{
    return batch_of(position).slab;
}

CONVEYOR_DECL std::byte* batch_assembler::slot(std::uint64_t position) const
{
    return batch_of(position).slab.data() + (position % n_) * item_bytes_;
}

CONVEYOR_DECL batch_assembler::placement batch_assembler::place(std::uint64_t position, std::string key, conveyor::sample_id id,
                                                                std::int64_t label, std::vector<field_value> extras)
{
    assert(assembled_ < dispatched_ && position >= final_);
    const std::uint64_t q = final_++;
    ++assembled_;
    auto& to = open_.at(q / n_);
    const std::size_t i = q % n_;
    to.keys[i] = std::move(key);
    to.ids[i] = id;
    to.labels[i] = label;
    if (!extras.empty()) {
        if (to.extras.empty()) to.extras.resize(n_);
        to.extras[i] = std::move(extras);
    }
    return {.from = position, .to = q};
}

CONVEYOR_DECL void batch_assembler::skip(std::uint64_t position)
{
    (void)position;
    assert(assembled_ < dispatched_ && position >= final_);
    ++assembled_;
    realign_ = true;
}

CONVEYOR_DECL std::size_t batch_assembler::pending() const noexcept
{
    const std::uint64_t first = taken_ * n_;
    return final_ <= first ? 0 : static_cast<std::size_t>(std::min<std::uint64_t>(final_ - first, n_));
}

CONVEYOR_DECL batch_assembler::assembled batch_assembler::close(std::uint64_t batch, std::size_t count)
{
    auto it = open_.find(batch);
    assert(it != open_.end());
    assembled out{.slab = std::move(it->second.slab),
                  .keys = std::move(it->second.keys),
                  .ids = std::move(it->second.ids),
                  .labels = std::move(it->second.labels),
                  .extras = std::move(it->second.extras),
                  .index = batch,
                  .count = count};
    open_.erase(it);
    out.keys.resize(count);
    out.ids.resize(count);
    out.labels.resize(count);
    if (!out.extras.empty()) out.extras.resize(count);
    ++taken_;
    return out;
}

CONVEYOR_DECL std::optional<batch_assembler::assembled> batch_assembler::take_full()
{
    if (final_ < (taken_ + 1) * n_ || !open_.contains(taken_)) return std::nullopt;
    return close(taken_, n_);
}

CONVEYOR_DECL std::optional<batch_assembler::assembled> batch_assembler::take_partial()
{
    const std::size_t count = pending();
    if (count == 0 || count == n_ || !open_.contains(taken_)) return std::nullopt;
    return close(taken_, count);
}

CONVEYOR_DECL void batch_assembler::abandon() noexcept
{
    open_.clear();
}

CONVEYOR_DECL image_batch batch_of(batch_assembler::assembled a, const collate_options& o, const batch_plan& plan,
                                   std::span<const std::string> columns)
{
    auto* labels = reinterpret_cast<std::int64_t*>(a.slab.data() + plan.labels_offset);
    std::copy(a.labels.begin(), a.labels.end(), labels);
    image_batch out = batch_over_slab(std::move(a.slab), std::move(a.keys), a.count, a.index, o, plan);
    out.ids = std::move(a.ids);
    if (!columns.empty()) {
        a.extras.resize(a.count); // none when every item came without extra values
        out.columns = columns_of(columns, std::move(a.extras));
    }
    return out;
}

} // namespace conveyor::image::detail

#endif
