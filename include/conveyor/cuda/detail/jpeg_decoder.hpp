// conveyor/cuda/detail/jpeg_decoder.hpp — nvJPEG decoding of a batch's JPEG crops straight
// into their slots of a device batch: the hardware engines in one batched call where they
// take an image, the hybrid decoders (decoupled API) where they do not.
#ifndef CONVEYOR_CUDA_DETAIL_JPEG_DECODER_HPP
#define CONVEYOR_CUDA_DETAIL_JPEG_DECODER_HPP

#include <conveyor/cuda/detail/kernels.hpp>
#include <conveyor/cuda/detail/nvjpeg_api.hpp>
#include <conveyor/detail/config.hpp>
#include <conveyor/image/decode.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

struct CUstream_st;
struct CUevent_st;

namespace conveyor::cuda::detail {

/// How a JPEG was (or was not) decoded on the GPU.
enum class gpu_outcome : std::uint8_t {
    hardware, ///< by the NVJPG engines (batched)
    hybrid,   ///< by nvJPEG's hybrid or GPU-hybrid decoder
    refused,  ///< nvJPEG would not or could not: the caller decodes it on the CPU
};

/// One JPEG to decode: its bytes, what its header said, the crop and flip the CPU path
/// would take for it, and its slot in the batch.
struct gpu_job {
    std::span<const std::byte> bytes;
    std::uint32_t width = 0, height = 0;
    bool hardware = true; ///< the engines take it (see `jpeg_decoder::probe`)
    image::crop_rect crop;
    bool flip = false;
    std::uint32_t slot = 0;
};

/// Settings of a `jpeg_decoder`.
struct jpeg_decoder_options {
    int device = 0;
    CUstream_st* stream = nullptr;   ///< where the device work goes (the batch ring's stream)
    bool hardware = true;            ///< use the NVJPG engines where the GPU has them
    image::pixel_format format = image::pixel_format::rgb; ///< gray: one plane (nvJPEG's Y); else R, G, B planes
    std::size_t max_batch = 256;     ///< images per call, at most (for pre-allocation)
    std::uint32_t preallocate_width = 640, preallocate_height = 480;
    /// Images of more pixels than this that the engines refuse go to the GPU-hybrid decoder
    /// (Huffman decoding on the GPU), smaller ones to the hybrid one (Huffman on the CPU).
    std::uint64_t gpu_huffman_pixels = 1'000'000;
};

/** The GPU half of the GPU decode stage, for one device and stream: nvJPEG's handles,
    states, buffers, the decoded crops' arena and the resampling job table. Not
    thread-safe: one thread (the stage's GPU thread) uses it. Throws `conveyor::error` if
    nvJPEG cannot be set up on the device. */
class jpeg_decoder {
public:
    CONVEYOR_DECL jpeg_decoder(const nvjpeg_api::functions& api, const jpeg_decoder_options& o);
    CONVEYOR_DECL ~jpeg_decoder();
    jpeg_decoder(const jpeg_decoder&) = delete;
    jpeg_decoder& operator=(const jpeg_decoder&) = delete;

    /// Whether the NVJPG engines are in use, and how many there are (engines x cores).
    bool hardware() const noexcept { return hw_handle_ != nullptr; }
    unsigned engines() const noexcept { return engines_; }
    unsigned cores_per_engine() const noexcept { return cores_; }

    /** What the header of a JPEG says, read here (its SOF segment): false if it is not one
        the GPU path takes (not 1 or 3 components, 12-bit, lossless, arithmetic coded), or,
        when `strict`, if the data does not end with an EOI marker (a truncated file: the
        engines would decode what is there without a word, where the CPU path fails it).
        Those go to the CPU, which decodes them or names what is wrong. `hardware` says
        whether the engines take it (baseline or extended Huffman; YCbCr with chroma 1x1
        and luma 1x1, 2x1, 2x2 or 1x2, or gray at 1x1); else nvJPEG's hybrid decoders get
        it. */
    CONVEYOR_DECL static bool probe(std::span<const std::byte> bytes, bool strict, std::uint32_t& width, std::uint32_t& height,
                                    bool& hardware) noexcept;

    /// The stream the device work goes on from now (each run of the stage has its own).
    void set_stream(CUstream_st* s) noexcept { o_.stream = s; }

    /** Enqueues the decoding of `jobs` into `target`'s slots on the stream and returns
        without waiting for the device: `out[i]` says how job i went (known on the host
        once the call returns); refused ones leave their slot untouched. The decoder has
        two sides (the engines' state, the crops' arena, the job table), taken in turn: a
        call waits only for the device to finish the call before last, so the host work of
        one batch overlaps the device work of the one before. The jobs' bytes and the
        target must stay valid until the stream is past this call. Throws
        `conveyor::error` when CUDA itself fails. */
    CONVEYOR_DECL void decode(std::span<const gpu_job> jobs, const batch_target& target, std::vector<gpu_outcome>& out);

private:
    /// What one call in flight owns on the device; two are used in turn.
    struct side {
        nvjpeg_api::state_t hw_state = nullptr;         // the engines' batched state
        std::vector<nvjpeg_api::params_t> hw_params;    // one per image (its region)
        void* arena = nullptr;                          // decoded crops (planar)
        std::size_t arena_bytes = 0;
        resample_job* jobs_host = nullptr;              // the resampler's job table (pinned)
        resample_job* jobs_device = nullptr;            // and its device copy
        std::size_t jobs_capacity = 0;
        CUevent_st* done = nullptr;                     // recorded after the side's last call
        bool in_flight = false;
    };

    CONVEYOR_DECL void release() noexcept;
    CONVEYOR_DECL static void reserve_arena(side& s, std::size_t bytes);
    CONVEYOR_DECL bool decode_hybrid(const gpu_job& j, const nvjpeg_api::image& dst);
    CONVEYOR_DECL void check(nvjpeg_api::status s, const char* what) const;

    const nvjpeg_api::functions& api_;
    jpeg_decoder_options o_;
    nvjpeg_api::output_format format_ = nvjpeg_api::output_format::rgb;
    unsigned planes_ = 3;
    // The engines (batched).
    nvjpeg_api::handle_t hw_handle_ = nullptr;
    unsigned engines_ = 0, cores_ = 0;
    // The hybrid decoders (decoupled API), two pinned buffers and parse streams taken in turn.
    nvjpeg_api::handle_t handle_ = nullptr;
    nvjpeg_api::decoder_t hybrid_ = nullptr, gpu_hybrid_ = nullptr;
    nvjpeg_api::state_t hybrid_state_ = nullptr, gpu_hybrid_state_ = nullptr;
    nvjpeg_api::pinned_buffer_t pinned_[2] = {};
    nvjpeg_api::device_buffer_t device_buffer_ = nullptr;
    nvjpeg_api::stream_t streams_[2] = {};
    CUevent_st* pinned_free_[2] = {};
    nvjpeg_api::params_t params_ = nullptr;
    unsigned turn_ = 0;
    side sides_[2];
    unsigned side_turn_ = 0;
};

} // namespace conveyor::cuda::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/cuda/impl/jpeg_decoder.ipp>
#endif

#endif
