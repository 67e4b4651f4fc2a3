// src/cuda_kernels.cu — the GPU decoder's kernels (conveyor/cuda/detail/kernels.hpp).
#include <conveyor/cuda/detail/kernels.hpp>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace conveyor::cuda::detail {
namespace {

/* The resampler of image::detail::resample (image/detail/impl/resample.ipp), byte for byte:
   the same windows and weights, from the same double arithmetic (make_bank's), then the same
   int32 sums of 14-bit weights with the same rounding; the vertical pass first, into a
   uint8 row, then the horizontal one. Each product and sum of the window arithmetic is rounded
   on its own as the CPU rounds it: __dmul_rn and __dadd_rn keep nvcc from fusing a multiply and
   an add into one FMA, which rounds once and would move a window's centre by an ulp. Division
   is IEEE's (nvcc's default for double). */

constexpr int weight_bits = 14; // resample.ipp's simd_bits
constexpr std::int32_t rounding = std::int32_t{1} << (weight_bits - 1);

/* A block resamples `rows_per_block` output rows of one job: it computes the job's
   horizontal windows once (shared by its rows) and the vertical windows of its rows, then,
   per row, the vertical pass over the region's columns into shared memory and the horizontal
   pass from there. Shared memory is static, under the 48 KiB a block gets without opting in;
   what does not fit (a region wider than `mid_capacity`, windows past `hbank_capacity` or
   `vtap_capacity`) is computed where it is used instead: slower, the same bytes. */
constexpr unsigned block_threads = 256;
constexpr unsigned rows_per_block = 8;
constexpr unsigned mid_capacity = 12288;   // bytes: one intermediate row, all channels (4096 RGB pixels)
constexpr unsigned hbank_capacity = 24576; // bytes: per output column, first and count (int32) and weights (int16)
constexpr unsigned vtap_capacity = 1024;   // int16 weights: the vertical windows of a block's rows

/// make_bank's parameters for one direction: outputs over source pixels [lo, hi), reading
/// the fractional span from x0. (No member initializers: it lives in shared memory.)
struct axis {
    double x0, scale, filterscale;
    std::uint32_t stride, lo, hi;
};

/// One output's window: source pixels [first, first + count) and what its weights come from.
struct window {
    std::int64_t first;
    std::uint32_t count;
    std::int32_t nearest; // the tap that takes all the weight where none met any; else -1
    double center, total;
};

/// The region's bounding box and filters, as resample() derives them.
struct geometry {
    std::uint32_t bx0, bx1, by0, by1;
    bool x_exact, y_exact;
    axis h, v;
};

// std::clamp, std::max, std::min and std::lround, as the CPU code calls them (std::clamp(v,
// lo, hi) is `v < lo ? lo : hi < v ? hi : v`; std::max(a, b) is `a < b ? b : a`).
template <class T>
__device__ T clamp_as_std(T v, T lo, T hi)
{
    return v < lo ? lo : hi < v ? hi : v;
}

__device__ std::int32_t round_half_away(double v)
{
    const double t = trunc(v);
    return static_cast<std::int32_t>(fabs(v - t) >= 0.5 ? t + copysign(1.0, v) : t); // v - t is exact
}

__device__ std::uint8_t clamp_byte(std::int32_t v)
{
    return static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

__device__ axis make_axis(std::uint32_t out, double x0, double x1, std::uint32_t lo, std::uint32_t hi)
{
    axis a;
    a.x0 = x0;
    a.scale = (x1 - x0) / out;
    a.filterscale = a.scale < 1.0 ? 1.0 : a.scale; // the triangle's support, 1, widened when shrinking
    a.stride = static_cast<std::uint32_t>(ceil(a.filterscale)) * 2 + 1;
    a.lo = lo;
    a.hi = hi;
    return a;
}

__device__ double triangle(const axis& ax, double center, std::int64_t pos)
{
    const double t = (static_cast<double>(pos) - center + 0.5) / ax.filterscale;
    const double w = 1.0 - fabs(t);
    return 0.0 < w ? w : 0.0;
}

/// Output `i`'s window: make_bank's loop body, the weights left to `tap`.
__device__ window make_window(const axis& ax, std::uint32_t i)
{
    window w;
    w.center = __dadd_rn(ax.x0, __dmul_rn(static_cast<double>(i) + 0.5, ax.scale));
    const double support = ax.filterscale;
    auto a = static_cast<std::int64_t>(floor(w.center - support + 0.5));
    auto e = static_cast<std::int64_t>(floor(w.center + support + 0.5));
    a = clamp_as_std<std::int64_t>(a, ax.lo, static_cast<std::int64_t>(ax.hi - 1));
    e = clamp_as_std<std::int64_t>(e, a + 1, ax.hi);
    e = a + ax.stride < e ? a + ax.stride : e;
    w.first = a;
    w.count = static_cast<std::uint32_t>(e - a);
    double total = 0; // summed in the CPU's order: the same double
    for (std::uint32_t k = 0; k < w.count; ++k) total += triangle(ax, w.center, a + k);
    w.nearest = -1;
    if (total <= 0) { // a window that met no weight (a sliver of a pixel): nearest pixel
        const std::int64_t n = w.count;
        w.nearest = static_cast<std::int32_t>(clamp_as_std<std::int64_t>(static_cast<std::int64_t>(w.center) - a, 0, n - 1));
        total = 1;
    }
    w.total = total;
    return w;
}

/// Tap `k`'s weight in 14-bit fixed point: lround(w[k] / total * (1 << 14)), w[k] as summed.
__device__ std::int32_t tap(const axis& ax, const window& w, std::uint32_t k)
{
    if (w.nearest >= 0) return k == static_cast<std::uint32_t>(w.nearest) ? std::int32_t{1} << weight_bits : 0;
    return round_half_away(__dmul_rn(triangle(ax, w.center, w.first + k) / w.total, double(1 << weight_bits)));
}

/// resample()'s preamble: the region clamped to the image, its bounding box, and the banks.
__device__ geometry make_geometry(const resample_job& j, std::uint32_t out_w, std::uint32_t out_h)
{
    const double w = j.width, h = j.height;
    const double x0 = clamp_as_std(j.left, 0.0, w), y0 = clamp_as_std(j.top, 0.0, h);
    const double x1 = clamp_as_std(j.left + j.region_width, x0, w), y1 = clamp_as_std(j.top + j.region_height, y0, h);
    geometry g;
    g.bx0 = static_cast<std::uint32_t>(floor(x0 + 1e-9));
    g.by0 = static_cast<std::uint32_t>(floor(y0 + 1e-9));
    g.bx1 = static_cast<std::uint32_t>(ceil(x1 - 1e-9));
    g.by1 = static_cast<std::uint32_t>(ceil(y1 - 1e-9));
    g.bx0 = g.bx0 < j.width - 1 ? g.bx0 : j.width - 1;
    g.by0 = g.by0 < j.height - 1 ? g.by0 : j.height - 1;
    g.bx1 = clamp_as_std(g.bx1, g.bx0 + 1, j.width);
    g.by1 = clamp_as_std(g.by1, g.by0 + 1, j.height);
    g.x_exact = fabs(x0 - g.bx0) < 1e-9 && fabs(x1 - g.bx1) < 1e-9 && g.bx1 - g.bx0 == out_w;
    g.y_exact = fabs(y0 - g.by0) < 1e-9 && fabs(y1 - g.by1) < 1e-9 && g.by1 - g.by0 == out_h;
    const double hx0 = x0 < double(g.bx0) ? double(g.bx0) : x0, hx1 = x1 < x0 + 1e-6 ? x0 + 1e-6 : x1;
    const double vy0 = y0 < double(g.by0) ? double(g.by0) : y0, vy1 = y1 < y0 + 1e-6 ? y0 + 1e-6 : y1;
    g.h = make_axis(out_w, hx0, hx1, g.bx0, g.bx1);
    g.v = make_axis(out_h, vy0, vy1, g.by0, g.by1);
    return g;
}

struct shared_state {
    std::uint8_t mid[mid_capacity];
    alignas(8) std::uint8_t hbank[hbank_capacity];
    std::int16_t vweights[vtap_capacity];
    window vwin[rows_per_block];
};

/// Writes pixel `px` (source plane order) at (x, y) of the item at element `base`.
template <unsigned C>
__device__ void store(const batch_target& out, std::size_t base, std::size_t plane, std::uint32_t x, std::uint32_t y,
                      const std::uint8_t (&px)[C])
{
    const std::size_t pixel = std::size_t{y} * out.width + x;
#pragma unroll
    for (unsigned k = 0; k < C; ++k) {
        const std::uint8_t v = C == 3 && out.swap_rb ? px[2 - k] : px[k]; // constant indices: px stays in registers
        const std::size_t i = base + (out.planar ? k * plane + pixel : pixel * C + k);
        switch (out.type) {
        case element_kind::uint8: static_cast<std::uint8_t*>(out.images)[i] = v; break;
        case element_kind::float32: static_cast<float*>(out.images)[i] = __ldg(static_cast<const float*>(out.table) + k * 256 + v); break;
        case element_kind::float16:
            static_cast<unsigned short*>(out.images)[i] = __ldg(static_cast<const unsigned short*>(out.table) + k * 256 + v);
            break;
        }
    }
}

/// Output rows [y_begin, y_begin + rows) of `job`.
template <unsigned C>
__device__ void resample_rows(const resample_job& job, const batch_target& out, std::uint32_t y_begin, std::uint32_t rows,
                              shared_state& s)
{
    const geometry g = make_geometry(job, out.width, out.height);
    const std::uint32_t out_w = out.width;
    const std::uint32_t bw = g.bx1 - g.bx0;
    const std::size_t pitch = job.pitch;
    const bool mid_stored = std::uint64_t{bw} * C <= mid_capacity;
    const bool h_stored = !g.x_exact && std::uint64_t{out_w} * (8 + 2 * std::uint64_t{g.h.stride}) <= hbank_capacity;
    const bool v_stored = !g.y_exact && std::uint64_t{rows} * g.v.stride <= vtap_capacity;

    auto* hfirst = reinterpret_cast<std::int32_t*>(s.hbank); // relative to bx0: the column in the row
    auto* hcount = hfirst + out_w;
    auto* hweights = reinterpret_cast<std::int16_t*>(hcount + out_w);
    if (h_stored)
        for (std::uint32_t x = threadIdx.x; x < out_w; x += blockDim.x) {
            const window w = make_window(g.h, x);
            hfirst[x] = static_cast<std::int32_t>(w.first - g.bx0);
            hcount[x] = static_cast<std::int32_t>(w.count);
            for (std::uint32_t k = 0; k < w.count; ++k)
                hweights[std::size_t{x} * g.h.stride + k] = static_cast<std::int16_t>(tap(g.h, w, k));
        }
    if (!g.y_exact)
        for (std::uint32_t r = threadIdx.x; r < rows; r += blockDim.x) {
            const window w = make_window(g.v, y_begin + r);
            s.vwin[r] = w;
            if (v_stored)
                for (std::uint32_t k = 0; k < w.count; ++k) s.vweights[r * g.v.stride + k] = static_cast<std::int16_t>(tap(g.v, w, k));
        }
    __syncthreads();

    const std::size_t plane = std::size_t{out.height} * out_w;
    const std::size_t base = std::size_t{job.slot} * plane * C;
    for (std::uint32_t r = 0; r < rows; ++r) {
        const std::uint32_t y = y_begin + r;
        window vw{};
        if (!g.y_exact) vw = s.vwin[r];
        const std::int16_t* vwt = s.vweights + std::size_t{r} * g.v.stride;
        // The vertical pass's byte at column `col` of the box, plane p.
        auto vertical = [&](unsigned p, std::uint32_t col) -> std::uint8_t {
            const std::uint8_t* src = (p == 0 ? job.planes[0] : p == 1 ? job.planes[1] : job.planes[2]) + g.bx0 + col;
            if (g.y_exact) return __ldg(src + std::size_t{g.by0 + y} * pitch);
            src += static_cast<std::size_t>(vw.first) * pitch;
            std::int32_t acc = rounding;
            if (v_stored)
                for (std::uint32_t k = 0; k < vw.count; ++k) acc += std::int32_t{__ldg(src + k * pitch)} * vwt[k];
            else
                for (std::uint32_t k = 0; k < vw.count; ++k) acc += std::int32_t{__ldg(src + k * pitch)} * tap(g.v, vw, k);
            return clamp_byte(acc >> weight_bits);
        };
        auto horizontal = [&](auto mid) {
            for (std::uint32_t x = threadIdx.x; x < out_w; x += blockDim.x) {
                std::uint8_t px[C];
                if (g.x_exact) {
                    for (unsigned p = 0; p < C; ++p) px[p] = mid(p, x);
                } else {
                    std::int32_t acc[C];
                    for (unsigned p = 0; p < C; ++p) acc[p] = rounding;
                    if (h_stored) {
                        const std::uint32_t first = static_cast<std::uint32_t>(hfirst[x]);
                        const auto n = static_cast<std::uint32_t>(hcount[x]);
                        const std::int16_t* wt = hweights + std::size_t{x} * g.h.stride;
                        for (std::uint32_t k = 0; k < n; ++k) {
                            const std::int32_t wk = wt[k];
                            for (unsigned p = 0; p < C; ++p) acc[p] += std::int32_t{mid(p, first + k)} * wk;
                        }
                    } else {
                        const window hw = make_window(g.h, x);
                        const auto first = static_cast<std::uint32_t>(hw.first - g.bx0);
                        for (std::uint32_t k = 0; k < hw.count; ++k) {
                            const std::int32_t wk = tap(g.h, hw, k);
                            for (unsigned p = 0; p < C; ++p) acc[p] += std::int32_t{mid(p, first + k)} * wk;
                        }
                    }
                    for (unsigned p = 0; p < C; ++p) px[p] = clamp_byte(acc[p] >> weight_bits);
                }
                store<C>(out, base, plane, job.flip ? out_w - 1 - x : x, y, px);
            }
        };
        if (mid_stored) {
            for (std::uint32_t i = threadIdx.x; i < C * bw; i += blockDim.x) {
                const unsigned p = C == 1 ? 0 : i / bw;
                s.mid[i] = vertical(p, i - p * bw);
            }
            __syncthreads();
            horizontal([&](unsigned p, std::uint32_t col) { return s.mid[p * bw + col]; });
            __syncthreads(); // the next row rewrites mid
        } else {
            horizontal(vertical);
        }
    }
}

/// Grid: x, the tiles of `rows_per_block` output rows; y, the jobs (strided past 65535).
__global__ void __launch_bounds__(block_threads) resample_kernel(const resample_job* __restrict__ jobs, std::uint32_t n, batch_target out)
{
    __shared__ shared_state s;
    const std::uint32_t y_begin = blockIdx.x * rows_per_block;
    const std::uint32_t rows = out.height - y_begin < rows_per_block ? out.height - y_begin : rows_per_block;
    for (std::uint32_t j = blockIdx.y; j < n; j += gridDim.y) {
        __syncthreads(); // the previous job's last row may still read the shared banks
        const resample_job job = jobs[j];
        if (job.width == 0 || job.height == 0 || !job.planes[0] || (out.channels == 3 && (!job.planes[1] || !job.planes[2])))
            continue;
        if (out.channels == 3) resample_rows<3>(job, out, y_begin, rows, s);
        else resample_rows<1>(job, out, y_begin, rows, s);
    }
}

} // namespace

int launch_resample(const resample_job* jobs, std::uint32_t n, const batch_target& out, CUstream_st* stream) noexcept
{
    if (n == 0 || out.width == 0 || out.height == 0) return cudaSuccess;
    if (!jobs || !out.images || (out.channels != 1 && out.channels != 3) || (out.type != element_kind::uint8 && !out.table))
        return cudaErrorInvalidValue;
    const dim3 grid((out.height + rows_per_block - 1) / rows_per_block, n < 65535u ? n : 65535u);
    batch_target target = out;
    void* args[] = {&jobs, &n, &target};
    const cudaError_t rc = cudaLaunchKernel(reinterpret_cast<const void*>(&resample_kernel), grid, dim3(block_threads), args, 0, stream);
    if (rc != cudaSuccess) (void)cudaGetLastError(); // returned here: not left for the caller's next check
    return rc;
}

} // namespace conveyor::cuda::detail
