// conveyor/cuda/impl/decode.ipp — the GPU decode stage's run: nvJPEG, the CPU decoders and
// the split between them.
#ifndef CONVEYOR_CUDA_IMPL_DECODE_IPP
#define CONVEYOR_CUDA_IMPL_DECODE_IPP

#include <conveyor/core/runtime.hpp>
#include <conveyor/core/detail/offload.hpp>
#include <conveyor/cuda/decode.hpp>
#include <conveyor/cuda/nvjpeg.hpp>
#include <conveyor/image/detail/batch_assembler.hpp>
#if CONVEYOR_WITH_GPU_KERNELS
#include <conveyor/cuda/detail/jpeg_decoder.hpp>
#endif

#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace conveyor::cuda {

namespace detail {

/// Where an image of a batch was decoded, or why not.
struct slot_result {
    bool ok = false;
    bool on_gpu = false;      // its pixels are in the device batch; else in the host slab
    std::exception_ptr error; // when not ok
};

/// Waits for tasks posted elsewhere: each calls `done()` once.
class gpu_countdown {
public:
    void add(std::size_t n = 1)
    {
        std::lock_guard lk(mu_);
        left_ += n;
    }
    void done()
    {
        std::lock_guard lk(mu_);
        if (--left_ == 0) cv_.notify_all();
    }
    void wait()
    {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [this] { return left_ == 0; });
    }

private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::size_t left_ = 0;
};

class gpu_decoder_cache {
public:
    std::mutex mu;
#if CONVEYOR_WITH_GPU_KERNELS
    std::unique_ptr<jpeg_decoder> idle; // set up by an earlier run, free now
#endif
    std::string description;            // what that decoder is
};

class gpu_batch_run {
public:
    gpu_batch_run(run_context& ctx, std::shared_ptr<const image::decode_image_options> d, std::shared_ptr<const image::collate_options> b,
                  std::shared_ptr<const gpu_decode_options> g, std::shared_ptr<const image::detail::batch_plan> plan,
                  std::shared_ptr<gpu_decode_counters> counters, std::shared_ptr<gpu_decoder_cache> cache,
                  std::shared_ptr<const input_meter> input)
        : d_(std::move(d)), b_(std::move(b)), g_(std::move(g)), plan_(std::move(plan)), counters_(std::move(counters)),
          cache_(std::move(cache)), input_(std::move(input)),
          rt_(&ctx.rt()), compute_(ctx.rt().compute_executor()), cpu_(ctx.rt().buffers()), epoch_(ctx.epoch()),
          split_(std::max<std::size_t>(ctx.rt().options().compute_threads, 1))
    {
        ring_ = std::make_shared<staging_ring>(
            staging_options{.device = g_->device, .stream = g_->stream, .ring = g_->ring, .capacity = g_->capacity});
    }

    ~gpu_batch_run()
    {
#if CONVEYOR_WITH_GPU_KERNELS
        asio::post(gpu_, [this] {
            if (decoder_) {
                // Kept for the stage's next run, once nothing of this one is queued on it.
                device_scope on(g_->device);
                if (cudaStreamSynchronize(ring_->stream()) == cudaSuccess) {
                    decoder_->set_stream(nullptr);
                    std::lock_guard lk(cache_->mu);
                    if (!cache_->idle) cache_->idle = std::move(decoder_);
                } else {
                    (void)cudaGetLastError();
                }
                decoder_.reset();
            }
            if (table_) {
                device_scope on(g_->device);
                (void)cudaFree(std::exchange(table_, nullptr));
            }
        });
#endif
        gpu_.join();
    }

    const std::shared_ptr<staging_ring>& ring() const noexcept { return ring_; }
    asio::any_io_executor executor() noexcept { return gpu_.get_executor(); }

    std::vector<device_tensor> prepare(std::size_t set)
    {
        if (!set_up_) set_up();
        const auto n = static_cast<std::int64_t>(b_->size);
        const image::dtype_traits& t = image::traits_of(b_->type);
        host_tensor images{nullptr, plan_->item_bytes * b_->size, {n}, element_type{static_cast<std::uint8_t>(t.kind), t.bits}};
        host_tensor labels{nullptr, b_->size * sizeof(std::int64_t), {n}, element_type{0, 64}};
        return ring_->prepare(set, {images, labels});
    }

    /** Decodes `part` into slots `first`, `first + 1`, ... of the batch (`host` the slab's
        images, `device` the device batch's), the GPU and the CPU decoders at once. Waits
        for the CPU's share; the GPU's is queued on the stream (its results are known on
        return), so `part`'s bytes must live until the stream is past it. One result per
        image. */
    std::vector<slot_result> decode(std::span<const image::encoded_image> part, std::size_t first, std::byte* host, void* device)
    {
        part_decode p{.part = part, .first = first, .host = host, .device = device};
        p.results.resize(part.size());
        const gpu_choice c = choose(part, first);
        p.shared_to_cpu = c.to_cpu.size();
        for (std::size_t i : c.to_cpu) start_cpu(p, i); // the CPU's share starts first, on the compute pool
        decode_on_gpu(p, c);                            // the GPU's runs on this thread meanwhile
        p.pending.wait();
        record(p, c);
        return std::move(p.results);
    }

    void move(std::size_t from, std::size_t to, bool on_gpu, std::byte* host, void* device)
    {
        const std::size_t n = plan_->item_bytes;
        if (on_gpu) {
            device_scope on(g_->device);
            check(cudaMemcpyAsync(static_cast<std::byte*>(device) + to * n, static_cast<std::byte*>(device) + from * n, n,
                                  cudaMemcpyDeviceToDevice, ring_->stream()),
                  "cudaMemcpyAsync (moving an image down a slot)");
        } else {
            std::memmove(host + to * n, host + from * n, n);
        }
    }

    void finish(std::size_t set, std::size_t count, const std::vector<char>& on_gpu, const std::byte* host,
                const std::vector<device_tensor>& tensors)
    {
        device_scope on(g_->device);
        const std::size_t n = plan_->item_bytes;
        auto* dev = static_cast<std::byte*>(tensors[0].data);
        for (std::size_t i = 0; i < count;) {
            if (on_gpu[i]) {
                ++i;
                continue;
            }
            std::size_t j = i;
            while (j < count && !on_gpu[j]) ++j; // a run of CPU-decoded slots: one copy
            check(cudaMemcpyAsync(dev + i * n, host + i * n, (j - i) * n, cudaMemcpyHostToDevice, ring_->stream()),
                  "cudaMemcpyAsync of CPU-decoded images");
            i = j;
        }
        check(cudaMemcpyAsync(tensors[1].data, host + plan_->labels_offset, count * sizeof(std::int64_t), cudaMemcpyHostToDevice,
                              ring_->stream()),
              "cudaMemcpyAsync of labels");
        ring_->record_ready(set);
    }

private:
    /// Which images of a part go where: the CPU's (by index in the part), and the GPU's
    /// jobs with their indices.
    struct gpu_choice {
        std::vector<std::size_t> to_cpu;
#if CONVEYOR_WITH_GPU_KERNELS
        std::vector<gpu_job> jobs;
        std::vector<std::size_t> index;
#endif
    };

    /// One part's decode, shared with the CPU tasks it starts (which use it until `pending`).
    struct part_decode {
        std::span<const image::encoded_image> part;
        std::size_t first = 0;
        std::byte* host = nullptr;
        void* device = nullptr;
        std::vector<slot_result> results;
        gpu_countdown pending;
        std::atomic<std::uint64_t> cpu_ns{0};
        std::size_t cpu_started = 0;
        std::size_t shared_to_cpu = 0; // what the split gave the CPU (before the GPU refused any)
        std::size_t gpu_done = 0;      // the GPU's images it decoded (not refused)
        double gpu_seconds = 0;
    };

    gpu_choice choose(std::span<const image::encoded_image> part, std::size_t first) const
    {
        gpu_choice c;
#if CONVEYOR_WITH_GPU_KERNELS
        if (decoder_) {
            // Which images the GPU may take: JPEGs whose header nvJPEG reads, within the pixel
            // limit; their crop and flip are the CPU path's (the same pure function of the key).
            std::vector<std::size_t> eligible;
            std::vector<gpu_job> candidates;
            for (std::size_t i = 0; i < part.size(); ++i) {
                const image::encoded_image& e = part[i];
                gpu_job j;
                if (jpeg_decoder::probe(e.bytes, d_->decode.strict, j.width, j.height, j.hardware) &&
                    std::uint64_t{j.width} * j.height <= d_->decode.max_pixels) {
                    const image::decode_context ctx{.key = e.key, .origin = e.origin, .epoch = epoch_};
                    j.crop = image::crop_for(j.height, j.width, d_->decode, ctx);
                    j.flip = image::flip_for(d_->decode, ctx);
                    j.bytes = e.bytes;
                    j.slot = static_cast<std::uint32_t>(first + i);
                    eligible.push_back(i);
                    candidates.push_back(j);
                } else {
                    c.to_cpu.push_back(i);
                }
            }
            const std::size_t cpu_n = g_->cpu_share < 0 ? split_.cpu_count(eligible.size())
                                                        : static_cast<std::size_t>(std::llround(std::clamp(g_->cpu_share, 0.0, 1.0) *
                                                                                                static_cast<double>(eligible.size())));
            // The CPU takes the last ones of the part, the GPU the rest.
            for (std::size_t k = 0; k < eligible.size(); ++k) {
                if (k + cpu_n >= eligible.size()) {
                    c.to_cpu.push_back(eligible[k]);
                } else {
                    c.jobs.push_back(candidates[k]);
                    c.index.push_back(eligible[k]);
                }
            }
            return c;
        }
#else
        (void)first;
#endif
        for (std::size_t i = 0; i < part.size(); ++i) c.to_cpu.push_back(i);
        return c;
    }

    /// Decodes image `i` of `p` on the compute pool, into its slot of the host slab.
    void start_cpu(part_decode& p, std::size_t i)
    {
        ++p.cpu_started;
        p.pending.add();
        asio::post(compute_, [this, &p, i] {
            const auto t0 = std::chrono::steady_clock::now();
            try {
                image::detail::decode_into_slot(cpu_, d_->decode, *b_, *plan_, p.part[i], epoch_, d_->stats.get(),
                                                p.host + (p.first + i) * plan_->item_bytes);
                p.results[i].ok = true;
            } catch (...) {
                p.results[i].error = std::current_exception();
            }
            p.cpu_ns.fetch_add(static_cast<std::uint64_t>((std::chrono::steady_clock::now() - t0).count()), std::memory_order_relaxed);
            p.pending.done();
        });
    }

    /// Queues the GPU's share of `p` on the stream; what it refuses goes to the CPU.
    void decode_on_gpu(part_decode& p, const gpu_choice& c)
    {
#if CONVEYOR_WITH_GPU_KERNELS
        if (c.jobs.empty()) return;
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<gpu_outcome> outcome;
        try {
            decoder_->decode(c.jobs, target(p.device), outcome);
        } catch (...) {
            p.pending.wait(); // the CPU tasks use `p`
            throw;
        }
        // The GPU thread's time for its share: queuing it, and waiting for the decoder
        // side it reuses, which in a steady state is the device's time per batch.
        p.gpu_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::uint64_t hw = 0, hy = 0, refused = 0;
        for (std::size_t k = 0; k < c.jobs.size(); ++k) {
            const std::size_t i = c.index[k];
            if (outcome[k] == gpu_outcome::refused) {
                ++refused;
                start_cpu(p, i); // decoded, or named as bad, by the CPU path
                continue;
            }
            (outcome[k] == gpu_outcome::hardware ? hw : hy) += 1;
            p.results[i].ok = true;
            p.results[i].on_gpu = true;
        }
        p.gpu_done = c.jobs.size() - refused;
        counters_->hardware.fetch_add(hw, std::memory_order_relaxed);
        counters_->hybrid.fetch_add(hy, std::memory_order_relaxed);
        counters_->refused.fetch_add(refused, std::memory_order_relaxed);
        if (d_->stats) d_->stats->decoded.fetch_add(hw + hy, std::memory_order_relaxed);
#else
        (void)p;
        (void)c;
#endif
    }

    /// Counts what `p` did, and gives the split its rates.
    void record(const part_decode& p, const gpu_choice& c)
    {
        (void)c;
        const std::uint64_t cpu_ns = p.cpu_ns.load();
        counters_->cpu.fetch_add(p.cpu_started, std::memory_order_relaxed);
        counters_->gpu_ns.fetch_add(static_cast<std::uint64_t>(p.gpu_seconds * 1e9), std::memory_order_relaxed);
        counters_->cpu_ns.fetch_add(cpu_ns, std::memory_order_relaxed);
#if CONVEYOR_WITH_GPU_KERNELS
        if (!decoder_ || g_->cpu_share >= 0) return;
        // What the input delivered since the last batch, and the time spent waiting for it.
        const std::uint64_t items = input_->items.load(std::memory_order_relaxed);
        const std::uint64_t wait_ns = input_->wait_ns.load(std::memory_order_relaxed);
        split_.record_input(items - input_items_seen_, static_cast<double>(wait_ns - input_wait_seen_) * 1e-9);
        input_items_seen_ = items;
        input_wait_seen_ = wait_ns;
        // The CPU's time for its share only (what it was given before the GPU refused any),
        // so a refused image does not count as the GPU's time or the CPU's share.
        const double cpu_seconds = static_cast<double>(cpu_ns) * 1e-9;
        split_.record(p.gpu_done, p.gpu_seconds, p.shared_to_cpu, p.shared_to_cpu ? cpu_seconds : 0.0);
        std::lock_guard lk(counters_->mu);
        counters_->split = split_.stats();
#endif
    }

    /// Looks for nvJPEG and sets the decoder up, on the GPU thread (its only user), once.
    void set_up()
    {
        set_up_ = true;
        std::string why;
#if CONVEYOR_WITH_GPU_KERNELS
        const nvjpeg_library& lib = nvjpeg();
        if (!lib) {
            why = lib.reason;
        } else if (g_->cpu_share >= 1) {
            why = "cpu_share is 1";
        } else {
            try {
                {
                    std::lock_guard lk(cache_->mu);
                    decoder_ = std::move(cache_->idle);
                    description_ = decoder_ ? cache_->description : std::string();
                }
                if (!decoder_) {
                    decoder_ = std::make_unique<jpeg_decoder>(*lib.api, jpeg_decoder_options{.device = g_->device,
                                                                                             .stream = ring_->stream(),
                                                                                             .hardware = g_->hardware,
                                                                                             .format = d_->decode.format,
                                                                                             .max_batch = b_->size,
                                                                                             .preallocate_width = g_->preallocate_width,
                                                                                             .preallocate_height = g_->preallocate_height});
                    description_ = "nvJPEG " + lib.version + " (" + lib.path + "), " +
                                   (decoder_->hardware() ? "hardware engines: " + std::to_string(decoder_->engines()) + " x " +
                                                               std::to_string(decoder_->cores_per_engine()) + " cores"
                                                         : std::string("no hardware engines: hybrid decoders"));
                    std::lock_guard lk(cache_->mu);
                    cache_->description = description_;
                }
                decoder_->set_stream(ring_->stream());
                setup_table();
            } catch (const std::exception& e) {
                decoder_.reset();
                why = std::string("nvJPEG could not be set up: ") + e.what();
            }
        }
#else
        why = "this build of conveyor has no GPU kernels (no CUDA compiler was found when it was built)";
#endif
        if (description_.empty()) {
            description_ = "CPU only: " + why;
            rt_->log_once("gpu_decode_batches:cpu", "gpu_decode_batches: every image is decoded on the CPU: " + why);
        }
        std::lock_guard lk(counters_->mu);
        counters_->decoder = description_;
    }

#if CONVEYOR_WITH_GPU_KERNELS
    /// The normalization table of float batches, on the device: the CPU path's own values.
    void setup_table()
    {
        if (b_->type == image::dtype::uint8) return;
        device_scope on(g_->device);
        const bool half = b_->type == image::dtype::float16;
        const std::size_t bytes = half ? sizeof(plan_->to_half) : sizeof(plan_->to_float);
        check(cudaMalloc(&table_, bytes), "cudaMalloc of the normalization table");
        check(cudaMemcpy(table_, half ? static_cast<const void*>(plan_->to_half.data()) : static_cast<const void*>(plan_->to_float.data()),
                         bytes, cudaMemcpyHostToDevice),
              "cudaMemcpy of the normalization table");
    }

    batch_target target(void* device) const noexcept
    {
        batch_target t;
        t.images = device;
        t.width = plan_->width;
        t.height = plan_->height;
        t.channels = plan_->channels;
        t.planar = b_->layout == image::tensor_layout::nchw;
        t.type = b_->type == image::dtype::uint8 ? element_kind::uint8
                 : b_->type == image::dtype::float16 ? element_kind::float16
                                                     : element_kind::float32;
        t.swap_rb = d_->decode.format == image::pixel_format::bgr;
        t.table = table_;
        return t;
    }
#endif

    std::shared_ptr<const image::decode_image_options> d_;
    std::shared_ptr<const image::collate_options> b_;
    std::shared_ptr<const gpu_decode_options> g_;
    std::shared_ptr<const image::detail::batch_plan> plan_;
    std::shared_ptr<gpu_decode_counters> counters_;
    std::shared_ptr<gpu_decoder_cache> cache_;
    std::shared_ptr<const input_meter> input_;
    std::uint64_t input_items_seen_ = 0, input_wait_seen_ = 0;
    runtime* rt_;
    runtime::pool_executor_type compute_;
    image::decoder cpu_;
    std::uint64_t epoch_;
    image::decode_split split_;
    std::shared_ptr<staging_ring> ring_;
    asio::thread_pool gpu_{1};
    bool set_up_ = false;
    std::string description_;
#if CONVEYOR_WITH_GPU_KERNELS
    std::unique_ptr<jpeg_decoder> decoder_;
    void* table_ = nullptr;
#endif
};

/// A device buffer set taken from a ring: given back when this goes, unless a device batch
/// took it out (`hand_over`).
struct held_set {
    std::shared_ptr<staging_ring> ring;
    std::size_t set = 0;
    held_set(std::shared_ptr<staging_ring> r, std::size_t s) noexcept : ring(std::move(r)), set(s) {}
    held_set(const held_set&) = delete;
    held_set& operator=(const held_set&) = delete;
    ~held_set()
    {
        if (ring) ring->release(set, nullptr);
    }
    std::shared_ptr<staging_ring> hand_over() noexcept { return std::move(ring); }
};

inline asio::awaitable<void> acquire_into(staging_ring& ring, std::optional<std::size_t>& got)
{
    got = co_await ring.async_acquire();
}

/// A set of `ring` unless `gone` says nobody reads on first (see `image::detail::unless_gone`).
inline asio::awaitable<std::optional<std::size_t>> acquire_unless_gone(staging_ring& ring,
                                                                       std::shared_ptr<image::detail::receiver_watch> gone)
{
    std::optional<std::size_t> got;
    asio::awaitable<void> acquire = acquire_into(ring, got);
    if (!co_await image::detail::unless_gone(std::move(acquire), std::move(gone))) co_return std::nullopt;
    co_return got;
}

/* One device batch being made: its buffer set and device tensors, where each slot's pixels
   are, and the owners of its images' encoded bytes (nvJPEG reads them on the stream). The
   owners go with the host batch, or, if the batch does not go out, once the stream is past
   what was queued. */
struct gpu_batch {
    struct owners {
        image::image_batch batch;
        std::vector<std::shared_ptr<const void>> items;
    };

    gpu_batch(std::shared_ptr<staging_ring> r, std::size_t s, asio::any_io_executor ex, std::size_t n)
        : held(r, s), ring(std::move(r)), here(std::move(ex)), own(std::make_shared<owners>()), on_gpu(n, 0)
    {
    }
    gpu_batch(const gpu_batch&) = delete;
    gpu_batch& operator=(const gpu_batch&) = delete;
    ~gpu_batch()
    {
        if (!own) return;
        try {
            ring->when_done(host_keepalive<owners>{std::move(own), here});
        } catch (...) {
            // A failed device reads nothing any more.
        }
    }

    /// Keeps `owner` (of an image of this batch) until the batch is done with.
    void keep(const std::shared_ptr<const void>& owner)
    {
        if (own->items.empty() || own->items.back() != owner) own->items.push_back(owner);
    }

    held_set held; // given back unless the batch goes out
    std::shared_ptr<staging_ring> ring;
    asio::any_io_executor here;
    std::shared_ptr<owners> own;
    std::vector<device_tensor> tensors;
    std::vector<char> on_gpu; // by slot: its pixels are on the device (else in the host slab)
    std::byte* host = nullptr;
    void* device = nullptr;
};

/* A run of the stage, on the run's thread: batches one at a time, each filled from the
   front of the input in parts (`decode_some`): an item whose image fails is failed, or
   skipped and its slot taken by the next good one, whose pixels move down a slot (on the
   device or in the slab, wherever they were decoded), and more items are taken to fill the
   end. The places are a `batch_assembler`'s, as the CPU stage's are. */
class gpu_batches {
public:
    using output = sink<device_batch<image::image_batch>>;

    gpu_batches(run_context& ctx, const decode_batches_stage& stage, std::shared_ptr<conveyor::detail::channel<gpu_items>> ahead,
                std::shared_ptr<const input_meter> input, asio::any_io_executor here)
        : ctx_(ctx), stage_(stage), ahead_(std::move(ahead)), here_(std::move(here)), n_(stage.b_->size),
          run_(std::make_shared<gpu_batch_run>(ctx, stage.d_, stage.b_, stage.g_, stage.plan_, stage.counters_, stage.cache_,
                                               std::move(input))),
          gpu_(run_->executor()), assembler_(n_, stage.plan_->item_bytes)
    {
    }

    asio::awaitable<void> run(output& out)
    {
        gone_ = image::detail::watch_receiver(*conveyor::detail::channel_of(out), here_);
        // An item before the slab and the buffer set: the run ends without taking them
        // (a consumer may hold every set until the end).
        while (co_await have_item()) {
            std::unique_ptr<gpu_batch> b = co_await make_batch();
            if (!b) co_return; // nobody reads on
            if (!co_await fill(*b)) co_return;
            const std::size_t count = assembler_.pending();
            if (count == 0 || (count < n_ && !stage_.b_->partial) || ctx_.stopping()) break;
            if (!co_await hand_on(std::move(b), out)) co_return;
        }
        assembler_.abandon();
    }

private:
    /// Whether an item is pending, taking the next ones from `ahead_` if none is.
    asio::awaitable<bool> have_item()
    {
        if (pending_.empty() && !ended_) {
            std::vector<gpu_items> one;
            if (co_await ahead_->receive_some(one, 1)) {
                for (auto& x : one.front().items) pending_.emplace_back(std::move(x), one.front().owner);
            } else {
                ended_ = true;
            }
        }
        co_return !pending_.empty();
    }

    /// A batch with its slab (opened in the assembler) and buffer set; null once the
    /// consumer has gone.
    asio::awaitable<std::unique_ptr<gpu_batch>> make_batch()
    {
        std::optional<image::slab> slab = stage_.pool_->try_acquire();
        if (!slab) slab = co_await image::detail::acquire_unless_gone(*stage_.pool_, gone_);
        if (!slab) co_return nullptr;
        const std::optional<std::size_t> set = co_await acquire_unless_gone(*run_->ring(), gone_);
        if (!set) co_return nullptr;
        auto b = std::make_unique<gpu_batch>(run_->ring(), *set, here_, n_);
        b->tensors = co_await conveyor::detail::offload(gpu_, [&] { return run_->prepare(*set); });
        b->host = slab->data();
        b->device = b->tensors[0].data;
        assembler_.open(std::move(*slab));
        co_return b;
    }

    /// Fills `b` until it is full or the input ends; false when the run failed.
    asio::awaitable<bool> fill(gpu_batch& b)
    {
        while (assembler_.pending() < n_) {
            const std::optional<std::size_t> taken = co_await decode_some(b);
            if (!taken) co_return false;
            if (*taken == 0) break; // the input ended
        }
        co_return true;
    }

    /// Skips (counted) or fails the run on the image of `key`; false when it failed.
    bool skip_or_fail(const std::string& key, const std::exception_ptr& e)
    {
        if (stage_.d_->errors == on_error::fail || ctx_.stopping()) {
            ctx_.fail(e, "gpu_decode_batches", key);
            return false;
        }
        ctx_.note_skip(conveyor::detail::skip_line("gpu_decode_batches", key, e));
        stage_.counters_->skipped.fetch_add(1, std::memory_order_relaxed);
        return true;
    }

    /** Takes up to the items that fill `b` and decodes them into its next slots; their
        results go to the assembler. The items taken (0: the input ended), or nullopt when
        the run failed. */
    asio::awaitable<std::optional<std::size_t>> decode_some(gpu_batch& b)
    {
        const std::size_t want = n_ - assembler_.pending();
        std::vector<gpu_item> part;
        std::size_t taken = 0;
        for (; taken < want && co_await have_item(); ++taken) {
            std::pair<gpu_item, std::shared_ptr<const void>> next = std::move(pending_.front());
            pending_.pop_front();
            gpu_item& item = next.first;
            b.keep(next.second);
            if (item.error && !skip_or_fail(item.key, item.error)) co_return std::nullopt;
            if (!item.error) part.push_back(std::move(item));
        }
        if (part.empty()) co_return taken;
        std::vector<image::encoded_image> images;
        std::vector<std::uint64_t> at;
        for (auto& x : part) {
            images.push_back(x.image);
            at.push_back(assembler_.dispatch());
        }
        const std::size_t first = at.front() % n_;
        std::vector<slot_result> results =
            co_await conveyor::detail::offload(gpu_, [&] { return run_->decode(images, first, b.host, b.device); });
        if (!co_await take_results(b, part, at, results)) co_return std::nullopt;
        co_return taken;
    }

    /// Places the results of `part` (dispatched at `at`) and moves the images that a skip
    /// moved down; false when one failed the run.
    asio::awaitable<bool> take_results(gpu_batch& b, std::vector<gpu_item>& part, const std::vector<std::uint64_t>& at,
                                       std::vector<slot_result>& results)
    {
        std::vector<std::pair<std::size_t, std::size_t>> moves; // (from, to) slots
        for (std::size_t i = 0; i < part.size(); ++i) {
            if (!results[i].ok) {
                if (!skip_or_fail(part[i].key, results[i].error)) co_return false;
                assembler_.skip(at[i]);
                continue;
            }
            const auto p = assembler_.place(at[i], std::move(part[i].key), part[i].id, part[i].image.label);
            b.on_gpu[p.to % n_] = results[i].on_gpu ? 1 : 0;
            if (p.moved()) moves.emplace_back(p.from % n_, p.to % n_);
        }
        assembler_.realign(); // the part is all back: the next one starts at the next free slot
        if (!moves.empty())
            co_await conveyor::detail::offload(gpu_, [&] {
                for (auto [from, to] : moves) run_->move(from, to, b.on_gpu[to] != 0, b.host, b.device);
            });
        co_return true;
    }

    /// The batch: labels into the slab, then the CPU's images and the labels to the device;
    /// false when nobody reads on.
    asio::awaitable<bool> hand_on(std::unique_ptr<gpu_batch> b, output& out)
    {
        const std::size_t count = assembler_.pending();
        std::optional<image::detail::batch_assembler::assembled> a = count == n_ ? assembler_.take_full() : assembler_.take_partial();
        gpu_batch::owners& own = *b->own;
        own.batch = image::detail::batch_of(std::move(*a), *stage_.b_, *stage_.plan_);
        own.batch.images.data = nullptr; // the pixels are on the device only
        const std::shared_ptr<image::image_batch> hb(std::move(b->own), &own.batch); // owns the items too
        const std::size_t set = b->held.set;
        try {
            co_await conveyor::detail::offload(gpu_, [&] { run_->finish(set, count, b->on_gpu, b->host, b->tensors); });
        } catch (...) {
            // Copies may be queued: the slab stays until the stream is past them.
            try {
                b->ring->when_done(host_keepalive<image::image_batch>{hb, here_});
            } catch (...) {
            }
            throw;
        }
        std::vector<device_tensor> tensors = std::move(b->tensors);
        tensors[0].shape = hb->images.shape;
        tensors[0].bytes = count * stage_.plan_->item_bytes;
        tensors[1].shape = hb->labels.shape;
        tensors[1].bytes = count * sizeof(std::int64_t);
        stage_.counters_->batches.fetch_add(1, std::memory_order_relaxed);
        // The host batch (its slab feeds the copies) lives until they are done.
        auto batch = device_batch_access<image::image_batch>::make(hb, std::move(tensors), b->held.hand_over(), set,
                                                                   host_keepalive<image::image_batch>{hb, here_});
        co_return co_await out.send(std::move(batch));
    }

    run_context& ctx_;
    const decode_batches_stage& stage_;
    std::shared_ptr<conveyor::detail::channel<gpu_items>> ahead_;
    asio::any_io_executor here_;
    std::size_t n_;
    std::shared_ptr<gpu_batch_run> run_; // its GPU thread ends after the members below
    asio::any_io_executor gpu_;
    image::detail::batch_assembler assembler_;
    std::shared_ptr<image::detail::receiver_watch> gone_;
    std::deque<std::pair<gpu_item, std::shared_ptr<const void>>> pending_; // taken from `ahead_`, not yet decoded
    bool ended_ = false;
};

CONVEYOR_DECL gpu_decode_stats snapshot(const gpu_decode_counters& c)
{
    gpu_decode_stats s;
    s.batches = c.batches.load();
    s.hardware = c.hardware.load();
    s.hybrid = c.hybrid.load();
    s.cpu = c.cpu.load();
    s.refused = c.refused.load();
    s.skipped = c.skipped.load();
    s.gpu_seconds = static_cast<double>(c.gpu_ns.load()) * 1e-9;
    s.cpu_thread_seconds = static_cast<double>(c.cpu_ns.load()) * 1e-9;
    std::lock_guard lk(c.mu);
    s.split = c.split;
    s.decoder = c.decoder;
    return s;
}

} // namespace detail

CONVEYOR_DECL stream<device_batch<image::image_batch>> decode_batches_stage::batches(
    const std::shared_ptr<run_context>& ctx, std::shared_ptr<conveyor::detail::channel<detail::gpu_items>> ahead,
    std::shared_ptr<const detail::input_meter> input) const
{
    return make_stream<device_batch<image::image_batch>>(
        ctx, "gpu_decode_batches", g_->capacity,
        [ctx = ctx.get(), stage = *this, ahead, input](sink<device_batch<image::image_batch>>& out) -> asio::awaitable<void> {
            struct closer {
                conveyor::detail::channel<detail::gpu_items>& ahead;
                ~closer() { ahead.close_receiver(); }
            } close_on_exit{*ahead};
            detail::gpu_batches run(*ctx, stage, ahead, input, co_await asio::this_coro::executor);
            co_await run.run(out);
        });
}

CONVEYOR_DECL decode_batches_stage::decode_batches_stage(image::decode_image_options d, image::collate_options b, gpu_decode_options g)
{
    auto bad = [](std::string detail) {
        return conveyor::error(make_error_code(errc::bad_options), {.stage = "gpu_decode_batches", .detail = std::move(detail)});
    };
    // The CPU stage's checks (size set, types, mean and std), and its plan.
    const image::decode_batches_stage cpu(d, b);
    if (g.ring == 0) throw bad("ring must be at least 1");
    if (!d.extra_fields.empty())
        throw bad("extra_fields: the GPU stage batches images and labels only; image::decode_batches(...) | cuda::to_cuda() "
                  "batches other fields too");
    if (!(g.cpu_share <= 1)) throw bad("cpu_share must be at most 1 (negative: measured)");
    d_ = std::make_shared<const image::decode_image_options>(cpu.decode());
    b_ = std::make_shared<const image::collate_options>(cpu.batch());
    g_ = std::make_shared<const gpu_decode_options>(g);
    plan_ = std::make_shared<const image::detail::batch_plan>(image::detail::make_batch_plan(d_->decode, *b_));
    counters_ = std::make_shared<detail::gpu_decode_counters>();
    cache_ = std::make_shared<detail::gpu_decoder_cache>();
    // Pinned (page-locked) host memory is dear to allocate: the stage's runs share one pool.
    pool_ = b_->pool ? b_->pool
                     : std::make_shared<image::slab_pool>(plan_->slab_bytes, b_->slabs ? b_->slabs : b_->capacity + g_->ring + 2,
                                                          pinned_slab_allocator());
}

} // namespace conveyor::cuda

#endif
