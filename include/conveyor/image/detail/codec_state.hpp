// conveyor/image/detail/codec_state.hpp — each decoding thread's codec handles and scratch memory,
// and how TurboJPEG's and libjpeg's failures read as `image::errc`.
#ifndef CONVEYOR_IMAGE_DETAIL_CODEC_STATE_HPP
#define CONVEYOR_IMAGE_DETAIL_CODEC_STATE_HPP

#include <conveyor/detail/config.hpp>
#include <conveyor/image/decode.hpp>
#include <conveyor/image/error.hpp>

#include <turbojpeg.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

namespace conveyor::image::detail {

/// Scratch memory that grows and is not zeroed (decoded pixels overwrite it whole).
struct scratch {
    std::unique_ptr<std::uint8_t[]> data;
    std::size_t capacity = 0;
    std::uint8_t* get(std::size_t n)
    {
        if (n > capacity) {
            data.reset(new std::uint8_t[n]);
            capacity = n;
        }
        return data.get();
    }
    // A huge image once must not pin its memory in every pool thread for good.
    void trim() noexcept
    {
        if (capacity > (std::size_t{64} << 20)) {
            data.reset();
            capacity = 0;
        }
    }
};

/// One TurboJPEG decompressor and transformer per thread (a handle is not thread-safe).
struct codec_state {
    tjhandle decompressor = nullptr;
    tjhandle transformer = nullptr;
    scratch pixels;   // a whole (scaled) decode, or a crop's rectangle, before the resize
    codec_state() = default;
    codec_state(const codec_state&) = delete;
    codec_state& operator=(const codec_state&) = delete;
    ~codec_state()
    {
        if (decompressor) tjDestroy(decompressor);
        if (transformer) tjDestroy(transformer);
    }
};

/// This thread's codec state.
CONVEYOR_DECL codec_state& thread_state();
/// This thread's TurboJPEG decompressor, made on first use; throws if it cannot be made.
CONVEYOR_DECL tjhandle decompressor(std::string_view key, std::string_view where);
/// This thread's TurboJPEG transformer (lossless crops), made on first use.
CONVEYOR_DECL tjhandle transformer(std::string_view key, std::string_view where);
/// The errc of a TurboJPEG (or libjpeg) failure, from its message (TurboJPEG 2.1 gives no finer code).
CONVEYOR_DECL errc classify_tj(std::string_view msg) noexcept;
/// A TurboJPEG call on `h` returned -1: throws its error, or counts a warning in lenient mode.
CONVEYOR_DECL void check_tj(tjhandle h, const decode_options& opts, const decode_context& ctx, const char* what);

} // namespace conveyor::image::detail

#if CONVEYOR_HEADER_ONLY
#include <conveyor/image/detail/impl/codec_state.ipp>
#endif

#endif
