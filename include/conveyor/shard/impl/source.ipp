// conveyor/shard/impl/source.ipp — the shard source: work pieces of an epoch read by a few
// lanes at once, their samples merged in a fixed round-robin order.
#ifndef CONVEYOR_SHARD_IMPL_SOURCE_IPP
#define CONVEYOR_SHARD_IMPL_SOURCE_IPP

#include <conveyor/core/error.hpp>
#include <conveyor/core/source.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/location.hpp>
#include <conveyor/shard/detail/sample_reader.hpp>
#include <conveyor/shard/source.hpp>
#include <conveyor/store/open.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <exception>

namespace conveyor::shard {
namespace detail {

/// What one run of the shard source reads.
struct shards_run {
    std::shared_ptr<const std::vector<shard_ref>> list;
    source_options o;
    split share;
    std::uint64_t epoch = 0;
    std::vector<work_piece> pieces; // this slot's share, in order (not used when resampled)
};

/// Reads one piece of work into `out`; false when nobody listens any more.
inline asio::awaitable<bool> read_piece(std::shared_ptr<run_context> ctx, std::shared_ptr<const shards_run> st, work_piece piece,
                                        std::shared_ptr<conveyor::detail::channel<sample>> out)
{
    const shard_ref& ref = (*st->list)[piece.shard];
    // A gzip-compressed shard cannot be entered at an offset: it is read from its start
    // and the samples before the resume point are passed over.
    const bool from_start = compressed_by_name(ref.url) || piece.offset == 0;
    chunk_options co = st->o.chunks;
    co.offset = from_start ? 0 : piece.offset;
    sample_reader reader(store::open_chunks(ctx->rt(), location(ref.url), co, {.s3 = st->o.s3, .s3_setting = "source_options::s3"}),
                         {.tar = st->o.tar, .shard = piece.shard, .first_index = from_start ? 0 : piece.first}, &ctx->rt());
    auto skip = piece.skip.begin();
    while (auto s = co_await reader.async_next()) {
        const std::uint64_t i = s->index;
        if (i < piece.first) continue;
        while (skip != piece.skip.end() && *skip < i) ++skip;
        if (skip != piece.skip.end() && *skip == i) continue;
        s->work = piece.work;
        s->url = ref.url;
        if (!co_await out->send(std::move(*s))) co_return false;
    }
    co_return true;
}

/// One lane: pieces `lane`, `lane + lanes`, … of this slot's share (or, resampled, draws
/// `lane`, `lane + lanes`, … forever), each read to its end in turn.
inline asio::awaitable<void> read_lane(std::shared_ptr<run_context> ctx, std::shared_ptr<const shards_run> st, std::size_t lane,
                                       std::size_t lanes, std::shared_ptr<conveyor::detail::channel<sample>> out)
{
    const auto n = static_cast<std::uint64_t>(st->list->size());
    for (std::uint64_t k = lane;; k += lanes) {
        work_piece piece;
        if (st->o.resampled) {
            piece.work = k;
            piece.shard = resampled_draw(n, st->o.order.seed, st->epoch, st->share.slot(), k);
        } else {
            if (k >= st->pieces.size()) break;
            piece = st->pieces[k];
        }
        const std::string url = (*st->list)[piece.shard].url;
        std::exception_ptr failed;
        try {
            if (!co_await read_piece(ctx, st, std::move(piece), out)) break;
        } catch (...) {
            failed = std::current_exception();
        }
        if (!failed) continue;
        if (ctx->stopping()) break;
        if (st->o.errors == on_error::fail) std::rethrow_exception(failed);
        std::string why = conveyor::detail::what_of(failed);
        if (why.starts_with("conveyor: ")) why.erase(0, 10);
        ctx->note_skip("shard " + conveyor::detail::printable(url) + ": " + why + "; the rest of this shard is skipped");
    }
    out->close();
}

/// Merges the lanes' samples one from each in turn, so the order does not depend on timing.
inline asio::awaitable<void> merge_lanes(std::shared_ptr<run_context> ctx, std::shared_ptr<const shards_run> st, std::size_t count,
                                         conveyor::detail::channel<sample>& out)
{
    // The run's whole read-ahead (every open shard's chunks in flight) is taken from the
    // memory budget in one piece before any read, and given back when the run ends: the
    // lanes' readers then take nothing chunk by chunk (chunk_options::use_memory_budget).
    // Taken chunk by chunk, a lane waiting for room could wait for ever on chunks that
    // other lanes hold until this merge, which waits for that lane, takes their samples.
    runtime& rt = ctx->rt();
    const std::size_t want = count * std::max<std::size_t>(1, st->o.chunks.chunks_in_flight) * st->o.chunks.chunk_size;
    auto [ec, lease] = co_await rt.memory().async_acquire(want, asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
    std::vector<std::shared_ptr<conveyor::detail::channel<sample>>> lanes;
    for (std::size_t j = 0; j < count; ++j) {
        lanes.push_back(ctx->make_channel<sample>(16));
        ctx->spawn(rt.io_executor(j % rt.io_lanes()), read_lane(ctx, st, j, count, lanes.back()), "shards");
    }
    // However this ends (the consumer or a `take` stopped listening, or a failure), the
    // lanes are told nobody listens, so that none waits for room forever.
    struct close_lanes {
        std::vector<std::shared_ptr<conveyor::detail::channel<sample>>>& lanes;
        ~close_lanes()
        {
            for (auto& l : lanes) l->close_receiver();
        }
    } closer{lanes};
    std::vector<bool> ended(lanes.size(), false);
    std::size_t alive = lanes.size();
    while (alive > 0) {
        for (std::size_t j = 0; j < lanes.size(); ++j) {
            if (ended[j]) continue;
            auto s = co_await lanes[j]->receive();
            if (!s) {
                ended[j] = true;
                --alive;
                continue;
            }
            if (!co_await out.send(std::move(*s))) co_return;
        }
    }
}

} // namespace detail

CONVEYOR_DECL unsigned default_shards_in_flight(const std::vector<shard_ref>& list)
{
    for (const auto& s : list)
        if (store::is_remote(location(s.url))) return 12;
    return 4;
}

CONVEYOR_DECL pipeline<sample> shards(std::vector<shard_ref> list, source_options o)
{
    if (list.empty()) throw error(make_error_code(conveyor::errc::invalid_argument), {.stage = "shards", .detail = "the shard list is empty"});
    auto shared = std::make_shared<const std::vector<shard_ref>>(std::move(list));
    const split share = o.share ? *o.share : split_from_environment();
    if (share.world_size == 0 || share.workers == 0 || share.rank >= share.world_size || share.worker >= share.workers)
        throw error(make_error_code(conveyor::errc::invalid_argument),
                    {.stage = "shards", .detail = "rank " + std::to_string(share.rank) + " of " + std::to_string(share.world_size) + ", worker " +
                                                  std::to_string(share.worker) + " of " + std::to_string(share.workers) + " is not a valid share"});
    if (o.shards_in_flight == 0) o.shards_in_flight = default_shards_in_flight(*shared);
    return pipeline<sample>([shared, o, share](const std::shared_ptr<run_context>& ctx) {
        auto st = std::make_shared<detail::shards_run>();
        st->list = shared;
        st->o = o;
        st->share = share;
        st->epoch = ctx->epoch();
        std::size_t lanes = o.shards_in_flight;
        try {
            if (!o.resampled) {
                const auto n = static_cast<std::uint64_t>(shared->size());
                auto state = o.resume ? o.resume : std::make_shared<progress>();
                if (state->empty() || state->epoch() != ctx->epoch()) state->begin(ctx->epoch(), n, share.slots(), o.order);
                st->pieces = state->remaining(n, share.slot(), share.slots());
                lanes = std::min<std::size_t>(lanes, std::max<std::size_t>(1, st->pieces.size()));
            }
        } catch (...) {
            auto ch = ctx->make_channel<sample>(1);
            ctx->fail(std::current_exception(), "shards");
            ch->close();
            return stream<sample>(ctx, ch);
        }
        st->o.chunks.use_memory_budget = false; // the run takes its read-ahead at once (merge_lanes)
        return make_stream<sample>(ctx, "shards", o.capacity, [ctx, st, lanes](conveyor::detail::channel<sample>& out) {
            return detail::merge_lanes(ctx, st, lanes, out);
        });
    });
}

CONVEYOR_DECL pipeline<sample> shards(std::string_view spec, source_options o)
{
    list_options lo;
    if (o.s3) lo.s3 = &*o.s3;
    return shards(resolve(spec, lo), std::move(o));
}

} // namespace conveyor::shard

#endif
