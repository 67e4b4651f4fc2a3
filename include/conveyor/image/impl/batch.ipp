// conveyor/image/impl/batch.ipp — slabs, the half conversion, and the parts of the
// decode_batches stage that are not templates.
#ifndef CONVEYOR_IMAGE_IMPL_BATCH_IPP
#define CONVEYOR_IMAGE_IMPL_BATCH_IPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/detail/offload.hpp>
#include <conveyor/core/memory_budget.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/image/batch.hpp>
#include <conveyor/image/detail/batch_assembler.hpp>
#include <conveyor/image/error.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <mutex>

namespace conveyor::image {

// ---- half ---------------------------------------------------------------------------------

CONVEYOR_DECL std::uint16_t float_to_half(float f) noexcept
{
    const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
    const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
    const std::uint32_t exp = (x >> 23) & 0xffu;
    std::uint32_t mant = x & 0x7fffffu;
    if (exp == 0xff) // infinity, or NaN (kept NaN: the top mantissa bit set makes it quiet)
        return static_cast<std::uint16_t>(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
    const int e = static_cast<int>(exp) - 127 + 15; // the half's biased exponent
    if (e >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u); // too large: infinity
    if (e <= 0) {
        // A subnormal half (or zero): the value in units of 2^-24, rounded to nearest even.
        if (e < -10) return sign; // below half the smallest subnormal: zero
        mant |= 0x800000u;        // the implicit bit
        const int shift = 14 - e; // 14..24
        const std::uint32_t half_units = mant >> shift;
        const std::uint32_t rest = mant & ((1u << shift) - 1);
        const std::uint32_t halfway = 1u << (shift - 1);
        std::uint32_t r = half_units;
        if (rest > halfway || (rest == halfway && (half_units & 1u))) ++r; // may carry into the smallest normal: right
        return static_cast<std::uint16_t>(sign | r);
    }
    // Normal: keep 10 mantissa bits, round to nearest even; a carry may bump the exponent
    // (up to infinity), which the packed addition does by itself.
    std::uint32_t h = (static_cast<std::uint32_t>(e) << 10) | (mant >> 13);
    const std::uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return static_cast<std::uint16_t>(sign | h);
}

CONVEYOR_DECL float half_to_float(std::uint16_t h) noexcept
{
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exp = (h >> 10) & 0x1fu;
    const std::uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        const float v = std::ldexp(static_cast<float>(mant), -24);
        return sign ? -v : v;
    }
    if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
    return std::bit_cast<float>(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

// ---- slabs --------------------------------------------------------------------------------

CONVEYOR_DECL slab_allocator host_slab_allocator()
{
    return {.allocate = [](std::size_t n) { return conveyor::detail::allocate_bytes(n); },
            .deallocate = [](void* p, std::size_t n) { conveyor::detail::deallocate_bytes(p, n); },
            .kind = memory_kind::host};
}

namespace detail {

struct slab_pool_state : std::enable_shared_from_this<slab_pool_state> {
    slab_pool_state(std::size_t bytes, std::size_t max, slab_allocator a)
        : slab_bytes(bytes), max_slabs(max), alloc(std::move(a)), budget(max)
    {
    }
    ~slab_pool_state()
    {
        for (void* p : free) alloc.deallocate(p, slab_bytes);
    }

    std::shared_ptr<slab_block> take(memory_lease lease);

    const std::size_t slab_bytes;
    const std::size_t max_slabs;
    slab_allocator alloc;
    memory_budget budget; // one unit per slab: the bound, and the queue of waiters
    std::mutex mu;
    std::vector<void*> free;
    std::size_t allocated = 0;
    std::size_t in_use = 0;
    std::size_t peak = 0;
    std::uint64_t acquires = 0;
};

struct slab_block {
    std::shared_ptr<slab_pool_state> pool;
    std::byte* data = nullptr;
    memory_lease lease;
    bool detached = false; // under pool->mu
    ~slab_block()
    {
        bool keep = true;
        {
            std::lock_guard lk(pool->mu);
            if (detached) {
                // Out of the bound since `detach`: kept for reuse only while the pool has
                // room for it (its free slabs and those in use below the bound).
                keep = pool->free.size() + pool->in_use < pool->max_slabs;
                if (keep) pool->free.push_back(data);
                else --pool->allocated;
            } else {
                pool->free.push_back(data);
                --pool->in_use;
            }
        }
        if (!keep) pool->alloc.deallocate(data, pool->slab_bytes);
        lease.release(); // after the slab is back: the waiter let through finds it
    }
};

inline std::shared_ptr<slab_block> slab_pool_state::take(memory_lease lease)
{
    void* p = nullptr;
    {
        std::lock_guard lk(mu);
        if (!free.empty()) {
            p = free.back();
            free.pop_back();
        }
    }
    if (!p) {
        p = alloc.allocate(slab_bytes); // may throw: the lease goes back with the exception
        if (!p) throw conveyor::error(std::make_error_code(std::errc::not_enough_memory),
                                      {.stage = "decode_batches", .detail = "the slab allocator returned no memory"});
        std::lock_guard lk(mu);
        ++allocated;
    }
    auto b = std::make_shared<slab_block>();
    b->pool = shared_from_this();
    b->data = static_cast<std::byte*>(p);
    b->lease = std::move(lease);
    std::lock_guard lk(mu);
    ++acquires;
    peak = std::max(peak, ++in_use);
    return b;
}

} // namespace detail

CONVEYOR_DECL std::byte* slab::data() const noexcept
{
    return block_ ? block_->data : nullptr;
}

CONVEYOR_DECL std::size_t slab::size() const noexcept
{
    return block_ ? block_->pool->slab_bytes : 0;
}

CONVEYOR_DECL memory_kind slab::kind() const noexcept
{
    return block_ ? block_->pool->alloc.kind : memory_kind::host;
}

CONVEYOR_DECL void slab::detach() const noexcept
{
    if (!block_) return;
    {
        std::lock_guard lk(block_->pool->mu);
        if (block_->detached) return;
        block_->detached = true;
        --block_->pool->in_use;
    }
    block_->lease.release(); // the pool may hand out another slab in this one's place
}

CONVEYOR_DECL slab_pool::slab_pool(std::size_t slab_bytes, std::size_t max_slabs, slab_allocator alloc)
{
    if (!alloc.allocate || !alloc.deallocate) {
        const auto kind = alloc.kind;
        alloc = host_slab_allocator();
        alloc.kind = kind;
    }
    state_ = std::make_shared<detail::slab_pool_state>(std::max<std::size_t>(slab_bytes, 1), std::max<std::size_t>(max_slabs, 1),
                                                       std::move(alloc));
}

CONVEYOR_DECL asio::awaitable<slab> slab_pool::async_acquire()
{
    auto st = state_;
    auto [ec, lease] = co_await st->budget.async_acquire(1, asio::as_tuple(asio::use_awaitable));
    if (ec) throw conveyor::error(make_error_code(conveyor::errc::cancelled), {.stage = "decode_batches", .detail = "waiting for a free batch slab"});
    co_return slab(st->take(std::move(lease)));
}

CONVEYOR_DECL std::optional<slab> slab_pool::try_acquire()
{
    auto lease = state_->budget.try_acquire(1);
    if (!lease) return std::nullopt;
    return slab(state_->take(std::move(*lease)));
}

CONVEYOR_DECL std::size_t slab_pool::slab_bytes() const noexcept
{
    return state_->slab_bytes;
}

CONVEYOR_DECL memory_kind slab_pool::kind() const noexcept
{
    return state_->alloc.kind;
}

CONVEYOR_DECL slab_pool_stats slab_pool::stats() const
{
    const auto b = state_->budget.stats();
    std::lock_guard lk(state_->mu);
    return {.slab_bytes = state_->slab_bytes,
            .max_slabs = state_->max_slabs,
            .allocated = state_->allocated,
            .in_use = state_->in_use,
            .peak = state_->peak,
            .acquires = state_->acquires,
            .waits = b.waits};
}

// ---- the stage ------------------------------------------------------------------------------

namespace detail {

inline std::size_t round_up(std::size_t n, std::size_t to) noexcept
{
    return (n + to - 1) / to * to;
}

CONVEYOR_DECL batch_plan make_batch_plan(const decode_options& d, const collate_options& b)
{
    batch_plan p;
    p.height = d.size.height;
    p.width = d.size.width;
    p.channels = channels_of(d.format);
    p.item_bytes = std::size_t{p.height} * p.width * p.channels * size_of(b.type);
    p.labels_offset = round_up(p.item_bytes * b.size, 256);
    p.slab_bytes = p.labels_offset + b.size * sizeof(std::int64_t);
    // The values torchvision computes, in the order it computes them, in float: ToTensor
    // divides by 255, Normalize subtracts the mean and divides by the deviation.
    for (std::size_t c = 0; c < 3; ++c)
        for (int v = 0; v < 256; ++v) {
            const float x = static_cast<float>(v) / 255.0f;
            const float y = (x - b.mean[c]) / b.std[c];
            p.to_float[c][static_cast<std::size_t>(v)] = y;
            p.to_half[c][static_cast<std::size_t>(v)] = float_to_half(y);
        }
    return p;
}

CONVEYOR_DECL void convert_image(const std::uint8_t* hwc, const collate_options& b, const batch_plan& plan, std::byte* slot)
{
    const std::size_t c_n = plan.channels, hw = std::size_t{plan.height} * plan.width;
    auto convert = [&](auto* out, auto value) {
        if (b.layout == tensor_layout::nhwc) {
            for (std::size_t i = 0; i < hw; ++i)
                for (std::size_t c = 0; c < c_n; ++c) out[i * c_n + c] = value(c, hwc[i * c_n + c]);
        } else {
            for (std::size_t c = 0; c < c_n; ++c) {
                auto* plane = out + c * hw;
                for (std::size_t i = 0; i < hw; ++i) plane[i] = value(c, hwc[i * c_n + c]);
            }
        }
    };
    switch (b.type) {
    case dtype::uint8:
        convert(reinterpret_cast<host_element_t<dtype::uint8>*>(slot), [](std::size_t, std::uint8_t v) { return v; });
        break;
    case dtype::float32:
        convert(reinterpret_cast<host_element_t<dtype::float32>*>(slot), [&plan](std::size_t c, std::uint8_t v) { return plan.to_float[c][v]; });
        break;
    case dtype::float16:
        convert(reinterpret_cast<host_element_t<dtype::float16>*>(slot), [&plan](std::size_t c, std::uint8_t v) { return plan.to_half[c][v]; });
        break;
    case dtype::int64:
        break; // refused by the stage's constructor
    }
}

CONVEYOR_DECL void decode_into_slot(const decoder& dec, const decode_options& d, const collate_options& b, const batch_plan& plan,
                                    const encoded_image& e, std::uint64_t epoch, decode_stats* stats, std::byte* slot)
{
    const decode_context ctx{.key = e.key, .origin = e.origin, .epoch = epoch, .stats = stats};
    const std::size_t hwc_bytes = std::size_t{plan.height} * plan.width * plan.channels;
    if (b.type == dtype::uint8 && b.layout == tensor_layout::nhwc) {
        dec.decode_into(e.bytes, d, ctx, {reinterpret_cast<std::uint8_t*>(slot), hwc_bytes});
        return;
    }
    thread_local std::vector<std::uint8_t> scratch;
    if (scratch.size() < hwc_bytes) scratch.resize(hwc_bytes);
    dec.decode_into(e.bytes, d, ctx, {scratch.data(), hwc_bytes});
    convert_image(scratch.data(), b, plan, slot);
}

CONVEYOR_DECL image_batch batch_over_slab(image::slab slab, std::vector<std::string> keys, std::size_t count, std::uint64_t index,
                                          const collate_options& o, const batch_plan& plan)
{
    image_batch out;
    out.slab = std::move(slab);
    out.keys = std::move(keys);
    out.keys.resize(count);
    out.layout = o.layout;
    out.index = index;
    const auto n = static_cast<std::int64_t>(count);
    const std::int64_t h = plan.height, w = plan.width, c = plan.channels;
    out.images.data = out.slab.data();
    out.images.type = o.type;
    if (o.layout == tensor_layout::nhwc) {
        out.images.shape = {n, h, w, c};
        out.images.strides = {h * w * c, w * c, c, 1};
    } else {
        out.images.shape = {n, c, h, w};
        out.images.strides = {c * h * w, h * w, w, 1};
    }
    out.labels.data = out.slab.data() + plan.labels_offset;
    out.labels.type = dtype::int64;
    out.labels.shape = {n};
    out.labels.strides = {1};
    return out;
}

/* Whether the consumer of a stage's output has gone: the output channel's watcher posts to
   the waiter's executor (one thread), which sets `gone` and cancels `timer`, what a waiter
   waits on beside what it waits for. */
struct receiver_watch {
    explicit receiver_watch(asio::any_io_executor ex) : timer(ex, asio::steady_timer::time_point::max()) {}
    asio::steady_timer timer;
    bool gone = false;
};

CONVEYOR_DECL std::shared_ptr<receiver_watch> make_receiver_watch(asio::any_io_executor ex)
{
    return std::make_shared<receiver_watch>(std::move(ex));
}

CONVEYOR_DECL std::function<void()> notice_of(const std::shared_ptr<receiver_watch>& w)
{
    return [weak = std::weak_ptr<receiver_watch>(w), ex = w->timer.get_executor()] {
        asio::post(ex, [weak] {
            if (auto w = weak.lock()) {
                w->gone = true;
                w->timer.cancel();
            }
        });
    };
}

CONVEYOR_DECL asio::awaitable<bool> unless_gone(asio::awaitable<void> op, std::shared_ptr<receiver_watch> gone)
{
    if (gone->gone) co_return false;
    auto ex = co_await asio::this_coro::executor;
    auto [order, op_error, timer_ec] =
        co_await asio::experimental::make_parallel_group(asio::co_spawn(ex, std::move(op), asio::deferred),
                                                         gone->timer.async_wait(asio::deferred))
            .async_wait(asio::experimental::wait_for_one(), asio::use_awaitable);
    (void)order;
    (void)timer_ec;
    if (!op_error) co_return true; // done (even as the watcher fired)
    if (gone->gone) co_return false;
    std::rethrow_exception(op_error); // the run's cancellation
}

inline asio::awaitable<void> acquire_into(slab_pool& pool, std::optional<image::slab>& got)
{
    got = co_await pool.async_acquire();
}

CONVEYOR_DECL asio::awaitable<std::optional<image::slab>> acquire_unless_gone(slab_pool& pool, std::shared_ptr<receiver_watch> gone)
{
    std::optional<image::slab> got;
    asio::awaitable<void> acquire = acquire_into(pool, got);
    if (!co_await unless_gone(std::move(acquire), std::move(gone))) co_return std::nullopt;
    co_return got;
}

/* The CPU stage's run, on the run's I/O thread. The dispatcher takes places from the
   assembler; when an image failed it waits for the items in flight to be back (`drained`,
   told by the assembler), so that the next item goes where the realigned count says, and
   it does the same before waiting for a slab: an image in flight may have failed, and then
   the next item belongs in an open batch, which must not wait for a slab that only its own
   completion would bring back. */
struct batch_run {
    batch_run(run_context& ctx, std::shared_ptr<const decode_image_options> decode, std::shared_ptr<const collate_options> collate,
              std::shared_ptr<const batch_plan> layout, std::shared_ptr<slab_pool> slabs, std::size_t workers,
              std::function<void()> stop)
        : d(std::move(decode)), b(std::move(collate)), plan(std::move(layout)), pool(std::move(slabs)),
          assembler(b->size, plan->item_bytes),
          results(conveyor::detail::make_channel<batch_result>(ctx, 2 * workers + b->size)),
          drained(conveyor::detail::make_channel<int>(ctx, 1)), stop_feeding(std::move(stop)), workers_left(workers)
    {
    }

    /// Takes result `r` into the assembler; false when it fails the run.
    bool take(run_context& ctx, batch_result& r);
    /// Nobody reads on: the workers, the dispatcher and their waits end, the slabs go back.
    void wind_down();

    std::shared_ptr<const decode_image_options> d;
    std::shared_ptr<const collate_options> b;
    std::shared_ptr<const batch_plan> plan;
    std::shared_ptr<slab_pool> pool;
    batch_assembler assembler;
    std::shared_ptr<conveyor::detail::channel<batch_result>> results;
    std::shared_ptr<conveyor::detail::channel<int>> drained; // the assembler's "all back" to the dispatcher
    std::shared_ptr<receiver_watch> gone;
    std::function<void()> stop_feeding;
    std::atomic<std::size_t> workers_left;
    bool dispatcher_waits = false;
};

inline bool batch_run::take(run_context& ctx, batch_result& r)
{
    if (r.error) {
        if (d->errors == on_error::fail || ctx.stopping()) {
            ctx.fail(r.error, "decode_batches", r.key);
            return false;
        }
        ctx.note_skip(conveyor::detail::skip_line("decode_batches", r.key, r.error));
        assembler.skip(r.position);
        return true;
    }
    const auto p = assembler.place(r.position, std::move(r.key), r.id, r.label, std::move(r.extras));
    if (p.moved()) std::memcpy(assembler.slot(p.to), assembler.slot(p.from), plan->item_bytes); // only after a skip
    return true;
}

inline void batch_run::wind_down()
{
    results->close_receiver();
    stop_feeding();
    drained->close();
    assembler.abandon();
}

/// The batch of `a`; its columns, when the run has extra fields, made on the compute pool
/// (stacking arrays and images is a copy of each).
inline asio::awaitable<image_batch> finish_batch(run_context& ctx, const batch_run& run, batch_assembler::assembled a)
{
    if (run.d->extra_fields.empty()) co_return batch_of(std::move(a), *run.b, *run.plan);
    co_return co_await conveyor::detail::offload(ctx.rt().compute_executor(),
                                                 [&] { return batch_of(std::move(a), *run.b, *run.plan, run.d->extra_fields); });
}

inline asio::awaitable<void> assemble(run_context& ctx, std::shared_ptr<batch_run> run, sink<image_batch>& out)
{
    batch_assembler& a = run->assembler;
    std::vector<batch_result> got;
    while (co_await run->results->receive_some(got, 64)) {
        for (auto& r : got) {
            if (!run->take(ctx, r)) co_return;
            if (run->dispatcher_waits && a.drained()) {
                run->dispatcher_waits = false;
                co_await run->drained->send(1);
            }
            std::optional<batch_assembler::assembled> full = a.take_full();
            if (!full) continue;
            image_batch batch = co_await finish_batch(ctx, *run, std::move(*full));
            if (!co_await out.send(std::move(batch))) {
                run->wind_down(); // a `take` downstream: the run goes on without us
                co_return;
            }
        }
        got.clear();
    }
    if (run->b->partial && !ctx.stopping())
        if (std::optional<batch_assembler::assembled> last = a.take_partial()) {
            image_batch batch = co_await finish_batch(ctx, *run, std::move(*last));
            co_await out.send(std::move(batch));
        }
    a.abandon(); // slabs taken ahead of need go back
}

CONVEYOR_DECL std::shared_ptr<batch_run> make_batch_run(run_context& ctx, std::shared_ptr<const decode_image_options> d,
                                                        std::shared_ptr<const collate_options> b,
                                                        std::shared_ptr<const batch_plan> plan, std::shared_ptr<slab_pool> pool,
                                                        std::size_t workers, std::function<void()> stop_feeding)
{
    return std::make_shared<batch_run>(ctx, std::move(d), std::move(b), std::move(plan), std::move(pool), workers,
                                       std::move(stop_feeding));
}

CONVEYOR_DECL stream<image_batch> assemble_batches(const std::shared_ptr<run_context>& ctx, std::shared_ptr<batch_run> run)
{
    auto out = make_stream<image_batch>(ctx, "decode_batches", run->b->capacity,
                                        [ctx = ctx.get(), run](sink<image_batch>& out) { return assemble(*ctx, run, out); });
    run->gone = watch_receiver(*conveyor::detail::channel_of(out), ctx->executor());
    return out;
}

inline batch_place place_of(const batch_assembler& a, std::uint64_t p)
{
    return {.position = p, .slab = a.slab_of(p), .slot = a.slot(p)};
}

CONVEYOR_DECL std::optional<batch_place> try_next_place(batch_run& run)
{
    batch_assembler& a = run.assembler;
    if (!a.realign()) return std::nullopt; // items in flight first
    if (!a.next_batch_open()) {
        std::optional<image::slab> s = run.pool->try_acquire();
        if (!s) return std::nullopt;
        a.open(std::move(*s));
    }
    return place_of(a, a.dispatch());
}

CONVEYOR_DECL asio::awaitable<std::optional<batch_place>> next_place(std::shared_ptr<batch_run> run)
{
    batch_assembler& a = run->assembler;
    if (!a.drained()) {
        run->dispatcher_waits = true;
        if (!co_await run->drained->receive()) co_return std::nullopt;
    }
    a.realign();
    if (!a.next_batch_open()) {
        std::optional<image::slab> s = run->pool->try_acquire();
        if (!s) s = co_await acquire_unless_gone(*run->pool, run->gone);
        if (!s) co_return std::nullopt;
        a.open(std::move(*s));
    }
    co_return place_of(a, a.dispatch());
}

CONVEYOR_DECL asio::awaitable<bool> hand_on(batch_run& run, std::uint64_t index, batch_result r)
{
    return run.results->send_at(index, std::move(r));
}

CONVEYOR_DECL void worker_done(batch_run& run) noexcept
{
    run.results->producer_done();
    if (run.workers_left.fetch_sub(1) == 1) run.results->close();
}

} // namespace detail

CONVEYOR_DECL std::size_t batch_slab_bytes(const decode_options& d, const collate_options& b)
{
    return detail::make_batch_plan(d, b).slab_bytes;
}

CONVEYOR_DECL decode_batches_stage::decode_batches_stage(decode_image_options d, collate_options b)
{
    auto bad = [](std::string detail) {
        return conveyor::error(make_error_code(errc::bad_options), {.stage = "decode_batches", .detail = std::move(detail)});
    };
    if (b.size == 0) throw bad("the batch size must be at least 1");
    if (d.decode.size.empty())
        throw bad("decode.size must be set: a batch holds images of one size (e.g. .decode = {.size = {224, 224}})");
    if (b.type == dtype::int64) throw bad("images are uint8, float16 or float32, not int64");
    for (std::size_t c = 0; c < 3; ++c)
        if (!(b.std[c] != 0.0f) || !std::isfinite(b.std[c]) || !std::isfinite(b.mean[c]))
            throw bad("mean and std must be finite, std not zero");
    if (d.fields.empty()) throw bad("no image fields to look for");
    detail::check_extra_fields(d, "decode_batches");
    if (!d.stats) d.stats = std::make_shared<decode_stats>();
    auto plan = std::make_shared<detail::batch_plan>(detail::make_batch_plan(d.decode, b));
    if (b.pool) {
        if (b.pool->slab_bytes() < plan->slab_bytes)
            throw bad("the pool's slabs hold " + std::to_string(b.pool->slab_bytes()) + " bytes; a batch needs " +
                      std::to_string(plan->slab_bytes));
        pool_ = b.pool;
    } else {
        pool_ = std::make_shared<slab_pool>(plan->slab_bytes, b.slabs ? b.slabs : b.capacity + 4, b.allocator);
    }
    plan_ = std::move(plan);
    d_ = std::make_shared<const decode_image_options>(std::move(d));
    b_ = std::make_shared<const collate_options>(std::move(b));
}

} // namespace conveyor::image

#endif
