// conveyor/shard/impl/source.ipp — the shard source: the work pieces of an epoch read by the
// source core (`sequence_source`), a few at once, their samples merged in a fixed order.
#ifndef CONVEYOR_SHARD_IMPL_SOURCE_IPP
#define CONVEYOR_SHARD_IMPL_SOURCE_IPP

#include <conveyor/core/error.hpp>
#include <conveyor/core/source.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/location.hpp>
#include <conveyor/shard/detail/sample_reader.hpp>
#include <conveyor/shard/source.hpp>
#include <conveyor/store/context.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>

namespace conveyor::shard {
namespace detail {

/// What one run of the shard source reads.
struct shards_run {
    std::shared_ptr<const std::vector<shard_ref>> list;
    std::shared_ptr<const std::vector<std::shared_ptr<const std::string>>> urls; // the list's, shared by the samples' makers
    source_options o;
    split share;
    std::uint64_t epoch = 0;
    std::shared_ptr<const store::context> stores; // what every shard of the run is read through
    std::vector<work_piece> pieces; // this slot's share, in order (not used when resampled)
};

/** The reader of a run, as `sequence_source` calls it: key `k` is piece `k` of this slot's
    share (or, resampled, the `k`-th draw), read into samples by a `sample_reader` that is
    told everything a sample carries. A named type, not a closure: it ends up in coroutine
    frames of functions compiled once. */
struct shard_reader {
    runtime* rt;
    std::shared_ptr<const shards_run> st;

    work_piece piece_of(std::uint64_t k) const
    {
        if (!st->o.resampled) return st->pieces[static_cast<std::size_t>(k)];
        work_piece piece;
        piece.work = k;
        piece.shard = resampled_draw(static_cast<std::uint64_t>(st->list->size()), st->o.order.seed, st->epoch, st->share.slot(), k);
        return piece;
    }

    sample_reader operator()(std::uint64_t k, const sequence_lane& lane) const
    {
        work_piece piece = piece_of(k);
        const shard_ref& ref = (*st->list)[piece.shard];
        // A gzip-compressed shard cannot be entered at an offset: it is read from its start
        // and the samples before the resume point are passed over.
        const bool from_start = compressed_by_name(ref.url) || piece.offset == 0;
        chunk_options co = lane.chunks(st->o.chunks);
        co.offset = from_start ? 0 : piece.offset;
        const location where(ref.url);
        return sample_reader(st->stores->store_for(where)->read_chunks(where, co),
                             {.tar = st->o.tar,
                              .shard = piece.shard,
                              .first_index = from_start ? 0 : piece.first,
                              .work = piece.work,
                              .url = (*st->urls)[piece.shard],
                              .deliver_from = piece.first,
                              .skip = std::move(piece.skip)},
                             rt);
    }

    std::string skip_note(std::uint64_t k, std::string_view why) const
    {
        const shard_ref& ref = (*st->list)[piece_of(k).shard];
        return "shard " + conveyor::detail::printable(ref.url) + ": " + std::string(why) + "; the rest of this shard is skipped";
    }
};

/// Makes each run's reader.
struct open_shard_reader {
    std::shared_ptr<const shards_run> st;
    shard_reader operator()(run_context& ctx) const { return {&ctx.rt(), st}; }
};

} // namespace detail

namespace detail {

/// Chunks one open shard may hold: those in flight, and four that samples on their way
/// downstream still hold.
inline std::size_t shard_chunks_held(const chunk_options& o) noexcept
{
    return std::max<std::size_t>(1, o.chunks_in_flight) + 4;
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
    const split share = checked_split(o.share ? *o.share : split_from_environment(), "shards");
    if (o.shards_in_flight == 0) o.shards_in_flight = default_shards_in_flight(*shared);
    auto names = std::make_shared<std::vector<std::shared_ptr<const std::string>>>();
    names->reserve(shared->size());
    for (const auto& ref : *shared) names->push_back(std::make_shared<const std::string>(ref.url));
    std::shared_ptr<const std::vector<std::shared_ptr<const std::string>>> urls = std::move(names);
    return pipeline<sample>([shared, urls, o, share](const std::shared_ptr<run_context>& ctx) {
        auto st = std::make_shared<detail::shards_run>();
        st->list = shared;
        st->o = o;
        st->share = share;
        st->epoch = ctx->epoch();
        st->stores = o.store ? o.store : store::make_context({.rt = &ctx->rt(), .s3 = o.s3, .http = o.http, .cache = o.cache});
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
            auto ch = conveyor::detail::make_channel<sample>(*ctx, 1);
            ctx->fail(std::current_exception(), "shards");
            ch->close();
            return conveyor::detail::stream_of(ctx, ch);
        }
        st->urls = urls;
        const std::uint64_t count = o.resampled ? endless : static_cast<std::uint64_t>(st->pieces.size());
        // Each open shard holds its chunks in flight, plus the chunks that its samples still
        // hold while they wait in the lane's queue and downstream (the chunk the tar reader is
        // cutting and a few before it): the run takes room for `shard_chunks_held` chunks a
        // lane from the runtime's budget for all its lanes at once, and its readers take
        // each chunk from that share (the source core's rule). With room for the chunks in
        // flight alone, a reader waits for memory whenever samples queue behind it, and the
        // read-ahead the options ask for is lost.
        sequence_settings ss{.sequences_in_flight = lanes,
                             .errors = o.errors,
                             .capacity = o.capacity,
                             .memory_per_sequence = detail::shard_chunks_held(o.chunks) * o.chunks.chunk_size};
        return sequence_source<sample>("shards", count, ss, detail::open_shard_reader{st}).build(ctx);
    });
}

CONVEYOR_DECL pipeline<sample> shards(std::string_view spec, source_options o)
{
    list_options lo;
    lo.store = o.store ? o.store : store::make_context({.s3 = o.s3, .http = o.http});
    return shards(resolve(spec, lo), std::move(o));
}

} // namespace conveyor::shard

#endif
