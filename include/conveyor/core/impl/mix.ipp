// conveyor/core/impl/mix.ipp — the mix's draws and weights, and its state: every source's
// progress per pass, the draws each slot used, merging and JSON.
#ifndef CONVEYOR_CORE_IMPL_MIX_IPP
#define CONVEYOR_CORE_IMPL_MIX_IPP

#include <conveyor/core/detail/splitmix64.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/mix.hpp>

#include <boost/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <utility>

namespace conveyor {
namespace detail {

CONVEYOR_DECL void bad_mix(std::string what)
{
    throw error(make_error_code(conveyor::errc::invalid_argument), {.stage = "mix", .detail = std::move(what)});
}

/// `v` in its shortest exact form ("0.25", "nan", "-inf").
inline std::string mix_number(double v)
{
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
}

CONVEYOR_DECL void check_mix_weights(const std::vector<double>& w, std::size_t sources, std::string_view what)
{
    if (w.size() != sources)
        bad_mix(std::string(what) + " are " + std::to_string(w.size()) + " for " + std::to_string(sources) + " source(s): give one per source");
    double total = 0;
    for (std::size_t k = 0; k < w.size(); ++k) {
        if (!std::isfinite(w[k]) || w[k] < 0)
            bad_mix(std::string(what) + ": source " + std::to_string(k) + "'s weight is " + mix_number(w[k]) + " (each must be finite and 0 or more)");
        total += w[k];
    }
    if (!(total > 0)) bad_mix(std::string(what) + " are all 0: at least one source needs a weight above 0");
    if (!std::isfinite(total)) bad_mix(std::string(what) + " add up to more than a double holds");
}

CONVEYOR_DECL void check_mix_options(const mix_options& o, std::size_t sources, bool origin)
{
    if (sources == 0) bad_mix("a mix needs at least one source");
    if (sources > std::numeric_limits<std::uint32_t>::max()) bad_mix("a mix takes at most 2^32 - 1 sources");
    if (o.schedule_step == 0) bad_mix("schedule_step must be at least 1");
    if (o.schedule) check_mix_weights(o.schedule(0), sources, "the schedule's weights at index 0");
    else if (!o.weights.empty()) check_mix_weights(o.weights, sources, "the weights");
    if (o.resume) {
        if (!origin)
            bad_mix("a resume state needs items that carry their source (members `source` and `pass`, as blob and shard::sample have)");
        if (o.resume->sources() != sources)
            bad_mix("the resume state is for " + std::to_string(o.resume->sources()) + " source(s), the mix has " + std::to_string(sources));
    }
}

CONVEYOR_DECL double mix_draw(std::uint64_t key, std::uint64_t i) noexcept
{
    // The (i + 1)-th output of SplitMix64 seeded with `key`: reached directly, for any i.
    std::uint64_t z = key + (i + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1p-53;
}

CONVEYOR_DECL std::uint64_t mix_key(std::uint64_t seed, std::uint64_t epoch, const split& share) noexcept
{
    std::uint64_t k = epoch_seed(seed, epoch);
    k = splitmix64(k ^ (share.slots() * 0xd1b54a32d192ed03ULL))();
    return splitmix64(k ^ (share.slot() * 0xc2b2ae3d27d4eb4fULL))();
}

CONVEYOR_DECL mix_chooser::mix_chooser(const mix_options& o, std::size_t sources, std::uint64_t epoch, const split& share)
    : weights_(o.weights.empty() ? std::vector<double>(sources, 1.0) : o.weights), gone_(sources, 0), schedule_(o.schedule),
      step_(std::max<std::uint64_t>(o.schedule_step, 1)), key_(mix_key(o.seed, epoch, share)), slots_(share.slots()), slot_(share.slot())
{
    weights_.resize(sources, 0.0);
    if (!schedule_) rebuild();
}

CONVEYOR_DECL void mix_chooser::rebuild()
{
    cum_.resize(weights_.size());
    double acc = 0;
    for (std::size_t k = 0; k < weights_.size(); ++k) {
        if (!gone_[k]) acc += weights_[k];
        cum_[k] = acc;
    }
}

CONVEYOR_DECL std::size_t mix_chooser::pick(std::uint64_t i)
{
    if (schedule_) {
        const std::uint64_t g = i * slots_ + slot_;
        const std::uint64_t at = g - g % step_;
        if (at != loaded_) {
            auto w = schedule_(at);
            check_mix_weights(w, weights_.size(), "the schedule's weights at index " + std::to_string(at));
            weights_ = std::move(w);
            loaded_ = at;
            rebuild();
        }
    }
    const double total = cum_.empty() ? 0.0 : cum_.back();
    if (!(total > 0)) return none;
    const double t = mix_draw(key_, i) * total;
    std::size_t k = static_cast<std::size_t>(std::upper_bound(cum_.begin(), cum_.end(), t) - cum_.begin());
    if (k >= cum_.size()) { // `t` rounded up to the total: the last source with weight
        k = cum_.size() - 1;
        while (k > 0 && cum_[k] == cum_[k - 1]) --k;
    }
    return k;
}

CONVEYOR_DECL void mix_chooser::drop(std::size_t k)
{
    if (k >= gone_.size()) return;
    gone_[k] = 1;
    rebuild();
}

/// Positions of an epoch's work list of `units` units among `slots` slots, per slot.
inline std::uint64_t mix_positions_per_slot(std::uint64_t units, std::uint64_t slots, uneven policy)
{
    if (slots == 0) slots = 1;
    return policy == uneven::drop ? units / slots : (units + slots - 1) / slots;
}

} // namespace detail

CONVEYOR_DECL std::string_view to_string(mix_stop s) noexcept
{
    switch (s) {
    case mix_stop::first: return "first";
    case mix_stop::all: return "all";
    case mix_stop::never: return "never";
    }
    return "all";
}

// ---- mix_progress -------------------------------------------------------------------------

CONVEYOR_DECL mix_progress::mix_progress(std::size_t sources) : src_(sources)
{
    for (auto& s : src_) s.live = std::make_shared<progress>();
}

CONVEYOR_DECL mix_progress::mix_progress(const mix_progress& o)
{
    std::lock_guard lk(o.mu_);
    begun_ = o.begun_;
    epoch_ = o.epoch_;
    seed_ = o.seed_;
    stop_ = o.stop_;
    slots_ = o.slots_;
    start_ = o.start_;
    drawn_ = o.drawn_;
    slot_ = o.slot_;
    src_.resize(o.src_.size());
    for (std::size_t k = 0; k < src_.size(); ++k) {
        const auto& from = o.src_[k];
        auto& to = src_[k];
        to.live = std::make_shared<progress>(*from.live);
        for (const auto& [p, e] : from.passes) {
            pass_entry c = e;
            c.state = e.state == from.live ? to.live : std::make_shared<progress>(*e.state);
            to.passes.emplace(p, std::move(c));
        }
        to.floor = from.floor;
        to.units = from.units;
        to.order = from.order;
    }
}

CONVEYOR_DECL mix_progress& mix_progress::operator=(const mix_progress& o)
{
    if (this == &o) return *this;
    mix_progress copy(o);
    std::lock_guard lk(mu_);
    if (!src_.empty() && src_.size() != copy.src_.size())
        detail::bad_mix("a state of " + std::to_string(copy.src_.size()) + " source(s) cannot be restored into one of " + std::to_string(src_.size()));
    if (src_.empty()) {
        src_ = std::move(copy.src_);
    } else {
        for (std::size_t k = 0; k < src_.size(); ++k) {
            auto& to = src_[k];
            auto& from = copy.src_[k];
            *to.live = *from.live;
            to.passes = std::move(from.passes);
            for (auto& [p, e] : to.passes)
                if (e.state == from.live) e.state = to.live;
            to.floor = std::move(from.floor);
            to.units = from.units;
            to.order = from.order;
        }
    }
    begun_ = copy.begun_;
    epoch_ = copy.epoch_;
    seed_ = copy.seed_;
    stop_ = copy.stop_;
    slots_ = copy.slots_;
    start_ = copy.start_;
    drawn_ = std::move(copy.drawn_);
    slot_ = copy.slot_;
    return *this;
}

CONVEYOR_DECL std::size_t mix_progress::sources() const
{
    std::lock_guard lk(mu_);
    return src_.size();
}

CONVEYOR_DECL std::shared_ptr<progress> mix_progress::source(std::size_t k) const
{
    std::lock_guard lk(mu_);
    if (k >= src_.size())
        detail::bad_mix("source " + std::to_string(k) + " is not one of the state's " + std::to_string(src_.size()) + " source(s)");
    return src_[k].live;
}

CONVEYOR_DECL std::uint64_t mix_progress::floor_of(const source_state& s, std::uint64_t slot) const
{
    return slot < s.floor.size() ? s.floor[slot] : 0;
}

CONVEYOR_DECL bool mix_progress::consumed(const sample_id& id)
{
    std::lock_guard lk(mu_);
    if (id.source >= src_.size())
        detail::bad_mix("an item of source " + std::to_string(id.source) + " is marked, and the mix has " + std::to_string(src_.size()) + " source(s)");
    auto& s = src_[id.source];
    const auto it = s.passes.find(id.pass);
    if (it == s.passes.end()) return false; // a pass finished (every item of it marked) or never read
    pass_entry& e = it->second;
    if (!e.state->consumed(id)) return false;
    if (slot_ < drawn_.size()) ++drawn_[slot_];
    if (e.reading) {
        ++e.used;
        e.touched.insert(id.work);
        if (stop_ == mix_stop::never && e.closed && e.used >= e.delivered) finish_pass(id.source, id.pass);
    }
    return true;
}

CONVEYOR_DECL void mix_progress::finish_pass(std::size_t k, std::uint64_t pass)
{
    auto& s = src_[k];
    auto it = s.passes.find(pass);
    if (it == s.passes.end() || it->second.finished) return;
    pass_entry& e = it->second;
    e.finished = true;
    {
        progress& p = *e.state;
        std::lock_guard plk(p.mu_);
        // Its rest can be left out of the state when it was this slot's share of a pass of the
        // mix's division (what the merge then marks as used); else it is kept, each position
        // read counted as used whole.
        e.droppable = p.begun_ && p.slots_ == slots_ && !e.touched.empty() &&
                      std::all_of(e.touched.begin(), e.touched.end(), [&](std::uint64_t w) { return w % slots_ == slot_; });
        if (!e.droppable)
            for (const auto w : e.touched) {
                p.work_.erase(w);
                p.add_whole(w);
            }
    }
    // The floor rises over the passes finished in a row; those of them that can be left out go.
    if (s.floor.size() < slots_) s.floor.resize(static_cast<std::size_t>(slots_), 0);
    auto& f = s.floor[slot_];
    for (auto at = s.passes.find(f); at != s.passes.end() && at->second.finished; at = s.passes.find(f)) {
        if (at->second.droppable) s.passes.erase(at);
        ++f;
    }
}

CONVEYOR_DECL std::uint64_t mix_progress::samples() const
{
    std::lock_guard lk(mu_);
    std::uint64_t n = start_ * slots_;
    for (const auto d : drawn_) n += d;
    return n;
}

CONVEYOR_DECL std::uint64_t mix_progress::epoch() const
{
    std::lock_guard lk(mu_);
    return epoch_;
}

CONVEYOR_DECL bool mix_progress::empty() const
{
    std::lock_guard lk(mu_);
    return !begun_;
}

namespace detail {

CONVEYOR_DECL mix_access::run_start mix_access::start(mix_progress& st, std::uint64_t epoch, const split& share, std::uint64_t seed,
                                                     mix_stop stop, std::size_t sources)
{
    std::lock_guard lk(st.mu_);
    if (st.src_.size() != sources)
        bad_mix("the resume state is for " + std::to_string(st.src_.size()) + " source(s), the mix has " + std::to_string(sources));
    const std::uint64_t slots = share.slots();
    if (!st.begun_ || st.epoch_ != epoch) {
        st.begun_ = true;
        st.epoch_ = epoch;
        st.seed_ = seed;
        st.stop_ = stop;
        st.slots_ = slots;
        st.start_ = 0;
        st.drawn_.assign(static_cast<std::size_t>(slots), 0);
        for (auto& s : st.src_) {
            s.passes.clear();
            s.floor.assign(static_cast<std::size_t>(slots), 0);
            s.units.reset();
            *s.live = progress();
        }
    } else {
        if (st.seed_ != seed || st.stop_ != stop)
            bad_mix("the resume state is for seed " + std::to_string(st.seed_) + " and stop \"" + std::string(to_string(st.stop_)) +
                    "\", the mix has seed " + std::to_string(seed) + " and stop \"" + std::string(to_string(stop)) + "\"");
        if (st.slots_ != slots) {
            // Another division: every slot draws on from the first whole round at or past what
            // all slots used, and reads each source from the first pass any slot still read.
            std::uint64_t used = st.start_ * st.slots_;
            for (const auto d : st.drawn_) used += d;
            st.start_ = (used + slots - 1) / slots;
            st.slots_ = slots;
            st.drawn_.assign(static_cast<std::size_t>(slots), 0);
            for (auto& s : st.src_) {
                const std::uint64_t f = s.floor.empty() ? 0 : *std::min_element(s.floor.begin(), s.floor.end());
                s.floor.assign(static_cast<std::size_t>(slots), f);
                std::erase_if(s.passes, [f](const auto& e) { return e.first < f; });
            }
        }
        if (st.drawn_.size() != st.slots_) st.drawn_.resize(static_cast<std::size_t>(st.slots_), 0);
    }
    st.slot_ = share.slot();
    run_start r;
    r.first_draw = st.start_ + st.drawn_[static_cast<std::size_t>(st.slot_)];
    for (auto& s : st.src_) {
        if (s.floor.size() != st.slots_) s.floor.resize(static_cast<std::size_t>(st.slots_), 0);
        for (auto& [p, e] : s.passes) {
            e.reading = e.closed = e.finished = e.droppable = false;
            e.delivered = e.used = 0;
            e.touched.clear();
        }
        r.first_pass.push_back(stop == mix_stop::never ? st.floor_of(s, st.slot_) : 0);
    }
    return r;
}

CONVEYOR_DECL bool mix_access::begin_pass(mix_progress& st, std::size_t k, std::uint64_t pass, std::uint64_t& plans)
{
    std::lock_guard lk(st.mu_);
    auto& s = st.src_[k];
    // Another pass that holds the source's object keeps a copy of its own.
    for (auto& [p, e] : s.passes)
        if (p != pass && e.state == s.live) e.state = std::make_shared<progress>(*s.live);
    auto it = s.passes.find(pass);
    const bool fresh = it == s.passes.end();
    if (fresh) {
        *s.live = progress();
        it = s.passes.emplace(pass, mix_progress::pass_entry{}).first;
    } else if (it->second.state != s.live) {
        *s.live = *it->second.state;
    }
    auto& e = it->second;
    e.state = s.live;
    e.reading = true;
    e.closed = e.finished = e.droppable = false;
    e.delivered = e.used = 0;
    e.touched.clear();
    std::lock_guard plk(s.live->mu_);
    plans = s.live->plans_;
    return fresh;
}

CONVEYOR_DECL void mix_access::check_pass(mix_progress& st, std::size_t k, std::uint64_t pass, std::uint64_t plans)
{
    std::lock_guard lk(st.mu_);
    auto& s = st.src_[k];
    std::lock_guard plk(s.live->mu_);
    if (s.live->plans_ == plans)
        bad_mix("source " + std::to_string(k) + " did not plan its run (pass " + std::to_string(pass) +
                ") from its resume state: give it mix_progress::source(" + std::to_string(k) + ") (shard::source_options::resume, epoch_options::resume)");
    if (s.live->begun_) {
        s.units = s.live->shards_;
        s.order = s.live->opts_;
    }
}

CONVEYOR_DECL void mix_access::end_pass(mix_progress& st, std::size_t k, std::uint64_t pass, std::uint64_t delivered)
{
    std::lock_guard lk(st.mu_);
    auto& s = st.src_[k];
    const auto it = s.passes.find(pass);
    if (it == s.passes.end()) return;
    auto& e = it->second;
    e.closed = true;
    e.delivered = delivered;
    if (st.stop_ != mix_stop::never) return;
    // The source's object goes on to the next pass: this one keeps a copy.
    if (e.state == s.live) e.state = std::make_shared<progress>(*s.live);
    if (e.used >= e.delivered) st.finish_pass(k, pass);
}

// ---- JSON -----------------------------------------------------------------------------------

[[noreturn]] inline void bad_mix_state(const std::string& what)
{
    bad_mix("resume state: " + what);
}

inline std::uint64_t mix_u64(const boost::json::value& v, const std::string& where)
{
    if (v.is_uint64()) return v.get_uint64();
    if (v.is_int64() && v.get_int64() >= 0) return static_cast<std::uint64_t>(v.get_int64());
    bad_mix_state(where + " is not a whole number of 0 or more");
}

inline std::uint64_t mix_u64(const boost::json::object& o, std::string_view key, const std::string& where)
{
    const auto* v = o.if_contains(key);
    if (!v) bad_mix_state(where + " has no \"" + std::string(key) + "\"");
    return mix_u64(*v, where + "." + std::string(key));
}

inline std::vector<std::uint64_t> mix_u64s(const boost::json::object& o, std::string_view key, const std::string& where)
{
    const auto* v = o.if_contains(key);
    if (!v || !v->is_array()) bad_mix_state(where + "." + std::string(key) + " is not an array");
    std::vector<std::uint64_t> out;
    std::size_t i = 0;
    for (const auto& e : v->as_array()) out.push_back(mix_u64(e, where + "." + std::string(key) + "[" + std::to_string(i++) + "]"));
    return out;
}

inline boost::json::object order_json(const order_options& o)
{
    return {{"seed", o.seed}, {"shuffle", o.shuffle}, {"policy", o.policy == uneven::drop ? "drop" : "pad"}};
}

inline order_options order_of_json(const boost::json::value& v, const std::string& where)
{
    if (!v.is_object()) bad_mix_state(where + " is not an object");
    const auto& o = v.as_object();
    order_options r;
    r.seed = mix_u64(o, "seed", where);
    const auto* sh = o.if_contains("shuffle");
    if (!sh || !sh->is_bool()) bad_mix_state(where + ".shuffle is not true or false");
    r.shuffle = sh->get_bool();
    const auto* pol = o.if_contains("policy");
    if (!pol || !pol->is_string() || (pol->as_string() != "drop" && pol->as_string() != "pad"))
        bad_mix_state(where + ".policy is not \"drop\" or \"pad\"");
    r.policy = pol->as_string() == "drop" ? uneven::drop : uneven::pad;
    return r;
}

} // namespace detail

CONVEYOR_DECL std::string mix_progress::to_json() const
{
    std::lock_guard lk(mu_);
    boost::json::object o;
    o["format"] = "conveyor-mix-progress";
    o["version"] = 1;
    if (begun_) {
        o["epoch"] = epoch_;
        o["seed"] = seed_;
        o["stop"] = std::string(to_string(stop_));
        o["slots"] = slots_;
        o["start"] = start_;
        o["drawn"] = boost::json::array(drawn_.begin(), drawn_.end());
    }
    boost::json::array sources;
    for (const auto& s : src_) {
        boost::json::object so;
        if (begun_) {
            so["floor"] = boost::json::array(s.floor.begin(), s.floor.end());
            if (s.units) {
                so["units"] = *s.units;
                so["order"] = detail::order_json(s.order);
            }
            boost::json::array passes;
            for (const auto& [p, e] : s.passes) {
                if (e.state->empty()) continue; // begun for a run that had not planned yet
                passes.push_back(boost::json::object{{"pass", p}, {"progress", boost::json::parse(e.state->to_json())}});
            }
            so["passes"] = std::move(passes);
        }
        sources.push_back(std::move(so));
    }
    o["sources"] = std::move(sources);
    return boost::json::serialize(o);
}

CONVEYOR_DECL mix_progress mix_progress::from_json(std::string_view text)
{
    boost::system::error_code ec;
    auto v = boost::json::parse(text, ec);
    if (ec) detail::bad_mix_state("not JSON: " + ec.message());
    if (!v.is_object()) detail::bad_mix_state("not a JSON object");
    const auto& o = v.as_object();
    const auto* fmt = o.if_contains("format");
    if (!fmt || !fmt->is_string() || fmt->as_string() != "conveyor-mix-progress")
        detail::bad_mix_state("\"format\" is not \"conveyor-mix-progress\"");
    if (detail::mix_u64(o, "version", "the state") != 1) detail::bad_mix_state("only version 1 is known");
    const auto* sources = o.if_contains("sources");
    if (!sources || !sources->is_array()) detail::bad_mix_state("\"sources\" is not an array");
    mix_progress m(sources->as_array().size());
    if (!o.contains("epoch")) return m; // nothing recorded yet
    m.begun_ = true;
    m.epoch_ = detail::mix_u64(o, "epoch", "the state");
    m.seed_ = detail::mix_u64(o, "seed", "the state");
    const auto* stop = o.if_contains("stop");
    if (!stop || !stop->is_string()) detail::bad_mix_state("\"stop\" is not \"first\", \"all\" or \"never\"");
    if (stop->as_string() == "first") m.stop_ = mix_stop::first;
    else if (stop->as_string() == "all") m.stop_ = mix_stop::all;
    else if (stop->as_string() == "never") m.stop_ = mix_stop::never;
    else detail::bad_mix_state("\"stop\" is not \"first\", \"all\" or \"never\"");
    m.slots_ = detail::mix_u64(o, "slots", "the state");
    if (m.slots_ == 0) detail::bad_mix_state("\"slots\" must be above 0");
    m.start_ = detail::mix_u64(o, "start", "the state");
    m.drawn_ = detail::mix_u64s(o, "drawn", "the state");
    if (m.drawn_.size() != m.slots_)
        detail::bad_mix_state("\"drawn\" has " + std::to_string(m.drawn_.size()) + " entries for " + std::to_string(m.slots_) + " slots");
    std::size_t k = 0;
    for (const auto& sv : sources->as_array()) {
        const std::string where = "sources[" + std::to_string(k) + "]";
        if (!sv.is_object()) detail::bad_mix_state(where + " is not an object");
        const auto& so = sv.as_object();
        auto& s = m.src_[k++];
        s.floor = detail::mix_u64s(so, "floor", where);
        if (s.floor.size() != m.slots_)
            detail::bad_mix_state(where + ".floor has " + std::to_string(s.floor.size()) + " entries for " + std::to_string(m.slots_) + " slots");
        if (const auto* u = so.if_contains("units")) {
            s.units = detail::mix_u64(*u, where + ".units");
            const auto* ord = so.if_contains("order");
            if (!ord) detail::bad_mix_state(where + " has \"units\" but no \"order\"");
            s.order = detail::order_of_json(*ord, where + ".order");
        }
        const auto* passes = so.if_contains("passes");
        if (!passes || !passes->is_array()) detail::bad_mix_state(where + ".passes is not an array");
        std::size_t i = 0;
        for (const auto& pv : passes->as_array()) {
            const std::string pw = where + ".passes[" + std::to_string(i++) + "]";
            if (!pv.is_object()) detail::bad_mix_state(pw + " is not an object");
            const auto& po = pv.as_object();
            const std::uint64_t p = detail::mix_u64(po, "pass", pw);
            const auto* pr = po.if_contains("progress");
            if (!pr || !pr->is_object()) detail::bad_mix_state(pw + ".progress is not an object");
            auto state = std::make_shared<progress>(progress::from_json(boost::json::serialize(*pr)));
            if (state->epoch() != m.epoch_ + p)
                detail::bad_mix_state(pw + " is of epoch " + std::to_string(state->epoch()) + ", not the mix's epoch " + std::to_string(m.epoch_) +
                                      " + pass " + std::to_string(p));
            if (!s.passes.emplace(p, pass_entry{.state = std::move(state)}).second) detail::bad_mix_state(pw + " repeats pass " + std::to_string(p));
        }
    }
    return m;
}

CONVEYOR_DECL mix_progress mix_progress::merge(const std::vector<mix_progress>& parts)
{
    std::vector<mix_progress> begun;
    for (const auto& part : parts) {
        mix_progress p(part);
        if (p.begun_) begun.push_back(std::move(p));
    }
    if (begun.empty()) return mix_progress(parts.empty() ? 0 : parts.front().sources());
    auto differ = [](const mix_progress& p, const mix_progress& a) {
        detail::bad_mix("resume states to merge belong to different mixes or divisions (epoch " + std::to_string(p.epoch_) + ", seed " +
                        std::to_string(p.seed_) + ", " + std::to_string(p.src_.size()) + " source(s), " + std::to_string(p.slots_) +
                        " slots from draw " + std::to_string(p.start_) + ", against epoch " + std::to_string(a.epoch_) + ", seed " +
                        std::to_string(a.seed_) + ", " + std::to_string(a.src_.size()) + " source(s), " + std::to_string(a.slots_) +
                        " slots from draw " + std::to_string(a.start_) + ")");
    };
    for (const auto& p : begun)
        if (p.epoch_ != begun.front().epoch_ || p.seed_ != begun.front().seed_ || p.stop_ != begun.front().stop_ ||
            p.src_.size() != begun.front().src_.size())
            differ(p, begun.front());
    // A state restored on another division but not run since still holds the old division
    // (a run converts it when it starts); what it holds, the states that ran from the same
    // restore hold too. The latest division is the one furthest along the global index.
    std::uint64_t latest = 0;
    for (const auto& p : begun) latest = std::max(latest, p.start_ * p.slots_);
    std::erase_if(begun, [&](const mix_progress& p) { return p.start_ * p.slots_ < latest; });
    mix_progress out(begun.front().src_.size());
    const mix_progress& a = begun.front();
    out.begun_ = true;
    out.epoch_ = a.epoch_;
    out.seed_ = a.seed_;
    out.stop_ = a.stop_;
    out.slots_ = a.slots_;
    out.start_ = a.start_;
    out.drawn_.assign(static_cast<std::size_t>(a.slots_), 0);
    for (const auto& p : begun) {
        if (p.slots_ != a.slots_ || p.start_ != a.start_) differ(p, a);
        for (std::size_t s = 0; s < p.drawn_.size() && s < out.drawn_.size(); ++s) out.drawn_[s] = std::max(out.drawn_[s], p.drawn_[s]);
    }
    const std::uint64_t slots = out.slots_;
    for (std::size_t k = 0; k < out.src_.size(); ++k) {
        auto& dst = out.src_[k];
        dst.floor.assign(static_cast<std::size_t>(slots), 0);
        std::map<std::uint64_t, std::vector<progress>> by_pass;
        for (const auto& p : begun) {
            const auto& s = p.src_[k];
            for (std::size_t j = 0; j < s.floor.size() && j < dst.floor.size(); ++j) dst.floor[j] = std::max(dst.floor[j], s.floor[j]);
            if (s.units && !dst.units) {
                dst.units = s.units;
                dst.order = s.order;
            }
            for (const auto& [pass, e] : s.passes)
                if (!e.state->empty()) by_pass[pass].push_back(*e.state);
        }
        const std::uint64_t low = dst.floor.empty() ? 0 : *std::min_element(dst.floor.begin(), dst.floor.end());
        std::map<std::uint64_t, progress> merged;
        for (auto& [pass, states] : by_pass)
            if (pass >= low) merged.emplace(pass, progress::merge(states));
        // A slot whose floor passed a pass it keeps no state of has read its share of it and
        // every item of it was marked (it left the pass out): that share counts as used.
        for (const auto& p : begun) {
            const auto& s = p.src_[k];
            for (std::size_t j = 0; j < s.floor.size() && j < slots; ++j)
                for (std::uint64_t pass = low; pass < s.floor[j]; ++pass) {
                    if (s.passes.contains(pass)) continue;
                    auto it = merged.find(pass);
                    if (it == merged.end()) {
                        if (!dst.units)
                            detail::bad_mix("resume states to merge: source " + std::to_string(k) + " has finished passes but no list size");
                        progress fresh;
                        fresh.begin(out.epoch_ + pass, *dst.units, slots, dst.order);
                        it = merged.emplace(pass, std::move(fresh)).first;
                    }
                    progress& pr = it->second;
                    std::lock_guard plk(pr.mu_);
                    if (pr.slots_ != slots) continue; // divided otherwise: never left out
                    std::erase_if(pr.work_, [&](const auto& w) { return w.first % slots == j; });
                    pr.raise_whole(j, detail::mix_positions_per_slot(pr.shards_, slots, pr.opts_.policy));
                }
        }
        for (auto& [pass, pr] : merged) dst.passes.emplace(pass, pass_entry{.state = std::make_shared<progress>(std::move(pr))});
    }
    return out;
}

} // namespace conveyor

#endif
