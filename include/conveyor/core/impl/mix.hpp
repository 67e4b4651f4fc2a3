// conveyor/core/impl/mix.hpp — the mix's run: its sources' streams, the draws, the loop that
// takes each item from the source its draw names. The draws and the state's bookkeeping are
// not templates (impl/mix.ipp).
#ifndef CONVEYOR_CORE_IMPL_MIX_HPP
#define CONVEYOR_CORE_IMPL_MIX_HPP

#include <conveyor/core/error.hpp>
#include <conveyor/core/mix.hpp>
#include <conveyor/core/stream.hpp>

#include <boost/asio/awaitable.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace conveyor::detail {

/// Throws `conveyor::error` (`errc::invalid_argument`, stage `mix`) saying `what`.
[[noreturn]] CONVEYOR_DECL void bad_mix(std::string what);

/// Throws (as `bad_mix`) unless `w` holds `sources` weights, each finite and 0 or more, not
/// all 0; `what` names them in the message ("the weights", "the schedule's weights at 40").
CONVEYOR_DECL void check_mix_weights(const std::vector<double>& w, std::size_t sources, std::string_view what);

/// Throws (as `bad_mix`) for options that no run of a mix of `sources` sources can use;
/// `origin`: whether its items carry their mix origin (a state needs it).
CONVEYOR_DECL void check_mix_options(const mix_options& o, std::size_t sources, bool origin);

/// Draw `i` of the stream keyed by `key`: uniform in [0, 1), a pure function of both.
CONVEYOR_DECL double mix_draw(std::uint64_t key, std::uint64_t i) noexcept;

/// The key of the draws of slot `share.slot()` of `share.slots()` in epoch `epoch`.
CONVEYOR_DECL std::uint64_t mix_key(std::uint64_t seed, std::uint64_t epoch, const split& share) noexcept;

/** Which source each draw of one run names: the weights in effect (the options', or the
    schedule's at the draw's global index), less the sources that left the mix. */
class mix_chooser {
public:
    static constexpr std::size_t none = std::numeric_limits<std::size_t>::max();

    CONVEYOR_DECL mix_chooser(const mix_options& o, std::size_t sources, std::uint64_t epoch, const split& share);

    /// The source draw `i` names, or `none` when no source with weight is left. Throws (as
    /// `bad_mix`) when the schedule gives bad weights.
    CONVEYOR_DECL std::size_t pick(std::uint64_t i);

    /// Source `k` has left the mix (`mix_stop::all`).
    CONVEYOR_DECL void drop(std::size_t k);

private:
    void rebuild();

    std::vector<double> weights_;
    std::vector<char> gone_;
    std::vector<double> cum_; // cumulative weights of the sources still in
    mix_schedule schedule_;
    std::uint64_t step_;
    std::uint64_t key_;
    std::uint64_t slots_;
    std::uint64_t slot_;
    std::uint64_t loaded_ = std::numeric_limits<std::uint64_t>::max(); // the index the schedule was asked last
};

/// What a run of a mix does to its state (see `mix_progress`).
struct mix_access {
    struct run_start {
        std::uint64_t first_draw = 0;         // this slot's next draw index
        std::vector<std::uint64_t> first_pass; // per source: the pass it reads first
    };
    /// Begins (or resumes) the state for a run of epoch `epoch` on `share`.
    CONVEYOR_DECL static run_start start(mix_progress& st, std::uint64_t epoch, const split& share, std::uint64_t seed, mix_stop stop,
                                         std::size_t sources);
    /// Before source `k`'s run of pass `pass` is built: gives the source's object that pass's
    /// state (empty for a pass not begun). True when the pass starts afresh; `plans` gets the
    /// object's plan count, for `check_pass`.
    CONVEYOR_DECL static bool begin_pass(mix_progress& st, std::size_t k, std::uint64_t pass, std::uint64_t& plans);
    /// After it was built: throws (as `bad_mix`) unless the source planned its run from the
    /// object (it was given `source(k)` as its resume state).
    CONVEYOR_DECL static void check_pass(mix_progress& st, std::size_t k, std::uint64_t pass, std::uint64_t plans);
    /// Source `k`'s stream of pass `pass` ended after `delivered` items.
    CONVEYOR_DECL static void end_pass(mix_progress& st, std::size_t k, std::uint64_t pass, std::uint64_t delivered);
};

/// Items a mix takes from a source's stream at once.
inline constexpr std::size_t mix_read_batch = 64;

template <class T>
struct mix_lane {
    std::optional<stream<T>> in;
    std::shared_ptr<run_context> nested; // the run a pass after the first is built on
    std::vector<T> held;                 // taken from `in`, not yet drawn
    std::size_t next = 0;                // the next of `held` to go
    std::uint64_t pass = 0;
    std::uint64_t delivered = 0;         // items of this pass drawn
    bool fresh = true;                   // the pass started afresh (not resumed)
};

template <class T>
struct mix_run {
    mix_run(std::shared_ptr<run_context> c, std::shared_ptr<const std::vector<pipeline<T>>> s, std::shared_ptr<const mix_options> opts,
            const split& share)
        : ctx(std::move(c)), sources(std::move(s)), o(std::move(opts)), chooser(*o, sources->size(), ctx->epoch(), share),
          lanes(sources->size())
    {
    }
    mix_run(const mix_run&) = delete;
    mix_run& operator=(const mix_run&) = delete;
    ~mix_run()
    {
        for (auto& l : lanes) close(l);
    }

    // Stops reading `l`: its source stops producing.
    static void close(mix_lane<T>& l) noexcept
    {
        if (l.in) l.in->close();
        if (l.nested) l.nested->cancel();
        l.in.reset();
        l.nested.reset();
        l.held.clear();
        l.next = 0;
    }

    // Starts source `k`'s pass `pass`: its epoch is the run's plus the pass.
    void open(std::size_t k, std::uint64_t pass)
    {
        auto& l = lanes[k];
        close(l);
        std::uint64_t plans = 0;
        l.fresh = o->resume ? mix_access::begin_pass(*o->resume, k, pass, plans) : true;
        l.pass = pass;
        l.delivered = 0;
        if (pass == 0) {
            l.in.emplace((*sources)[k].build(ctx));
        } else {
            l.nested = ctx->nested(ctx->epoch() + pass);
            l.in.emplace((*sources)[k].build(l.nested));
        }
        if (o->resume && !ctx->stopping()) mix_access::check_pass(*o->resume, k, pass, plans);
    }

    std::shared_ptr<run_context> ctx;
    std::shared_ptr<const std::vector<pipeline<T>>> sources;
    std::shared_ptr<const mix_options> o;
    mix_chooser chooser;
    std::vector<mix_lane<T>> lanes;
    std::uint64_t next_draw = 0;
};

/// The mix's loop: item `i` from the source draw `i` names, the sources' items taken a few
/// at a time; what is drawn goes on before the loop waits for a source.
template <class T>
asio::awaitable<void> mix_items(std::shared_ptr<mix_run<T>> run, sink<T>& out)
{
    struct closer {
        mix_run<T>& run;
        ~closer()
        {
            for (auto& l : run.lanes) mix_run<T>::close(l);
        }
    } close_all{*run};
    const std::size_t chunk = std::clamp<std::size_t>(out.capacity(), 1, 64);
    std::vector<T> put;
    put.reserve(chunk);
    std::uint64_t i = run->next_draw;
    for (;;) {
        const std::size_t k = run->chooser.pick(i);
        if (k == mix_chooser::none) break;
        mix_lane<T>& lane = run->lanes[k];
        if (lane.next == lane.held.size()) {
            lane.held.clear();
            lane.next = 0;
            bool ended = false;
            if (!channel_of(*lane.in)->try_receive_some(lane.held, mix_read_batch, ended) && !ended) {
                // This source's turn, and it has nothing yet: what was drawn goes on before
                // the wait. (No co_await inside `&&`: GCC 12 evaluates it even when the left
                // side is false.)
                if (!put.empty()) {
                    if (!co_await out.send_all(put)) co_return;
                }
                auto got = lane.in->async_next_batch(lane.held, mix_read_batch); // named: no temporary across the co_await
                ended = !co_await std::move(got);
            }
            if (ended) {
                if (run->o->resume) mix_access::end_pass(*run->o->resume, k, lane.pass, lane.delivered);
                const bool empty_pass = lane.fresh && lane.delivered == 0;
                mix_run<T>::close(lane);
                if (run->o->stop == mix_stop::first) break;
                if (run->o->stop == mix_stop::all) {
                    run->chooser.drop(k);
                    continue;
                }
                if (empty_pass)
                    bad_mix("source " + std::to_string(k) + " has no items in its pass " + std::to_string(lane.pass) + " (epoch " +
                            std::to_string(run->ctx->epoch() + lane.pass) + "): a source that is empty cannot be started again");
                run->open(k, lane.pass + 1);
                continue;
            }
        }
        T item = std::move(lane.held[lane.next++]);
        set_mix_origin(item, static_cast<std::uint32_t>(k), lane.pass);
        ++lane.delivered;
        ++i;
        put.push_back(std::move(item));
        if (put.size() >= chunk) {
            if (!co_await out.send_all(put)) co_return;
        }
    }
    if (!put.empty()) co_await out.send_all(put);
}

} // namespace conveyor::detail

namespace conveyor {

template <class T>
pipeline<T> mix(std::vector<pipeline<T>> sources, mix_options options)
{
    detail::check_mix_options(options, sources.size(), carries_mix_origin<T>);
    // The sources' runtime (they are built on the mix's runs, so they must agree on one).
    runtime* rt = sources.front().chosen_runtime();
    for (const auto& s : sources)
        if (s.chosen_runtime() != rt) detail::bad_mix("the sources run on different runtimes: give them one (pipeline::on)");
    const split share = checked_split(options.share ? *options.share : split_from_environment(), "mix");
    auto list = std::make_shared<const std::vector<pipeline<T>>>(std::move(sources));
    auto opts = std::make_shared<const mix_options>(std::move(options));
    return pipeline<T>(
        [list, opts, share](const std::shared_ptr<run_context>& ctx) {
            std::shared_ptr<detail::mix_run<T>> run;
            try {
                run = std::make_shared<detail::mix_run<T>>(ctx, list, opts, share);
                std::vector<std::uint64_t> first(list->size(), 0);
                if (opts->resume) {
                    auto st = detail::mix_access::start(*opts->resume, ctx->epoch(), share, opts->seed, opts->stop, list->size());
                    run->next_draw = st.first_draw;
                    first = std::move(st.first_pass);
                }
                for (std::size_t k = 0; k < list->size(); ++k) run->open(k, first[k]);
            } catch (...) {
                run.reset();
                auto ch = detail::make_channel<T>(*ctx, 1);
                ctx->fail(std::current_exception(), "mix");
                ch->close();
                return detail::stream_of(ctx, ch);
            }
            return make_stream<T>(ctx, "mix", opts->capacity, [run](sink<T>& out) { return detail::mix_items<T>(run, out); });
        },
        rt);
}

} // namespace conveyor

#endif
