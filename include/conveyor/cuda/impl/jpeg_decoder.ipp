// conveyor/cuda/impl/jpeg_decoder.ipp — definitions for conveyor/cuda/detail/jpeg_decoder.hpp.
#ifndef CONVEYOR_CUDA_IMPL_JPEG_DECODER_IPP
#define CONVEYOR_CUDA_IMPL_JPEG_DECODER_IPP

#include <conveyor/cuda/detail/jpeg_decoder.hpp>
#include <conveyor/cuda/error.hpp>
#include <conveyor/cuda/staging.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

namespace conveyor::cuda::detail {

/// Decoded planes start at multiples of this in the arena.
inline std::size_t plane_align_up(std::size_t n) noexcept
{
    return (n + 255) / 256 * 256;
}

inline const unsigned char* jpeg_bytes_of(std::span<const std::byte> b) noexcept
{
    return reinterpret_cast<const unsigned char*>(b.data());
}

CONVEYOR_DECL void jpeg_decoder::check(nvjpeg_api::status s, const char* what) const
{
    if (s != nvjpeg_api::status::success)
        throw conveyor::error(make_error_code(errc::cuda_failed),
                              {.stage = "gpu_decode", .detail = std::string(what) + ": " + nvjpeg_api::name_of(s)});
}

CONVEYOR_DECL jpeg_decoder::jpeg_decoder(const nvjpeg_api::functions& api, const jpeg_decoder_options& o) : api_(api), o_(o)
{
    using nvjpeg_api::backend;
    using nvjpeg_api::status;
    device_scope on(o_.device);
    if (o_.format == image::pixel_format::gray) {
        format_ = nvjpeg_api::output_format::y;
        planes_ = 1;
    }
    try {
        // The engines, where the GPU has them: nvjpegCreateEx refuses the hardware backend
        // elsewhere (JPEG_NOT_SUPPORTED or ARCH_MISMATCH), and the hybrid decoders do all.
        if (o_.hardware && api_.nvjpegCreateEx(backend::hardware, nullptr, nullptr, 0, &hw_handle_) == status::success) {
            if (api_.nvjpegGetHardwareDecoderInfo(hw_handle_, &engines_, &cores_) != status::success) engines_ = cores_ = 0;
            for (side& sd : sides_) {
                check(api_.nvjpegJpegStateCreate(hw_handle_, &sd.hw_state), "nvjpegJpegStateCreate (hardware)");
                // Pre-allocation: the engines' buffers for a full batch of typical images,
                // now rather than in the first batch (a hint: larger images grow them later).
                (void)api_.nvjpegDecodeBatchedPreAllocate(hw_handle_, sd.hw_state, static_cast<int>(o_.max_batch),
                                                          static_cast<int>(o_.preallocate_width),
                                                          static_cast<int>(o_.preallocate_height),
                                                          nvjpeg_api::chroma_subsampling::css_420, format_);
            }
        } else {
            hw_handle_ = nullptr;
        }
        check(api_.nvjpegCreateEx(backend::default_backend, nullptr, nullptr, 0, &handle_), "nvjpegCreateEx");
        check(api_.nvjpegDecoderCreate(handle_, backend::hybrid, &hybrid_), "nvjpegDecoderCreate (hybrid)");
        check(api_.nvjpegDecoderCreate(handle_, backend::gpu_hybrid, &gpu_hybrid_), "nvjpegDecoderCreate (GPU hybrid)");
        check(api_.nvjpegDecoderStateCreate(handle_, hybrid_, &hybrid_state_), "nvjpegDecoderStateCreate (hybrid)");
        check(api_.nvjpegDecoderStateCreate(handle_, gpu_hybrid_, &gpu_hybrid_state_), "nvjpegDecoderStateCreate (GPU hybrid)");
        check(api_.nvjpegBufferDeviceCreate(handle_, nullptr, &device_buffer_), "nvjpegBufferDeviceCreate");
        check(api_.nvjpegStateAttachDeviceBuffer(hybrid_state_, device_buffer_), "nvjpegStateAttachDeviceBuffer");
        check(api_.nvjpegStateAttachDeviceBuffer(gpu_hybrid_state_, device_buffer_), "nvjpegStateAttachDeviceBuffer");
        for (int k = 0; k < 2; ++k) {
            check(api_.nvjpegBufferPinnedCreate(handle_, nullptr, &pinned_[k]), "nvjpegBufferPinnedCreate");
            check(api_.nvjpegJpegStreamCreate(handle_, &streams_[k]), "nvjpegJpegStreamCreate");
            cudaEvent_t e = nullptr;
            detail::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
            pinned_free_[k] = e;
            detail::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
            sides_[k].done = e;
        }
        check(api_.nvjpegDecodeParamsCreate(handle_, &params_), "nvjpegDecodeParamsCreate");
    } catch (...) {
        release();
        throw;
    }
}

CONVEYOR_DECL jpeg_decoder::~jpeg_decoder()
{
    release();
}

CONVEYOR_DECL void jpeg_decoder::release() noexcept
{
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
    if (previous != o_.device) (void)cudaSetDevice(o_.device);
    if (o_.stream) (void)cudaStreamSynchronize(o_.stream);
    for (side& sd : sides_)
        if (sd.in_flight) (void)cudaEventSynchronize(sd.done); // work from before a set_stream
    if (params_) (void)api_.nvjpegDecodeParamsDestroy(std::exchange(params_, nullptr));
    for (int k = 0; k < 2; ++k) {
        if (streams_[k]) (void)api_.nvjpegJpegStreamDestroy(std::exchange(streams_[k], nullptr));
        if (pinned_free_[k]) (void)cudaEventDestroy(std::exchange(pinned_free_[k], nullptr));
    }
    if (hybrid_state_) (void)api_.nvjpegJpegStateDestroy(std::exchange(hybrid_state_, nullptr));
    if (gpu_hybrid_state_) (void)api_.nvjpegJpegStateDestroy(std::exchange(gpu_hybrid_state_, nullptr));
    for (int k = 0; k < 2; ++k)
        if (pinned_[k]) (void)api_.nvjpegBufferPinnedDestroy(std::exchange(pinned_[k], nullptr));
    if (device_buffer_) (void)api_.nvjpegBufferDeviceDestroy(std::exchange(device_buffer_, nullptr));
    if (hybrid_) (void)api_.nvjpegDecoderDestroy(std::exchange(hybrid_, nullptr));
    if (gpu_hybrid_) (void)api_.nvjpegDecoderDestroy(std::exchange(gpu_hybrid_, nullptr));
    if (handle_) (void)api_.nvjpegDestroy(std::exchange(handle_, nullptr));
    for (side& sd : sides_) {
        for (auto p : sd.hw_params) (void)api_.nvjpegDecodeParamsDestroy(p);
        sd.hw_params.clear();
        if (sd.hw_state) (void)api_.nvjpegJpegStateDestroy(std::exchange(sd.hw_state, nullptr));
        if (sd.arena) (void)cudaFree(std::exchange(sd.arena, nullptr));
        if (sd.jobs_device) (void)cudaFree(std::exchange(sd.jobs_device, nullptr));
        if (sd.jobs_host) (void)cudaFreeHost(std::exchange(sd.jobs_host, nullptr));
        if (sd.done) (void)cudaEventDestroy(std::exchange(sd.done, nullptr));
        sd.in_flight = false;
    }
    if (hw_handle_) (void)api_.nvjpegDestroy(std::exchange(hw_handle_, nullptr));
    if (previous >= 0 && previous != o_.device) (void)cudaSetDevice(previous);
    (void)cudaGetLastError();
}

CONVEYOR_DECL bool jpeg_decoder::probe(std::span<const std::byte> bytes, bool strict, std::uint32_t& width, std::uint32_t& height,
                                       bool& hardware) noexcept
{
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    const std::size_t n = bytes.size();
    if (n < 4 || p[0] != 0xFF || p[1] != 0xD8) return false;
    if (strict) {
        std::size_t end = n; // EOI last, but for padding after it (zero bytes, as some writers leave)
        while (end > 2 && p[end - 1] == 0x00) --end;
        if (end < 4 || p[end - 2] != 0xFF || p[end - 1] != 0xD9) return false;
    }
    // Walk the marker segments up to the frame header (SOFn).
    std::size_t at = 2;
    int adobe_transform = -1; // APP14 "Adobe": 0 says the three components are R, G, B, not YCbCr
    while (at + 4 <= n) {
        if (p[at] != 0xFF) return false;
        const unsigned m = p[at + 1];
        if (m == 0xFF) { // fill byte
            ++at;
            continue;
        }
        if (m == 0xD8 || (m >= 0xD0 && m <= 0xD7) || m == 0x01) {
            at += 2;
            continue;
        }
        const std::size_t len = (std::size_t{p[at + 2]} << 8) | p[at + 3];
        if (len < 2 || at + 2 + len > n) return false;
        const bool sof = m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
        if (!sof) {
            if (m == 0xDA || m == 0xD9) return false; // scan or end before any frame header
            if (m == 0xEE && len >= 14 && std::memcmp(p + at + 4, "Adobe", 5) == 0) adobe_transform = p[at + 4 + 11];
            at += 2 + len;
            continue;
        }
        const unsigned char* f = p + at + 4; // precision, height, width, components, then 3 bytes each
        if (len < 8) return false;
        const unsigned precision = f[0], comps = f[5];
        const std::uint32_t h = (std::uint32_t{f[1]} << 8) | f[2], w = (std::uint32_t{f[3]} << 8) | f[4];
        if (precision != 8 || (comps != 1 && comps != 3) || len < 8 + 3 * comps || w == 0 || h == 0) return false;
        // Huffman-coded DCT only: baseline, extended, progressive (the engines: the first two).
        if (m != 0xC0 && m != 0xC1 && m != 0xC2) return false;
        width = w;
        height = h;
        hardware = m != 0xC2;
        if (comps == 1 && f[7] != 0x11) hardware = false; // gray with sampling factors past 1x1: the engines decode it wrong
        if (comps == 3) {
            // Colour as libjpeg-turbo reads it: RGB when Adobe's transform is 0, or, without an
            // Adobe segment, when the component ids are 'R', 'G', 'B'. nvJPEG would convert
            // such data as YCbCr: the CPU decodes it.
            const bool rgb_ids = f[6] == 'R' && f[9] == 'G' && f[12] == 'B';
            if (adobe_transform == 0 || (adobe_transform < 0 && rgb_ids)) return false;
            // The engines' subsamplings: chroma 1x1, luma 1x1 (4:4:4), 2x1 (4:2:2), 2x2 (4:2:0), 1x2 (4:4:0).
            const unsigned y = f[7], cb = f[10], cr = f[13];
            const unsigned yh = y >> 4, yv = y & 15;
            if (cb != 0x11 || cr != 0x11 || !((yh == 1 && yv == 1) || (yh == 2 && yv == 1) || (yh == 2 && yv == 2) || (yh == 1 && yv == 2)))
                hardware = false;
        }
        return true;
    }
    return false;
}

CONVEYOR_DECL void jpeg_decoder::reserve_arena(side& s, std::size_t bytes)
{
    // The side's last call is done (see `decode`): nothing reads the old arena any more.
    if (bytes <= s.arena_bytes) return;
    if (s.arena) {
        (void)cudaFree(s.arena);
        s.arena = nullptr;
        s.arena_bytes = 0;
    }
    const std::size_t want = bytes + bytes / 4;
    detail::check(cudaMalloc(&s.arena, want), ("cudaMalloc of " + std::to_string(want) + " bytes for decoded JPEGs").c_str());
    s.arena_bytes = want;
}

CONVEYOR_DECL bool jpeg_decoder::decode_hybrid(const gpu_job& j, const nvjpeg_api::image& dst)
{
    using nvjpeg_api::status;
    const bool big = std::uint64_t{j.width} * j.height > o_.gpu_huffman_pixels;
    nvjpeg_api::decoder_t dec = big ? gpu_hybrid_ : hybrid_;
    nvjpeg_api::state_t st = big ? gpu_hybrid_state_ : hybrid_state_;
    const unsigned k = turn_;
    turn_ ^= 1u;
    // Pinned buffer k may still feed the copy of the image before last.
    detail::check(cudaEventSynchronize(pinned_free_[k]), "cudaEventSynchronize");
    if (api_.nvjpegStateAttachPinnedBuffer(st, pinned_[k]) != status::success) return false;
    if (api_.nvjpegJpegStreamParse(handle_, jpeg_bytes_of(j.bytes), j.bytes.size(), 0, 0, streams_[k]) != status::success) return false;
    if (api_.nvjpegDecodeParamsSetOutputFormat(params_, format_) != status::success) return false;
    if (api_.nvjpegDecodeParamsSetROI(params_, static_cast<int>(j.crop.left), static_cast<int>(j.crop.top),
                                      static_cast<int>(j.crop.width), static_cast<int>(j.crop.height)) != status::success)
        return false;
    if (api_.nvjpegDecodeJpegHost(handle_, dec, st, params_, streams_[k]) != status::success) return false;
    if (api_.nvjpegDecodeJpegTransferToDevice(handle_, dec, st, streams_[k], o_.stream) != status::success) return false;
    detail::check(cudaEventRecord(pinned_free_[k], o_.stream), "cudaEventRecord");
    nvjpeg_api::image out = dst;
    return api_.nvjpegDecodeJpegDevice(handle_, dec, st, &out, o_.stream) == status::success;
}

CONVEYOR_DECL void jpeg_decoder::decode(std::span<const gpu_job> jobs, const batch_target& target, std::vector<gpu_outcome>& out)
{
    using nvjpeg_api::status;
    device_scope on(o_.device);
    out.assign(jobs.size(), gpu_outcome::refused);
    if (jobs.empty()) return;
    // This call's side: free once the device is past the call before last on it.
    side& sd = sides_[side_turn_];
    side_turn_ ^= 1u;
    if (sd.in_flight) {
        detail::check(cudaEventSynchronize(sd.done), "cudaEventSynchronize (a decoder side)");
        sd.in_flight = false;
    }

    // Each crop's planes in the arena, one after the other.
    std::vector<nvjpeg_api::image> dst(jobs.size());
    std::size_t total = 0;
    for (const gpu_job& j : jobs) total += planes_ * plane_align_up(static_cast<std::size_t>(j.crop.width) * static_cast<std::size_t>(j.crop.height));
    reserve_arena(sd, total);
    {
        auto* base = static_cast<unsigned char*>(sd.arena);
        std::size_t at = 0;
        for (std::size_t i = 0; i < jobs.size(); ++i) {
            const auto w = static_cast<std::size_t>(jobs[i].crop.width), h = static_cast<std::size_t>(jobs[i].crop.height);
            dst[i] = {};
            for (unsigned p = 0; p < planes_; ++p) {
                dst[i].channel[p] = base + at;
                dst[i].pitch[p] = w;
                at += plane_align_up(w * h);
            }
        }
    }

    // The engines take what they can, in one batched call with a region per image.
    std::vector<std::size_t> rest; // jobs for the hybrid decoders
    if (hw_handle_) {
        while (sd.hw_params.size() < jobs.size()) {
            nvjpeg_api::params_t p = nullptr;
            check(api_.nvjpegDecodeParamsCreate(hw_handle_, &p), "nvjpegDecodeParamsCreate (hardware)");
            sd.hw_params.push_back(p);
        }
        std::vector<std::size_t> hw;
        std::vector<const unsigned char*> data;
        std::vector<std::size_t> lengths;
        std::vector<nvjpeg_api::image> hw_dst;
        std::vector<nvjpeg_api::params_t> params;
        for (std::size_t i = 0; i < jobs.size(); ++i) {
            const gpu_job& j = jobs[i];
            nvjpeg_api::params_t p = sd.hw_params[hw.size()];
            const bool ok = j.hardware && api_.nvjpegDecodeParamsSetOutputFormat(p, format_) == status::success &&
                            api_.nvjpegDecodeParamsSetROI(p, static_cast<int>(j.crop.left), static_cast<int>(j.crop.top),
                                                          static_cast<int>(j.crop.width), static_cast<int>(j.crop.height)) ==
                                status::success;
            if (!ok) {
                rest.push_back(i);
                continue;
            }
            hw.push_back(i);
            data.push_back(jpeg_bytes_of(j.bytes));
            lengths.push_back(j.bytes.size());
            hw_dst.push_back(dst[i]);
            params.push_back(p);
        }
        if (!hw.empty()) {
            const status s1 = api_.nvjpegDecodeBatchedInitialize(hw_handle_, sd.hw_state, static_cast<int>(hw.size()), 1, format_);
            const status s2 = s1 == status::success ? api_.nvjpegDecodeBatchedEx(hw_handle_, sd.hw_state, data.data(), lengths.data(),
                                                                                hw_dst.data(), params.data(), o_.stream)
                                                    : s1;
            if (s2 == status::success) {
                for (std::size_t i : hw) out[i] = gpu_outcome::hardware;
            } else {
                // One bad image fails the whole call: each goes through the hybrid decoders,
                // which fail it alone.
                rest.insert(rest.end(), hw.begin(), hw.end());
            }
        }
    } else {
        for (std::size_t i = 0; i < jobs.size(); ++i) rest.push_back(i);
    }
    for (std::size_t i : rest)
        if (decode_hybrid(jobs[i], dst[i])) out[i] = gpu_outcome::hybrid;

    // Resample every decoded crop into its slot, in one launch.
    std::size_t n = 0;
    if (sd.jobs_capacity < jobs.size()) {
        if (sd.jobs_host) (void)cudaFreeHost(std::exchange(sd.jobs_host, nullptr));
        if (sd.jobs_device) (void)cudaFree(std::exchange(sd.jobs_device, nullptr));
        sd.jobs_capacity = 0;
        void* p = nullptr;
        detail::check(cudaHostAlloc(&p, jobs.size() * sizeof(resample_job), cudaHostAllocDefault), "cudaHostAlloc");
        sd.jobs_host = static_cast<resample_job*>(p);
        detail::check(cudaMalloc(&p, jobs.size() * sizeof(resample_job)), "cudaMalloc");
        sd.jobs_device = static_cast<resample_job*>(p);
        sd.jobs_capacity = jobs.size();
    }
    for (std::size_t i = 0; i < jobs.size(); ++i) {
        if (out[i] == gpu_outcome::refused) continue;
        resample_job& r = sd.jobs_host[n++];
        r = {};
        for (unsigned p = 0; p < planes_; ++p) r.planes[p] = dst[i].channel[p];
        r.pitch = static_cast<std::uint32_t>(dst[i].pitch[0]);
        r.width = static_cast<std::uint32_t>(jobs[i].crop.width);
        r.height = static_cast<std::uint32_t>(jobs[i].crop.height);
        r.left = 0;
        r.top = 0;
        r.region_width = r.width;
        r.region_height = r.height;
        r.flip = jobs[i].flip ? 1u : 0u;
        r.slot = jobs[i].slot;
    }
    if (n > 0) {
        detail::check(cudaMemcpyAsync(sd.jobs_device, sd.jobs_host, n * sizeof(resample_job), cudaMemcpyHostToDevice, o_.stream),
                      "cudaMemcpyAsync of the resampling jobs");
        detail::check(launch_resample(sd.jobs_device, static_cast<std::uint32_t>(n), target, o_.stream), "launch_resample");
    }
    // The side is free again once the device is past this point.
    detail::check(cudaEventRecord(sd.done, o_.stream), "cudaEventRecord (a decoder side)");
    sd.in_flight = true;
}

} // namespace conveyor::cuda::detail

#endif
