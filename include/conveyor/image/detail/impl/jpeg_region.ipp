// conveyor/image/detail/impl/jpeg_region.ipp — definitions for detail/jpeg.hpp: libjpeg's
// region decode (only the rows and iMCU columns a crop needs), with libjpeg's longjmp errors.
#ifndef CONVEYOR_IMAGE_DETAIL_IMPL_JPEG_REGION_IPP
#define CONVEYOR_IMAGE_DETAIL_IMPL_JPEG_REGION_IPP

#include <conveyor/image/detail/jpeg.hpp>
#include <conveyor/image/detail/codec_state.hpp>
#include <conveyor/image/detail/resample.hpp>

#include <csetjmp>
#include <cstdio> // before jpeglib.h, which uses FILE and size_t
#include <jpeglib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <new>
#include <string>

namespace conveyor::image::detail {

/* ---- JPEG, region only (libjpeg API) ------------------------------------------------------- */

/* libjpeg reports errors by calling error_exit, which must not return: it longjmps back
   to the setjmp in region_decode. Warnings come to emit_message(-1), which in strict mode
   longjmps too (as TurboJPEG's TJFLAG_STOPONWARNING does). */
struct jpeg_errors {
    jpeg_error_mgr pub;
    std::jmp_buf jump;
    bool strict = true;
    int warnings = 0;
    bool warning_stop = false;
    char message[JMSG_LENGTH_MAX] = {};
};

extern "C" inline void conveyor_jpeg_error_exit(j_common_ptr cinfo)
{
    auto* e = reinterpret_cast<jpeg_errors*>(cinfo->err);
    (*cinfo->err->format_message)(cinfo, e->message);
    std::longjmp(e->jump, 1);
}

extern "C" inline void conveyor_jpeg_emit_message(j_common_ptr cinfo, int level)
{
    if (level >= 0) return; // trace messages
    auto* e = reinterpret_cast<jpeg_errors*>(cinfo->err);
    ++e->warnings;
    if (e->strict) {
        (*cinfo->err->format_message)(cinfo, e->message);
        e->warning_stop = true;
        std::longjmp(e->jump, 1);
    }
}

extern "C" inline void conveyor_jpeg_output_message(j_common_ptr) {}

/// The most scans of a progressive JPEG that are decoded (TurboJPEG's TJFLAG_LIMITSCANS).
inline constexpr int max_jpeg_scans = 500;

/* A progressive JPEG may repeat scans without end, each one a pass over the whole image's
   coefficients: past `max_jpeg_scans` it is refused, as TurboJPEG's TJFLAG_LIMITSCANS
   does (with the same message). */
extern "C" inline void conveyor_jpeg_progress(j_common_ptr cinfo)
{
    if (!cinfo->is_decompressor) return;
    const auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
    if (d->input_scan_number <= max_jpeg_scans) return;
    auto* e = reinterpret_cast<jpeg_errors*>(cinfo->err);
    std::snprintf(e->message, sizeof e->message, "Progressive JPEG image has more than %d scans", max_jpeg_scans);
    std::longjmp(e->jump, 1);
}

/// A libjpeg decompressor per thread, reused image after image (jpeg_abort_decompress).
struct jpeg_state {
    jpeg_decompress_struct cinfo{};
    jpeg_errors err;
    jpeg_progress_mgr progress{};
    bool ready = false;
    jpeg_state() = default;
    jpeg_state(const jpeg_state&) = delete;
    jpeg_state& operator=(const jpeg_state&) = delete;
    ~jpeg_state()
    {
        if (ready) jpeg_destroy_decompress(&cinfo);
    }
};

inline jpeg_state& thread_jpeg()
{
    thread_local jpeg_state s;
    if (!s.ready) {
        s.cinfo.err = jpeg_std_error(&s.err.pub);
        s.err.pub.error_exit = conveyor_jpeg_error_exit;
        s.err.pub.emit_message = conveyor_jpeg_emit_message;
        s.err.pub.output_message = conveyor_jpeg_output_message;
        s.progress.progress_monitor = conveyor_jpeg_progress;
        if (setjmp(s.err.jump) != 0) throw std::bad_alloc(); // jpeg_create_decompress ran out of memory
        jpeg_create_decompress(&s.cinfo);
        s.cinfo.progress = &s.progress;
        s.ready = true;
    }
    return s;
}

/// What region_decode produced: the rows and columns it decoded, in scaled pixels.
struct region_result {
    unsigned x = 0, y = 0, width = 0, height = 0; // of the scaled image
    int failed = 0;                                // 0, or 1 with the message in the error manager
};

/* Decodes rows [y0, y1) and columns covering [x0, x1) of `jpeg` scaled by 1/denom into the
   scratch buffer. Only plain data live in this frame: a longjmp out of libjpeg skips no
   destructor. */
inline region_result region_decode(jpeg_state& js, const std::uint8_t* data, std::size_t size, unsigned denom, J_COLOR_SPACE cs,
                                   unsigned channels, unsigned x0, unsigned x1, unsigned y0, unsigned y1, scratch& out,
                                   std::uint8_t** pixels)
{
    region_result r;
    auto& cinfo = js.cinfo;
    if (setjmp(js.err.jump) != 0) {
        jpeg_abort_decompress(&cinfo);
        r.failed = 1;
        return r;
    }
    jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
    jpeg_read_header(&cinfo, TRUE);
    cinfo.out_color_space = cs;
    cinfo.scale_num = 1;
    cinfo.scale_denom = denom;
    cinfo.dct_method = JDCT_ISLOW; // TurboJPEG's default, so both paths give the same pixels
    cinfo.do_fancy_upsampling = TRUE;
    jpeg_start_decompress(&cinfo);
    x1 = std::min<unsigned>(x1, cinfo.output_width);
    y1 = std::min<unsigned>(y1, cinfo.output_height);
    JDIMENSION xoff = x0, width = x1 - x0;
    if (width < cinfo.output_width) jpeg_crop_scanline(&cinfo, &xoff, &width); // widened to iMCU columns
    if (y0 > 0) jpeg_skip_scanlines(&cinfo, y0);
    const std::size_t row = std::size_t{width} * channels;
    std::uint8_t* px = out.get(row * (y1 - y0));
    *pixels = px;
    while (cinfo.output_scanline < y1) {
        JSAMPROW rows[1] = {px + std::size_t{cinfo.output_scanline - y0} * row};
        jpeg_read_scanlines(&cinfo, rows, 1);
    }
    jpeg_abort_decompress(&cinfo); // the rows below the crop are not needed
    r = {xoff, y0, width, y1 - y0, 0};
    return r;
}

CONVEYOR_DECL void jpeg_decode_cropped(std::span<const std::uint8_t> b, const plan& p, const decode_options& opts, const decode_context& ctx,
                                tjscalingfactor f, std::uint8_t* dst)
{
    auto& js = thread_jpeg();
    js.err.strict = opts.strict;
    js.err.warnings = 0;
    js.err.warning_stop = false;
    const double s = double(f.num) / f.denom;
    // A margin around the crop: libjpeg's fancy (triangle) chroma upsampling reads one
    // chroma sample beyond each edge of what it decodes, which at a region's edge is
    // replicated, not read; with 4 pixels to spare the crop's own pixels are exact.
    constexpr unsigned margin = 4;
    const auto fx0 = static_cast<unsigned>(std::floor(p.crop.left * s)), fy0 = static_cast<unsigned>(std::floor(p.crop.top * s));
    const unsigned x0 = fx0 > margin ? fx0 - margin : 0, y0 = fy0 > margin ? fy0 - margin : 0;
    const auto x1 = static_cast<unsigned>(std::ceil((p.crop.left + p.crop.width) * s)) + margin;
    const auto y1 = static_cast<unsigned>(std::ceil((p.crop.top + p.crop.height) * s)) + margin;
    const J_COLOR_SPACE cs = opts.format == pixel_format::gray ? JCS_GRAYSCALE : opts.format == pixel_format::bgr ? JCS_EXT_BGR : JCS_EXT_RGB;
    auto& st = thread_state();
    std::uint8_t* px = nullptr;
    const auto r = region_decode(js, b.data(), b.size(), static_cast<unsigned>(f.denom), cs, p.channels, x0, x1, y0, y1, st.pixels, &px);
    if (r.failed) {
        const std::string msg = js.err.message;
        throw image_error(js.err.warning_stop ? (classify_tj(msg) == errc::truncated ? errc::truncated : errc::corrupt) : classify_tj(msg),
                          ctx.key, ctx.origin, "libjpeg: " + msg);
    }
    if (js.err.warnings && ctx.stats) ctx.stats->warnings.fetch_add(1, std::memory_order_relaxed);
    resample(px, r.width, r.height, p.channels,
             {p.crop.left * s - r.x, p.crop.top * s - r.y, p.crop.width * s, p.crop.height * s}, dst, p.out, ctx);
    st.pixels.trim();
}

} // namespace conveyor::image::detail

#endif
