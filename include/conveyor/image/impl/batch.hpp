// conveyor/image/impl/batch.hpp — the templates of the decode_batches stage.
#ifndef CONVEYOR_IMAGE_IMPL_BATCH_HPP
#define CONVEYOR_IMAGE_IMPL_BATCH_HPP

#include <conveyor/core/detail/offload.hpp>
#include <conveyor/image/batch.hpp>


#include <cstring>
#include <exception>
#include <map>

namespace conveyor::image {

namespace detail {

/* How the stage works. Three kinds of task share the run's I/O thread (so the state below
   needs no lock): a dispatcher gives each item a place (a position in the stream of
   batches: batch = position / N, slot = position % N) and a slab for its batch; workers
   decode the items on the compute pool, each straight into its slot; an assembler takes
   the results in input order, writes labels and keys, and hands on each batch once its
   last slot is done.

   A skipped image leaves a hole, which later images must fill to keep batches full and in
   order: each good image's final position is the count of good images before it. The
   assembler moves an image whose tentative place differs from its final one (a copy, only
   after an error), and asks the dispatcher to stop until every dispatched image is
   assembled; the dispatcher then carries on from the final position, so only the images in
   flight at the time of an error are ever moved, and two images never share a slot. */
/* Whether the consumer of a stage's output has gone, for a task of the stage that waits on
   something else (a free slab): made by `watch_receiver`, told by the output channel. */
struct receiver_watch;

/// A watch on `out`'s receiver, told on `ex` (the waiter's executor: one thread).
CONVEYOR_DECL std::shared_ptr<receiver_watch> watch_receiver(conveyor::detail::channel<image_batch>& out, asio::any_io_executor ex);

/// A slab from `pool`, or nullopt once `gone` says nobody reads on: a consumer that
/// stopped reading (a `take` downstream) while it keeps every slab would otherwise leave
/// this wait, and the run, without an end. The run's cancellation ends it too (thrown).
CONVEYOR_DECL asio::awaitable<std::optional<image::slab>> acquire_unless_gone(slab_pool& pool, std::shared_ptr<receiver_watch> gone);

struct batch_run {
    struct open_batch {
        image::slab slab;
        std::vector<std::string> keys;
        std::vector<conveyor::sample_id> ids;
    };
    std::map<std::uint64_t, open_batch> open; // batches with a slab, by batch number
    std::uint64_t next_position = 0;          // the dispatcher's next tentative place
    std::uint64_t final_position = 0;         // the assembler's next final place
    std::uint64_t dispatched = 0;
    std::uint64_t assembled = 0;
    bool realign = false;                     // an image failed: the dispatcher must wait for the rest
    bool dispatcher_waits = false;
    std::shared_ptr<conveyor::detail::channel<int>> drained; // the assembler's "all assembled" to the dispatcher
    std::shared_ptr<receiver_watch> gone; // told when nobody reads the stage's output any more
};

template <class T>
struct batch_job {
    T item;
    std::uint64_t position = 0;
    image::slab slab; // keeps the slot's memory while the job lives
    std::byte* slot = nullptr;
};

struct batch_result {
    std::uint64_t position = 0;
    std::string key;
    std::int64_t label = -1;
    conveyor::sample_id id;
    std::exception_ptr error;
};

template <class T>
asio::awaitable<void> dispatch_batches(stream<T> in, std::shared_ptr<batch_run> run,
                                       std::shared_ptr<slab_pool> pool, std::shared_ptr<const batch_plan> plan, std::size_t n,
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
    for (;;) {
        const bool more = co_await in.async_next_batch(got, 64);
        if (!more) break;
        for (auto& x : got) {
            if (run->realign) {
                if (run->assembled != run->dispatched) {
                    run->dispatcher_waits = true;
                    auto token = co_await run->drained->receive();
                    if (!token) co_return;
                }
                run->next_position = run->final_position;
                run->realign = false;
            }
            if (!run->open.contains(run->next_position / n)) {
                std::optional<image::slab> s = pool->try_acquire();
                if (!s) {
                    // Out of slabs: let what is in flight finish first. An image of it may
                    // have failed, and then this one belongs in an open batch, which must
                    // not wait for a slab that only its own completion would bring back.
                    if (run->assembled != run->dispatched) {
                        run->dispatcher_waits = true;
                        auto token = co_await run->drained->receive();
                        if (!token) co_return;
                    }
                    if (run->realign) {
                        run->next_position = run->final_position;
                        run->realign = false;
                    }
                    if (!run->open.contains(run->next_position / n)) {
                        s = co_await acquire_unless_gone(*pool, run->gone);
                        if (!s) co_return;
                    } else {
                        s.reset();
                    }
                }
                if (s) {
                    auto& ob = run->open[run->next_position / n];
                    ob.slab = std::move(*s);
                    ob.keys.resize(n);
                    ob.ids.resize(n);
                }
            }
            const std::uint64_t p = run->next_position++;
            ++run->dispatched;
            auto& ob = run->open.at(p / n);
            batch_job<T> job{std::move(x), p, ob.slab, ob.slab.data() + (p % n) * plan->item_bytes};
            const bool listening = co_await jobs->send(std::move(job));
            if (!listening) {
                in.close();
                co_return;
            }
        }
        got.clear();
    }
}

template <class T>
asio::awaitable<void> decode_batch_items(std::shared_ptr<run_context> ctx, std::shared_ptr<const decode_image_options> d,
                                         std::shared_ptr<const collate_options> b, std::shared_ptr<const batch_plan> plan,
                                         std::shared_ptr<conveyor::detail::channel<batch_job<T>>> jobs,
                                         std::shared_ptr<conveyor::detail::channel<batch_result>> results,
                                         std::shared_ptr<std::atomic<std::size_t>> remaining)
{
    conveyor::detail::last_worker_closes<batch_result> closer{*remaining, *results};
    const decoder dec(ctx->rt().buffers());
    const std::uint64_t epoch = ctx->epoch();
    decode_stats* stats = d->stats.get();
    std::vector<batch_job<T>> one;
    for (;;) {
        std::uint64_t index = 0;
        const bool more = co_await jobs->receive_some(one, 1, &index);
        if (!more) break;
        batch_job<T> job = std::move(one.front());
        one.clear();
        batch_result r;
        r.position = job.position;
        r.key = conveyor::detail::item_key(job.item);
        r.id = item_id(job.item);
        try {
            r.label = co_await conveyor::detail::offload(ctx->rt().compute_executor(), [&]() -> std::int64_t {
                const encoded_image e = encoded_image_of(job.item, *d);
                decode_into_slot(dec, d->decode, *b, *plan, e, epoch, stats, job.slot);
                return e.label;
            });
        } catch (...) {
            r.error = std::current_exception();
        }
        job = {}; // the item's bytes go now, not when the next job comes
        const bool listening = co_await results->send_at(index, std::move(r));
        if (!listening) co_return;
    }
}

/// Moves the finished batch `b` of `run` into an `image_batch` of its first `count` images.
CONVEYOR_DECL image_batch finish_batch(batch_run& run, std::uint64_t b, std::size_t count, const collate_options& o,
                                       const batch_plan& plan);

/// Places result `r` (good) at the next final position: moves its pixels if it was decoded
/// elsewhere, writes its label and key. Returns that position.
CONVEYOR_DECL std::uint64_t place_result(batch_run& run, batch_result& r, std::size_t n, const batch_plan& plan);

} // namespace detail

template <class T>
    requires(std::is_same_v<T, shard::sample> || std::is_same_v<T, blob>)
stream<image_batch> decode_batches_stage::operator()(const std::shared_ptr<run_context>& ctx, stream<T> in) const
{
    const std::size_t threads = std::max<std::size_t>(ctx->rt().options().compute_threads, 1);
    const std::size_t workers = d_->concurrency ? d_->concurrency : 2 * threads;
    const std::size_t n = b_->size;

    auto run = std::make_shared<detail::batch_run>();
    run->drained = conveyor::detail::make_channel<int>(*ctx, 1);
    auto jobs = conveyor::detail::make_channel<detail::batch_job<T>>(*ctx, workers);
    auto results = conveyor::detail::make_channel<detail::batch_result>(*ctx, 2 * workers + n);
    auto remaining = std::make_shared<std::atomic<std::size_t>>(workers);

    auto out = make_stream<image_batch>(
        ctx, "decode_batches", b_->capacity,
        [ctx = ctx.get(), run, results, jobs, b = b_, d = d_, plan = plan_, n](sink<image_batch>& out) -> asio::awaitable<void> {
            std::vector<detail::batch_result> got;
            for (;;) {
                const bool more = co_await results->receive_some(got, 64);
                if (!more) break;
                for (auto& r : got) {
                    std::optional<std::uint64_t> placed;
                    if (r.error) {
                        if (d->errors == on_error::fail || ctx->stopping()) {
                            ctx->fail(r.error, "decode_batches", r.key);
                            co_return;
                        }
                        ctx->note_skip(conveyor::detail::skip_line("decode_batches", r.key, r.error));
                        run->realign = true;
                    } else {
                        placed = detail::place_result(*run, r, n, *plan);
                    }
                    ++run->assembled;
                    if (run->dispatcher_waits && run->assembled == run->dispatched) {
                        run->dispatcher_waits = false;
                        co_await run->drained->send(1);
                    }
                    if (placed && (*placed + 1) % n == 0) {
                        image_batch batch = detail::finish_batch(*run, *placed / n, n, *b, *plan);
                        const bool listening = co_await out.send(std::move(batch));
                        if (!listening) {
                            // Nobody reads on (a `take` downstream), and the run goes on: wind
                            // down the workers and the dispatcher, which may be waiting for the
                            // drain or for a slab (the open batches give theirs back now).
                            results->close_receiver();
                            jobs->close_receiver();
                            run->drained->close();
                            run->open.clear();
                            co_return;
                        }
                    }
                }
                got.clear();
            }
            const std::uint64_t left = run->final_position % n;
            if (left != 0 && b->partial && !ctx->stopping()) {
                image_batch batch = detail::finish_batch(*run, run->final_position / n, left, *b, *plan);
                co_await out.send(std::move(batch));
            }
            run->open.clear(); // slabs taken ahead of need go back
        });
    run->gone = detail::watch_receiver(*conveyor::detail::channel_of(out), ctx->executor()); // before the dispatcher starts: it reads this
    ctx->spawn(detail::dispatch_batches<T>(std::move(in), run, pool_, plan_, n, jobs), "decode_batches");
    for (std::size_t w = 0; w < workers; ++w)
        ctx->spawn(detail::decode_batch_items<T>(ctx, d_, b_, plan_, jobs, results, remaining), "decode_batches");
    return out;
}

} // namespace conveyor::image

#endif
