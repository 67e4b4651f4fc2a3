// conveyor/image/detail/impl/codec_state.ipp — definitions for detail/codec_state.hpp.
#ifndef CONVEYOR_IMAGE_DETAIL_IMPL_CODEC_STATE_IPP
#define CONVEYOR_IMAGE_DETAIL_IMPL_CODEC_STATE_IPP

#include <conveyor/image/detail/codec_state.hpp>

#include <atomic>
#include <string>

namespace conveyor::image::detail {

CONVEYOR_DECL codec_state& thread_state()
{
    thread_local codec_state s;
    return s;
}

CONVEYOR_DECL tjhandle decompressor(std::string_view key, std::string_view where)
{
    auto& s = thread_state();
    if (!s.decompressor) s.decompressor = tjInitDecompress();
    if (!s.decompressor) throw image_error(errc::unsupported, key, where, std::string("TurboJPEG: cannot create a decompressor: ") + tjGetErrorStr2(nullptr));
    return s.decompressor;
}

CONVEYOR_DECL tjhandle transformer(std::string_view key, std::string_view where)
{
    auto& s = thread_state();
    if (!s.transformer) s.transformer = tjInitTransform();
    if (!s.transformer) throw image_error(errc::unsupported, key, where, std::string("TurboJPEG: cannot create a transformer: ") + tjGetErrorStr2(nullptr));
    return s.transformer;
}

/// The errc of a TurboJPEG failure, from its message (TurboJPEG 2.1 gives no finer code).
CONVEYOR_DECL errc classify_tj(std::string_view msg) noexcept
{
    // "Premature end of JPEG file", and "Corrupt JPEG data: premature end of data segment"
    // (the scan data ran out before the image did).
    if (msg.find("remature end") != std::string_view::npos) return errc::truncated;
    if (msg.find("Unsupported") != std::string_view::npos || msg.find("precision") != std::string_view::npos ||
        msg.find("not supported") != std::string_view::npos)
        return errc::unsupported;
    if (msg.find("Maximum supported image dimension") != std::string_view::npos ||
        msg.find("Progressive JPEG image has more than") != std::string_view::npos)
        return errc::too_large;
    return errc::corrupt;
}

/* A TurboJPEG call returned -1: an error, or (lenient mode, no TJFLAG_STOPONWARNING) a
   warning after which the output is complete as the codec recovered it. */
CONVEYOR_DECL void check_tj(tjhandle h, const decode_options& opts, const decode_context& ctx, const char* what)
{
    const std::string msg = tjGetErrorStr2(h);
    if (!opts.strict && tjGetErrorCode(h) == TJERR_WARNING) {
        if (ctx.stats) ctx.stats->warnings.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    throw image_error(classify_tj(msg), ctx.key, ctx.origin, std::string("TurboJPEG ") + what + ": " + msg);
}

} // namespace conveyor::image::detail

#endif
