// conveyor/core/impl/order.ipp — epoch order, splits across ranks and workers, resume state.
#ifndef CONVEYOR_CORE_IMPL_ORDER_IPP
#define CONVEYOR_CORE_IMPL_ORDER_IPP

#include <conveyor/core/detail/environment.hpp>
#include <conveyor/core/detail/splitmix64.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/order.hpp>

#include <boost/json.hpp>

#include <algorithm>
#include <numeric>

namespace conveyor {
namespace detail {

[[noreturn]] inline void bad_order(std::string what)
{
    throw error(make_error_code(conveyor::errc::invalid_argument), {.stage = "order", .detail = std::move(what)});
}

} // namespace detail

CONVEYOR_DECL split split_from_environment(std::uint64_t worker, std::uint64_t workers)
{
    split s;
    s.worker = worker;
    s.workers = workers == 0 ? 1 : workers;
    if (s.worker >= s.workers) detail::bad_order("worker " + std::to_string(worker) + " is not below the worker count " + std::to_string(workers));
    static constexpr const char* pairs[][2] = {
        {"RANK", "WORLD_SIZE"}, {"SLURM_PROCID", "SLURM_NTASKS"}, {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}};
    for (const auto& p : pairs) {
        const auto rank = conveyor::detail::env_number(p[0], "order");
        const auto size = conveyor::detail::env_number(p[1], "order");
        if (!rank && !size) continue;
        if (rank.has_value() != size.has_value())
            detail::bad_order(std::string(rank ? p[0] : p[1]) + " is set but " + (rank ? p[1] : p[0]) + " is not");
        if (*size == 0 || *rank >= *size)
            detail::bad_order(std::string(p[0]) + "=" + std::to_string(*rank) + " is not below " + p[1] + "=" + std::to_string(*size));
        s.rank = *rank;
        s.world_size = *size;
        return s;
    }
    return s;
}

CONVEYOR_DECL split checked_split(const split& s, std::string_view stage)
{
    if (s.world_size == 0 || s.workers == 0 || s.rank >= s.world_size || s.worker >= s.workers)
        throw error(make_error_code(conveyor::errc::invalid_argument),
                    {.stage = std::string(stage), .detail = "rank " + std::to_string(s.rank) + " of " + std::to_string(s.world_size) + ", worker " +
                                                            std::to_string(s.worker) + " of " + std::to_string(s.workers) + " is not a valid share"});
    return s;
}

CONVEYOR_DECL std::vector<std::uint64_t> epoch_work(std::uint64_t shards, std::uint64_t slots, std::uint64_t epoch, const order_options& o)
{
    if (shards == 0) detail::bad_order("the list is empty");
    if (slots == 0) slots = 1;
    std::vector<std::uint64_t> order(shards);
    std::iota(order.begin(), order.end(), std::uint64_t{0});
    if (o.shuffle) {
        conveyor::detail::splitmix64 rng(conveyor::detail::epoch_seed(o.seed, epoch));
        for (std::uint64_t i = shards - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
    }
    const std::uint64_t rem = shards % slots;
    if (rem == 0) return order;
    if (o.policy == uneven::drop) {
        if (shards < slots)
            detail::bad_order("a list of " + std::to_string(shards) + " cannot be divided among " + std::to_string(slots) +
                              " ranks x workers with uneven::drop (each needs one at least): use uneven::pad, fewer workers, or a longer list");
        order.resize(shards - rem);
        return order;
    }
    const std::uint64_t want = shards + (slots - rem);
    for (std::uint64_t i = 0; order.size() < want; ++i) order.push_back(order[i % shards]);
    return order;
}

CONVEYOR_DECL std::uint64_t resampled_draw(std::uint64_t shards, std::uint64_t seed, std::uint64_t epoch, std::uint64_t slot, std::uint64_t k) noexcept
{
    if (shards == 0) return 0;
    conveyor::detail::splitmix64 rng(conveyor::detail::epoch_seed(seed, epoch) ^ (slot * 0x9e3779b97f4a7c15ULL) ^ (k * 0xc2b2ae3d27d4eb4fULL));
    rng();
    return rng.below(shards);
}

CONVEYOR_DECL std::vector<work_item> epoch_share(std::uint64_t units, const split& s, std::uint64_t epoch, const order_options& o)
{
    const auto work = epoch_work(units, s.slots(), epoch, o);
    std::vector<work_item> out;
    out.reserve(work.size() / std::max<std::uint64_t>(s.slots(), 1) + 1);
    for (std::uint64_t w = s.slot(); w < work.size(); w += s.slots()) out.push_back({w, work[w]});
    return out;
}

CONVEYOR_DECL progress::progress(const progress& o)
{
    std::lock_guard lk(o.mu_);
    begun_ = o.begun_;
    epoch_ = o.epoch_;
    shards_ = o.shards_;
    slots_ = o.slots_;
    opts_ = o.opts_;
    work_ = o.work_;
    whole_next_ = o.whole_next_;
    whole_done_ = o.whole_done_;
}

CONVEYOR_DECL progress& progress::operator=(const progress& o)
{
    if (this == &o) return *this;
    progress copy(o);
    std::lock_guard lk(mu_);
    begun_ = copy.begun_;
    epoch_ = copy.epoch_;
    shards_ = copy.shards_;
    slots_ = copy.slots_;
    opts_ = copy.opts_;
    work_ = std::move(copy.work_);
    whole_next_ = std::move(copy.whole_next_);
    whole_done_ = std::move(copy.whole_done_);
    return *this;
}

CONVEYOR_DECL void progress::begin(std::uint64_t epoch, std::uint64_t shards, std::uint64_t slots, const order_options& o)
{
    std::lock_guard lk(mu_);
    begun_ = true;
    epoch_ = epoch;
    shards_ = shards;
    slots_ = slots == 0 ? 1 : slots;
    opts_ = o;
    work_.clear();
    whole_next_.clear();
    whole_done_.clear();
}

CONVEYOR_DECL bool progress::add(shard_state& st, std::uint64_t index, std::uint64_t end)
{
    if (index < st.next) return false; // already counted
    if (index > st.next) return st.done.emplace(index, end).second;
    st.next = index + 1;
    st.offset = end;
    for (auto it = st.done.begin(); it != st.done.end() && it->first <= st.next;) {
        if (it->first == st.next) {
            st.next = it->first + 1;
            st.offset = it->second;
        }
        it = st.done.erase(it);
    }
    return true;
}

CONVEYOR_DECL bool progress::used_whole(std::uint64_t w) const
{
    const std::uint64_t s = w % slots_;
    if (s < whole_next_.size() && w / slots_ < whole_next_[s]) return true;
    return whole_done_.contains(w);
}

CONVEYOR_DECL bool progress::add_whole(std::uint64_t w)
{
    const std::uint64_t s = w % slots_;
    if (whole_next_.size() <= s) whole_next_.resize(static_cast<std::size_t>(slots_), 0);
    if (w / slots_ < whole_next_[s]) return false; // already counted
    if (w / slots_ > whole_next_[s]) return whole_done_.insert(w).second;
    raise_whole(s, whole_next_[s] + 1);
    return true;
}

CONVEYOR_DECL void progress::raise_whole(std::uint64_t s, std::uint64_t next)
{
    if (whole_next_.size() <= s) whole_next_.resize(static_cast<std::size_t>(slots_), 0);
    if (next <= whole_next_[s]) return;
    // Units used after the slot's run that the longer run now covers go (none when it grows
    // by one: that unit would have joined the run); those that follow on from it extend it.
    if (next > whole_next_[s] + 1)
        for (auto it = whole_done_.begin(); it != whole_done_.end();) {
            if (*it % slots_ == s && *it / slots_ < next) it = whole_done_.erase(it);
            else ++it;
        }
    for (auto it = whole_done_.find(s + next * slots_); it != whole_done_.end(); it = whole_done_.find(s + next * slots_)) {
        whole_done_.erase(it);
        ++next;
    }
    whole_next_[s] = next;
}

CONVEYOR_DECL bool progress::consumed(const sample_id& id)
{
    std::lock_guard lk(mu_);
    if (id.whole) return add_whole(id.work);
    if (used_whole(id.work)) return false; // its whole unit counts as used (a mix's finished pass)
    auto& st = work_[id.work];
    st.shard = id.shard;
    return add(st, id.index, id.end);
}

CONVEYOR_DECL std::uint64_t progress::samples() const
{
    std::lock_guard lk(mu_);
    std::uint64_t n = whole_done_.size();
    for (const auto next : whole_next_) n += next;
    for (const auto& [w, st] : work_) n += st.next + st.done.size();
    return n;
}

CONVEYOR_DECL std::uint64_t progress::epoch() const
{
    std::lock_guard lk(mu_);
    return epoch_;
}

CONVEYOR_DECL bool progress::empty() const
{
    std::lock_guard lk(mu_);
    return !begun_;
}

CONVEYOR_DECL order_options progress::options() const
{
    std::lock_guard lk(mu_);
    return opts_;
}

CONVEYOR_DECL std::string progress::to_json() const
{
    std::lock_guard lk(mu_);
    boost::json::object o;
    o["format"] = "conveyor-progress";
    o["version"] = 1;
    o["epoch"] = epoch_;
    o["seed"] = opts_.seed;
    o["shuffle"] = opts_.shuffle;
    o["policy"] = opts_.policy == uneven::drop ? "drop" : "pad";
    o["shards"] = shards_;
    o["slots"] = slots_;
    boost::json::array work;
    for (const auto& [w, st] : work_) {
        boost::json::object e;
        e["work"] = w;
        e["shard"] = st.shard;
        e["next"] = st.next;
        e["offset"] = st.offset;
        boost::json::array done;
        for (const auto& [i, end] : st.done) done.push_back(boost::json::array{i, end});
        e["done"] = std::move(done);
        work.push_back(std::move(e));
    }
    o["work"] = std::move(work);
    if (!whole_next_.empty() || !whole_done_.empty()) {
        boost::json::array next(whole_next_.begin(), whole_next_.end());
        boost::json::array done(whole_done_.begin(), whole_done_.end());
        o["whole"] = boost::json::object{{"next", std::move(next)}, {"done", std::move(done)}};
    }
    return boost::json::serialize(o);
}

namespace detail {

inline std::uint64_t json_u64(const boost::json::object& o, std::string_view key, std::string_view where)
{
    const auto* v = o.if_contains(key);
    if (!v) bad_order("resume state: " + std::string(where) + " has no \"" + std::string(key) + "\"");
    if (v->is_uint64()) return v->get_uint64();
    if (v->is_int64() && v->get_int64() >= 0) return static_cast<std::uint64_t>(v->get_int64());
    bad_order("resume state: " + std::string(where) + "." + std::string(key) + " is not a whole number of 0 or more");
}

/// The whole numbers of array `key` of `o`.
inline std::vector<std::uint64_t> json_u64s(const boost::json::object& o, std::string_view key, std::string_view where)
{
    const auto* v = o.if_contains(key);
    if (!v || !v->is_array()) bad_order("resume state: " + std::string(where) + "." + std::string(key) + " is not an array");
    std::vector<std::uint64_t> out;
    for (const auto& e : v->as_array()) {
        if (e.is_uint64()) out.push_back(e.get_uint64());
        else if (e.is_int64() && e.get_int64() >= 0) out.push_back(static_cast<std::uint64_t>(e.get_int64()));
        else bad_order("resume state: " + std::string(where) + "." + std::string(key) + " holds something other than whole numbers of 0 or more");
    }
    return out;
}

} // namespace detail

CONVEYOR_DECL progress progress::from_json(std::string_view text)
{
    boost::system::error_code ec;
    auto v = boost::json::parse(text, ec);
    if (ec) detail::bad_order("resume state is not JSON: " + ec.message());
    if (!v.is_object()) detail::bad_order("resume state is not a JSON object");
    const auto& o = v.as_object();
    const auto* fmt = o.if_contains("format");
    // "conveyor-shard-progress": the same state as written before list sources kept one.
    if (!fmt || !fmt->is_string() || (fmt->as_string() != "conveyor-progress" && fmt->as_string() != "conveyor-shard-progress"))
        detail::bad_order("resume state: \"format\" is not \"conveyor-progress\"");
    if (detail::json_u64(o, "version", "the state") != 1) detail::bad_order("resume state: only version 1 is known");
    progress p;
    p.begun_ = true;
    p.epoch_ = detail::json_u64(o, "epoch", "the state");
    p.opts_.seed = detail::json_u64(o, "seed", "the state");
    const auto* sh = o.if_contains("shuffle");
    if (!sh || !sh->is_bool()) detail::bad_order("resume state: \"shuffle\" is not true or false");
    p.opts_.shuffle = sh->get_bool();
    const auto* pol = o.if_contains("policy");
    if (!pol || !pol->is_string() || (pol->as_string() != "drop" && pol->as_string() != "pad"))
        detail::bad_order("resume state: \"policy\" is not \"drop\" or \"pad\"");
    p.opts_.policy = pol->as_string() == "drop" ? uneven::drop : uneven::pad;
    p.shards_ = detail::json_u64(o, "shards", "the state");
    p.slots_ = detail::json_u64(o, "slots", "the state");
    if (p.shards_ == 0 || p.slots_ == 0) detail::bad_order("resume state: \"shards\" and \"slots\" must be above 0");
    const auto* work = o.if_contains("work");
    if (!work || !work->is_array()) detail::bad_order("resume state: \"work\" is not an array");
    std::size_t i = 0;
    for (const auto& ev : work->as_array()) {
        const std::string where = "work[" + std::to_string(i++) + "]";
        if (!ev.is_object()) detail::bad_order("resume state: " + where + " is not an object");
        const auto& e = ev.as_object();
        shard_state st;
        const auto w = detail::json_u64(e, "work", where);
        st.shard = detail::json_u64(e, "shard", where);
        if (st.shard >= p.shards_) detail::bad_order("resume state: " + where + ".shard is past the list's " + std::to_string(p.shards_) + " shards");
        st.next = detail::json_u64(e, "next", where);
        st.offset = detail::json_u64(e, "offset", where);
        const auto* done = e.if_contains("done");
        if (!done || !done->is_array()) detail::bad_order("resume state: " + where + ".done is not an array");
        for (const auto& d : done->as_array()) {
            if (!d.is_array() || d.as_array().size() != 2 || !d.as_array()[0].is_number() || !d.as_array()[1].is_number())
                detail::bad_order("resume state: " + where + ".done holds something other than [index, end] pairs");
            std::uint64_t idx, end;
            try {
                idx = d.as_array()[0].to_number<std::uint64_t>();
                end = d.as_array()[1].to_number<std::uint64_t>();
            } catch (const std::exception&) {
                detail::bad_order("resume state: " + where + ".done holds a number that is not a whole number of 0 or more");
            }
            add(st, idx, end);
        }
        p.work_[w] = std::move(st);
    }
    if (const auto* whole = o.if_contains("whole")) {
        if (!whole->is_object()) detail::bad_order("resume state: \"whole\" is not an object");
        const auto next = detail::json_u64s(whole->as_object(), "next", "whole");
        if (next.size() > p.slots_)
            detail::bad_order("resume state: whole.next has " + std::to_string(next.size()) + " entries for " + std::to_string(p.slots_) + " slots");
        // No position may pass the epoch's work list (at most one round of padding).
        const std::uint64_t positions = p.shards_ + p.slots_;
        for (std::size_t s = 0; s < next.size(); ++s) {
            if (next[s] > positions / p.slots_ + 1)
                detail::bad_order("resume state: whole.next[" + std::to_string(s) + "] is past the list's " + std::to_string(p.shards_) + " units");
            p.raise_whole(s, next[s]);
        }
        for (const auto w : detail::json_u64s(whole->as_object(), "done", "whole")) {
            if (w >= positions) detail::bad_order("resume state: whole.done holds " + std::to_string(w) + ", past the list's " + std::to_string(p.shards_) + " units");
            p.add_whole(w);
        }
    }
    return p;
}

CONVEYOR_DECL progress progress::merge(const std::vector<progress>& parts)
{
    progress out;
    for (const auto& part : parts) {
        progress p(part);
        if (!p.begun_) continue;
        if (!out.begun_) {
            out.begun_ = true;
            out.epoch_ = p.epoch_;
            out.shards_ = p.shards_;
            out.slots_ = p.slots_;
            out.opts_ = p.opts_;
        } else if (p.epoch_ != out.epoch_ || p.shards_ != out.shards_ || p.slots_ != out.slots_ || p.opts_.seed != out.opts_.seed ||
                   p.opts_.shuffle != out.opts_.shuffle || p.opts_.policy != out.opts_.policy) {
            detail::bad_order("resume states to merge belong to different epochs or lists (epoch " + std::to_string(p.epoch_) + " of " +
                              std::to_string(p.shards_) + " units in " + std::to_string(p.slots_) + " slots, against epoch " +
                              std::to_string(out.epoch_) + " of " + std::to_string(out.shards_) + " units in " +
                              std::to_string(out.slots_) + " slots)");
        }
        for (const auto& [w, st] : p.work_) {
            auto& dst = out.work_[w];
            dst.shard = st.shard;
            if (st.next > dst.next) {
                dst.next = st.next;
                dst.offset = st.offset;
                // Entries the longer prefix now covers go; those that join it extend it.
                for (auto it = dst.done.begin(); it != dst.done.end() && it->first <= dst.next;) {
                    if (it->first == dst.next) {
                        dst.next = it->first + 1;
                        dst.offset = it->second;
                    }
                    it = dst.done.erase(it);
                }
            }
            for (const auto& [i, end] : st.done) add(dst, i, end);
        }
        for (std::size_t s = 0; s < p.whole_next_.size(); ++s) out.raise_whole(s, p.whole_next_[s]);
        for (const auto w : p.whole_done_) out.add_whole(w);
    }
    return out;
}

template <class F>
void progress::for_each_left(std::uint64_t shards, std::uint64_t slot, std::uint64_t slots, F&& f) const
{
    if (slots == 0) slots = 1;
    if (slot >= slots) detail::bad_order("slot " + std::to_string(slot) + " is not below " + std::to_string(slots));
    if (begun_ && shards != shards_)
        detail::bad_order("the resume state is for a list of " + std::to_string(shards_) + ", this list has " + std::to_string(shards));
    const auto work = epoch_work(shards, begun_ ? slots_ : slots, epoch_, opts_);
    std::uint64_t k = 0; // the units left so far: the k-th goes to slot k mod slots
    for (std::uint64_t w = 0; w < work.size(); ++w) {
        if (begun_ && used_whole(w)) continue;
        if (k++ % slots == slot) f(w, work[w]);
    }
}

CONVEYOR_DECL std::vector<work_piece> progress::remaining(std::uint64_t shards, std::uint64_t slot, std::uint64_t slots) const
{
    std::lock_guard lk(mu_);
    ++plans_;
    std::vector<work_piece> out;
    for_each_left(shards, slot, slots, [&](std::uint64_t w, std::uint64_t shard) {
        work_piece p;
        p.work = w;
        p.shard = shard;
        if (auto it = work_.find(w); it != work_.end()) {
            p.first = it->second.next;
            p.offset = it->second.offset;
            for (const auto& [i, end] : it->second.done) p.skip.push_back(i);
        }
        out.push_back(std::move(p));
    });
    return out;
}

CONVEYOR_DECL std::vector<work_item> progress::remaining_items(std::uint64_t units, std::uint64_t slot, std::uint64_t slots) const
{
    std::lock_guard lk(mu_);
    ++plans_;
    std::vector<work_item> out;
    for_each_left(units, slot, slots, [&](std::uint64_t w, std::uint64_t item) { out.push_back({w, item}); });
    return out;
}

CONVEYOR_DECL std::shared_ptr<const std::vector<work_item>> plan_run(std::uint64_t units, std::uint64_t epoch, const epoch_options& o,
                                                                     std::string_view stage)
{
    const split share = checked_split(o.share.value_or(split{}), stage);
    if (share.slots() == 1 && !o.order.shuffle && !o.resume) return nullptr; // the list as it stands
    if (units == 0) return std::make_shared<const std::vector<work_item>>();
    if (!o.resume) return std::make_shared<const std::vector<work_item>>(epoch_share(units, share, epoch, o.order));
    if (o.resume->empty() || o.resume->epoch() != epoch) o.resume->begin(epoch, units, share.slots(), o.order);
    return std::make_shared<const std::vector<work_item>>(o.resume->remaining_items(units, share.slot(), share.slots()));
}

} // namespace conveyor

#endif
