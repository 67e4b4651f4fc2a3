// conveyor/cuda/impl/decode.ipp — the GPU decode stage's run: nvJPEG, the CPU decoders and
// the split between them.
#ifndef CONVEYOR_CUDA_IMPL_DECODE_IPP
#define CONVEYOR_CUDA_IMPL_DECODE_IPP

#include <conveyor/core/runtime.hpp>
#include <conveyor/cuda/decode.hpp>
#include <conveyor/cuda/nvjpeg.hpp>
#if CONVEYOR_WITH_GPU_KERNELS
#include <conveyor/cuda/detail/jpeg_decoder.hpp>
#endif

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace conveyor::cuda {

namespace detail {

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

    std::vector<slot_result> decode(std::span<const image::encoded_image> part, std::size_t first, std::byte* host, void* device)
    {
        std::vector<slot_result> results(part.size());
        std::vector<std::size_t> to_cpu;
#if CONVEYOR_WITH_GPU_KERNELS
        // Which images the GPU may take: JPEGs whose header nvJPEG reads, within the pixel
        // limit; their crop and flip are the CPU path's (the same pure function of the key).
        std::vector<gpu_job> gpu_jobs;
        std::vector<std::size_t> gpu_index;
        if (decoder_) {
            std::vector<std::size_t> eligible;
            std::vector<gpu_job> candidates;
            for (std::size_t i = 0; i < part.size(); ++i) {
                const image::encoded_image& e = part[i];
                gpu_job j;
                if (jpeg_decoder::probe(e.bytes, d_->decode.strict, j.width, j.height, j.hardware) &&
                    std::uint64_t{j.width} * j.height <= d_->decode.max_pixels) {
                    const image::decode_context c{.key = e.key, .origin = e.origin, .epoch = epoch_};
                    j.crop = image::crop_for(j.height, j.width, d_->decode, c);
                    j.flip = image::flip_for(d_->decode, c);
                    j.bytes = e.bytes;
                    j.slot = static_cast<std::uint32_t>(first + i);
                    eligible.push_back(i);
                    candidates.push_back(j);
                } else {
                    to_cpu.push_back(i);
                }
            }
            std::size_t cpu_n = g_->cpu_share < 0 ? split_.cpu_count(eligible.size())
                                                  : static_cast<std::size_t>(std::llround(std::clamp(g_->cpu_share, 0.0, 1.0) *
                                                                                          static_cast<double>(eligible.size())));
            // The CPU takes the last ones of the part, the GPU the rest.
            for (std::size_t k = 0; k < eligible.size(); ++k) {
                if (k + cpu_n >= eligible.size()) {
                    to_cpu.push_back(eligible[k]);
                } else {
                    gpu_jobs.push_back(candidates[k]);
                    gpu_index.push_back(eligible[k]);
                }
            }
        } else
#endif
        {
            for (std::size_t i = 0; i < part.size(); ++i) to_cpu.push_back(i);
        }

        // The CPU's share starts first, on the compute pool; the GPU's runs on this thread.
        gpu_countdown pending;
        std::atomic<std::uint64_t> cpu_ns{0};
        std::size_t cpu_started = 0;
        auto start_cpu = [&](std::size_t i) {
            ++cpu_started;
            pending.add();
            asio::post(compute_, [&, i] {
                const auto t0 = std::chrono::steady_clock::now();
                try {
                    image::detail::decode_into_slot(cpu_, d_->decode, *b_, *plan_, part[i], epoch_, d_->stats.get(),
                                                    host + (first + i) * plan_->item_bytes);
                    results[i].ok = true;
                } catch (...) {
                    results[i].error = std::current_exception();
                }
                cpu_ns.fetch_add(static_cast<std::uint64_t>((std::chrono::steady_clock::now() - t0).count()), std::memory_order_relaxed);
                pending.done();
            });
        };
        const std::size_t shared_to_cpu = to_cpu.size();
        for (std::size_t i : to_cpu) start_cpu(i);
        double gpu_seconds = 0;
#if CONVEYOR_WITH_GPU_KERNELS
        std::size_t refused = 0;
        if (!gpu_jobs.empty()) {
            const auto t0 = std::chrono::steady_clock::now();
            std::vector<gpu_outcome> outcome;
            try {
                decoder_->decode(gpu_jobs, target(device), outcome);
            } catch (...) {
                pending.wait(); // the CPU tasks use this frame
                throw;
            }
            // The GPU thread's time for its share: queuing it, and waiting for the decoder
            // side it reuses, which in a steady state is the device's time per batch.
            gpu_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::uint64_t hw = 0, hy = 0;
            for (std::size_t k = 0; k < gpu_jobs.size(); ++k) {
                const std::size_t i = gpu_index[k];
                if (outcome[k] == gpu_outcome::refused) {
                    ++refused;
                    start_cpu(i); // decoded, or named as bad, by the CPU path
                    continue;
                }
                (outcome[k] == gpu_outcome::hardware ? hw : hy) += 1;
                results[i].ok = true;
                results[i].on_gpu = true;
            }
            counters_->hardware.fetch_add(hw, std::memory_order_relaxed);
            counters_->hybrid.fetch_add(hy, std::memory_order_relaxed);
            counters_->refused.fetch_add(refused, std::memory_order_relaxed);
            if (d_->stats) d_->stats->decoded.fetch_add(hw + hy, std::memory_order_relaxed);
        }
#endif
        pending.wait();
        const double cpu_seconds = static_cast<double>(cpu_ns.load()) * 1e-9;
        counters_->cpu.fetch_add(cpu_started, std::memory_order_relaxed);
        counters_->gpu_ns.fetch_add(static_cast<std::uint64_t>(gpu_seconds * 1e9), std::memory_order_relaxed);
        counters_->cpu_ns.fetch_add(cpu_ns.load(), std::memory_order_relaxed);
#if CONVEYOR_WITH_GPU_KERNELS
        if (decoder_ && g_->cpu_share < 0) {
            // What the input delivered since the last batch, and the time spent waiting for it.
            const std::uint64_t items = input_->items.load(std::memory_order_relaxed);
            const std::uint64_t wait_ns = input_->wait_ns.load(std::memory_order_relaxed);
            split_.record_input(items - input_items_seen_, static_cast<double>(wait_ns - input_wait_seen_) * 1e-9);
            input_items_seen_ = items;
            input_wait_seen_ = wait_ns;
            // The CPU's time for its share only (what it was given before the GPU refused any),
            // so a refused image does not count as the GPU's time or the CPU's share.
            const std::size_t gpu_done = gpu_jobs.size() - refused;
            split_.record(gpu_done, gpu_seconds, shared_to_cpu, shared_to_cpu ? cpu_seconds : 0.0);
            std::lock_guard lk(counters_->mu);
            counters_->split = split_.stats();
        }
#else
        (void)shared_to_cpu;
        (void)cpu_seconds;
#endif
        return results;
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

CONVEYOR_DECL std::shared_ptr<gpu_batch_run> make_gpu_batch_run(run_context& ctx, std::shared_ptr<const image::decode_image_options> d,
                                                                std::shared_ptr<const image::collate_options> b,
                                                                std::shared_ptr<const gpu_decode_options> g,
                                                                std::shared_ptr<const image::detail::batch_plan> plan,
                                                                std::shared_ptr<gpu_decode_counters> counters,
                                                                std::shared_ptr<gpu_decoder_cache> cache,
                                                                std::shared_ptr<const input_meter> input)
{
    return std::make_shared<gpu_batch_run>(ctx, std::move(d), std::move(b), std::move(g), std::move(plan), std::move(counters),
                                           std::move(cache), std::move(input));
}

CONVEYOR_DECL const std::shared_ptr<staging_ring>& ring_of(gpu_batch_run& r) noexcept
{
    return r.ring();
}

CONVEYOR_DECL asio::any_io_executor gpu_executor_of(gpu_batch_run& r) noexcept
{
    return r.executor();
}

CONVEYOR_DECL std::vector<device_tensor> prepare_batch(gpu_batch_run& r, std::size_t set)
{
    return r.prepare(set);
}

CONVEYOR_DECL std::vector<slot_result> decode_part(gpu_batch_run& r, std::span<const image::encoded_image> part, std::size_t first,
                                                   std::byte* host, void* device)
{
    return r.decode(part, first, host, device);
}

CONVEYOR_DECL void move_slot(gpu_batch_run& r, std::size_t from, std::size_t to, bool on_gpu, std::byte* host, void* device)
{
    r.move(from, to, on_gpu, host, device);
}

CONVEYOR_DECL void finish_batch(gpu_batch_run& r, std::size_t set, std::size_t count, const std::vector<char>& on_gpu,
                                const std::byte* host, const std::vector<device_tensor>& tensors)
{
    r.finish(set, count, on_gpu, host, tensors);
}

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

CONVEYOR_DECL decode_batches_stage::decode_batches_stage(image::decode_image_options d, image::collate_options b, gpu_decode_options g)
{
    auto bad = [](std::string detail) {
        return conveyor::error(make_error_code(errc::bad_options), {.stage = "gpu_decode_batches", .detail = std::move(detail)});
    };
    // The CPU stage's checks (size set, types, mean and std), and its plan.
    const image::decode_batches_stage cpu(d, b);
    if (g.ring == 0) throw bad("ring must be at least 1");
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
