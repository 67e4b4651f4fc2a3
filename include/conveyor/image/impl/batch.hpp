// conveyor/image/impl/batch.hpp — the templates of the decode_batches stage.
#ifndef CONVEYOR_IMAGE_IMPL_BATCH_HPP
#define CONVEYOR_IMAGE_IMPL_BATCH_HPP

#include <conveyor/core/detail/offload.hpp>
#include <conveyor/image/batch.hpp>

#include <exception>
#include <functional>

namespace conveyor::image {

namespace detail {

/* How the stage works. Three kinds of task share the run's I/O thread (so the run's state
   needs no lock): a dispatcher gives each item a place in the stream of batches and a slab
   for its batch; workers decode the items on the compute pool, each straight into its slot
   (the pluggable part: this stage's decoder); an assembler takes the results in input
   order and hands on each batch once its last slot is done. Where items go, the skips and
   their refill, the open batches and the finished ones are a `batch_assembler`'s (the GPU
   stage's too); this stage adds the tasks around it: see image/impl/batch.ipp. */
struct batch_run;

/// Whether the consumer of a stage's output has gone, for a task of the stage that waits
/// on something else (a free slab, a device buffer set): told by the output channel.
struct receiver_watch;

/// A watch told on `ex` (the waiter's executor: one thread), and what tells it.
CONVEYOR_DECL std::shared_ptr<receiver_watch> make_receiver_watch(asio::any_io_executor ex);
CONVEYOR_DECL std::function<void()> notice_of(const std::shared_ptr<receiver_watch>& w);

/// A watch on the receiver of `out`, told on `ex`.
template <class T>
std::shared_ptr<receiver_watch> watch_receiver(conveyor::detail::channel<T>& out, asio::any_io_executor ex)
{
    auto w = make_receiver_watch(std::move(ex));
    out.on_receiver_gone(notice_of(w));
    return w;
}

/** Runs `op` unless `gone` says nobody reads on first: true once `op` is done, false when
    the watch fired before it (`op` is then cancelled and waited for); rethrows what `op`
    throws otherwise (the run's cancellation). A consumer that stopped reading (a `take`
    downstream) while it keeps every slab would otherwise leave a wait for one, and the
    run, without an end. */
CONVEYOR_DECL asio::awaitable<bool> unless_gone(asio::awaitable<void> op, std::shared_ptr<receiver_watch> gone);

/// A slab from `pool`, or nullopt once `gone` says nobody reads on (see `unless_gone`).
CONVEYOR_DECL asio::awaitable<std::optional<image::slab>> acquire_unless_gone(slab_pool& pool, std::shared_ptr<receiver_watch> gone);

/// Where the dispatcher sends an item: its tentative position, and the slot it is decoded
/// into (the slab keeps the slot's memory while the job lives).
struct batch_place {
    std::uint64_t position = 0;
    image::slab slab;
    std::byte* slot = nullptr;
};

template <class T>
struct batch_job {
    T item;
    batch_place place;
};

struct batch_result {
    std::uint64_t position = 0;
    std::string key;
    std::int64_t label = -1;
    conveyor::sample_id id;
    std::exception_ptr error;
    std::vector<field_value> extras; // the values of `decode_image_options::extra_fields`
};

/** The run's shared state, for `workers` decoders; `stop_feeding` ends the workers' input
    (the jobs channel's receiver), for a consumer that has gone. */
CONVEYOR_DECL std::shared_ptr<batch_run> make_batch_run(run_context& ctx, std::shared_ptr<const decode_image_options> d,
                                                        std::shared_ptr<const collate_options> b,
                                                        std::shared_ptr<const batch_plan> plan, std::shared_ptr<slab_pool> pool,
                                                        std::size_t workers, std::function<void()> stop_feeding);

/// Starts the run's assembler and returns the stream of batches it hands on.
CONVEYOR_DECL stream<image_batch> assemble_batches(const std::shared_ptr<run_context>& ctx, std::shared_ptr<batch_run> run);

/// The next item's place if it can be had now (no wait for items in flight or a slab).
CONVEYOR_DECL std::optional<batch_place> try_next_place(batch_run& run);
/// The next item's place, once the items in flight are back and a slab is free; nullopt
/// when the run ends first (its consumer gone).
CONVEYOR_DECL asio::awaitable<std::optional<batch_place>> next_place(std::shared_ptr<batch_run> run);

/// A worker's result of the item it took as the stream's item number `index`; false if
/// nobody takes results any more. `worker_done` when it ends (the last one ends the results).
CONVEYOR_DECL asio::awaitable<bool> hand_on(batch_run& run, std::uint64_t index, batch_result r);
CONVEYOR_DECL void worker_done(batch_run& run) noexcept;

template <class T>
asio::awaitable<void> dispatch_batches(stream<T> in, std::shared_ptr<batch_run> run,
                                       std::shared_ptr<conveyor::detail::channel<batch_job<T>>> jobs)
{
    struct closer {
        conveyor::detail::channel<batch_job<T>>& jobs;
        stream<T>& in;
        ~closer()
        {
            jobs.close();
            in.close(); // upstream stops too when this ends early
        }
    } close_on_exit{*jobs, in};
    std::vector<T> got;
    while (co_await in.async_next_batch(got, 64)) {
        for (auto& x : got) {
            std::optional<batch_place> place = try_next_place(*run);
            if (!place) place = co_await next_place(run);
            if (!place) co_return;
            batch_job<T> job{std::move(x), std::move(*place)}; // named: GCC 12 mishandles an aggregate temporary here
            if (!co_await jobs->send(std::move(job))) co_return;
        }
        got.clear();
    }
}

template <class T>
asio::awaitable<void> decode_batch_items(std::shared_ptr<run_context> ctx, std::shared_ptr<const decode_image_options> d,
                                         std::shared_ptr<const collate_options> b, std::shared_ptr<const batch_plan> plan,
                                         std::shared_ptr<batch_run> run, std::shared_ptr<conveyor::detail::channel<batch_job<T>>> jobs)
{
    struct closer {
        batch_run& run;
        ~closer() { worker_done(run); }
    } close_on_exit{*run};
    const decoder dec(ctx->rt().buffers());
    const std::uint64_t epoch = ctx->epoch();
    std::vector<batch_job<T>> one;
    for (;;) {
        std::uint64_t index = 0;
        if (!co_await jobs->receive_some(one, 1, &index)) break;
        batch_job<T> job = std::move(one.front());
        one.clear();
        batch_result r{.position = job.place.position, .key = conveyor::detail::item_key(job.item), .id = item_id(job.item)};
        try {
            r.label = co_await conveyor::detail::offload(ctx->rt().compute_executor(), [&]() -> std::int64_t {
                const encoded_image e = encoded_image_of(job.item, *d);
                if (!d->extra_fields.empty()) r.extras = extra_values(job.item, *d, dec, epoch); // before the pixels: a missing field costs no decode
                decode_into_slot(dec, d->decode, *b, *plan, e, epoch, d->stats.get(), job.place.slot);
                return e.label;
            });
        } catch (...) {
            r.error = std::current_exception();
        }
        job = {}; // the item's bytes go now, not when the next job comes
        if (!co_await hand_on(*run, index, std::move(r))) co_return;
    }
}

} // namespace detail

template <class T>
    requires(std::is_same_v<T, shard::sample> || std::is_same_v<T, blob>)
stream<image_batch> decode_batches_stage::operator()(const std::shared_ptr<run_context>& ctx, stream<T> in) const
{
    const std::size_t threads = std::max<std::size_t>(ctx->rt().options().compute_threads, 1);
    const std::size_t workers = d_->concurrency ? d_->concurrency : 2 * threads;
    auto jobs = conveyor::detail::make_channel<detail::batch_job<T>>(*ctx, workers);
    auto run = detail::make_batch_run(*ctx, d_, b_, plan_, pool_, workers, [jobs] { jobs->close_receiver(); });
    auto out = detail::assemble_batches(ctx, run); // watches its receiver before the dispatcher starts
    ctx->spawn(detail::dispatch_batches<T>(std::move(in), run, jobs), "decode_batches");
    for (std::size_t w = 0; w < workers; ++w)
        ctx->spawn(detail::decode_batch_items<T>(ctx, d_, b_, plan_, run, jobs), "decode_batches");
    return out;
}

} // namespace conveyor::image

#endif
