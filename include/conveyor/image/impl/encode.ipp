// conveyor/image/impl/encode.ipp — JPEG encoding through TurboJPEG.
#ifndef CONVEYOR_IMAGE_IMPL_ENCODE_IPP
#define CONVEYOR_IMAGE_IMPL_ENCODE_IPP

#include <conveyor/core/error.hpp>
#include <conveyor/image/encode.hpp>
#include <conveyor/image/error.hpp>

#include <turbojpeg.h>

#include <cstring>
#include <string>

namespace conveyor::image {

namespace detail {

/// This thread's TurboJPEG compressor, made on first use and destroyed with the thread.
inline tjhandle compressor()
{
    struct handle {
        tjhandle h = nullptr;
        ~handle()
        {
            if (h) tjDestroy(h);
        }
    };
    thread_local handle t;
    if (!t.h) t.h = tjInitCompress();
    return t.h;
}

[[noreturn]] inline void encode_failed(errc code, std::string detail)
{
    throw conveyor::error(make_error_code(code), {.stage = "encode_jpeg", .detail = std::move(detail)});
}

} // namespace detail

CONVEYOR_DECL buffer encode_jpeg(std::span<const std::uint8_t> pixels, std::uint32_t width, std::uint32_t height,
                                 pixel_format format, const jpeg_encode_options& o, buffer_pool pool)
{
    const std::size_t want = std::size_t{width} * height * channels_of(format);
    if (width == 0 || height == 0 || pixels.size() != want)
        detail::encode_failed(errc::bad_options, "a " + std::to_string(width) + "x" + std::to_string(height) + " image needs " +
                                                     std::to_string(want) + " bytes of pixels, got " + std::to_string(pixels.size()));
    if (o.quality < 1 || o.quality > 100)
        detail::encode_failed(errc::bad_options, "JPEG quality must be 1 to 100, got " + std::to_string(o.quality));
    tjhandle h = detail::compressor();
    if (!h) detail::encode_failed(errc::corrupt, "tjInitCompress failed");
    const int pf = format == pixel_format::rgb ? TJPF_RGB : format == pixel_format::bgr ? TJPF_BGR : TJPF_GRAY;
    const int sub = format == pixel_format::gray ? TJSAMP_GRAY : o.subsample ? TJSAMP_420 : TJSAMP_444;
    // The worst case TurboJPEG allows for, so that it never reallocates our buffer.
    const unsigned long bound = tjBufSize(static_cast<int>(width), static_cast<int>(height), sub);
    buffer out = pool.acquire(bound);
    auto* dst = reinterpret_cast<unsigned char*>(out.data());
    unsigned long size = bound;
    if (tjCompress2(h, pixels.data(), static_cast<int>(width), 0, static_cast<int>(height), pf, &dst, &size, sub, o.quality,
                    TJFLAG_NOREALLOC) != 0)
        detail::encode_failed(errc::corrupt, std::string("TurboJPEG could not encode: ") + tjGetErrorStr2(h));
    out.resize(size);
    return out;
}

} // namespace conveyor::image

#endif
