// conveyor/cuda/detail/nvjpeg_api.hpp — our own declarations of the part of nvJPEG's C API
// that the GPU decoder calls, written from NVIDIA's nvJPEG documentation, so that conveyor
// builds without nvjpeg.h and loads libnvjpeg at run time (see cuda/nvjpeg.hpp).
//
// The rule: every type here is the ABI twin of the header's (same size, members, values),
// and every function pointer type turns into the type of the header's function when each of
// our types is replaced by the header's. tests/cuda/nvjpeg_api_check.cpp checks both at
// compile time on a machine that has the real nvjpeg.h. The opaque handles are declared with
// the header's own struct tags, so those are the very same types.
#ifndef CONVEYOR_CUDA_DETAIL_NVJPEG_API_HPP
#define CONVEYOR_CUDA_DETAIL_NVJPEG_API_HPP

#include <cstddef>

struct CUstream_st;
struct nvjpegHandle;
struct nvjpegJpegState;
struct nvjpegJpegDecoder;
struct nvjpegJpegStream;
struct nvjpegBufferPinned;
struct nvjpegBufferDevice;
struct nvjpegDecodeParams;

namespace conveyor::cuda::nvjpeg_api {

/// nvjpegStatus_t.
enum class status : int {
    success = 0,
    not_initialized = 1,
    invalid_parameter = 2,
    bad_jpeg = 3,
    jpeg_not_supported = 4,
    allocator_failure = 5,
    execution_failed = 6,
    arch_mismatch = 7,
    internal_error = 8,
    implementation_not_supported = 9,
    incomplete_bitstream = 10,
};

/// nvjpegBackend_t.
enum class backend : int {
    default_backend = 0,
    hybrid = 1,          ///< Huffman decode on the CPU, the rest on the GPU
    gpu_hybrid = 2,      ///< Huffman decode on the GPU too (large images)
    hardware = 3,        ///< the NVJPG engines (A100, H100, H200), batched API only
};

/// nvjpegOutputFormat_t.
enum class output_format : int {
    unchanged = 0,
    yuv = 1,
    y = 2,
    rgb = 3,  ///< planar: channel[0..2]
    bgr = 4,
    rgbi = 5, ///< interleaved: channel[0]
    bgri = 6,
};

/// nvjpegChromaSubsampling_t.
enum class chroma_subsampling : int {
    css_444 = 0,
    css_422 = 1,
    css_420 = 2,
    css_440 = 3,
    css_411 = 4,
    css_410 = 5,
    gray = 6,
    css_410v = 7,
    unknown = -1,
};

/// libraryPropertyType (library_types.h), for nvjpegGetProperty.
enum class library_property : int { major_version = 0, minor_version = 1, patch_level = 2 };

inline constexpr int max_component = 4; ///< NVJPEG_MAX_COMPONENT

/// nvjpegImage_t: where a decode writes, one pointer and pitch per plane.
struct image {
    unsigned char* channel[max_component];
    std::size_t pitch[max_component];
};

/// nvjpegDevAllocator_t and nvjpegPinnedAllocator_t (we pass null: cudaMalloc and cudaHostAlloc).
struct dev_allocator {
    int (*dev_malloc)(void**, std::size_t);
    int (*dev_free)(void*);
};
struct pinned_allocator {
    int (*pinned_malloc)(void**, std::size_t, unsigned int);
    int (*pinned_free)(void*);
};

using handle_t = ::nvjpegHandle*;
using state_t = ::nvjpegJpegState*;
using decoder_t = ::nvjpegJpegDecoder*;
using stream_t = ::nvjpegJpegStream*;
using pinned_buffer_t = ::nvjpegBufferPinned*;
using device_buffer_t = ::nvjpegBufferDevice*;
using params_t = ::nvjpegDecodeParams*;
using cuda_stream_t = ::CUstream_st*;

/* X(name, parameter list): every function the decoder uses, all returning `status`. The
   loader resolves each by name; the check compares each with the header's. */
#define CONVEYOR_NVJPEG_FUNCTIONS(X)                                                                                         \
    X(nvjpegGetProperty, (library_property, int*))                                                                           \
    X(nvjpegCreateEx, (backend, dev_allocator*, pinned_allocator*, unsigned int, handle_t*))                                 \
    X(nvjpegDestroy, (handle_t))                                                                                             \
    X(nvjpegGetHardwareDecoderInfo, (handle_t, unsigned int*, unsigned int*))                                                \
    X(nvjpegJpegStateCreate, (handle_t, state_t*))                                                                           \
    X(nvjpegJpegStateDestroy, (state_t))                                                                                     \
    X(nvjpegGetImageInfo, (handle_t, const unsigned char*, std::size_t, int*, chroma_subsampling*, int*, int*))              \
    X(nvjpegDecodeBatchedInitialize, (handle_t, state_t, int, int, output_format))                                          \
    X(nvjpegDecodeBatched, (handle_t, state_t, const unsigned char* const*, const std::size_t*, image*, cuda_stream_t))      \
    X(nvjpegDecodeBatchedEx,                                                                                                 \
      (handle_t, state_t, const unsigned char* const*, const std::size_t*, image*, params_t*, cuda_stream_t))                \
    X(nvjpegDecodeBatchedSupportedEx, (handle_t, stream_t, params_t, int*))                                                  \
    X(nvjpegDecodeBatchedPreAllocate, (handle_t, state_t, int, int, int, chroma_subsampling, output_format))                 \
    X(nvjpegJpegStreamCreate, (handle_t, stream_t*))                                                                         \
    X(nvjpegJpegStreamDestroy, (stream_t))                                                                                   \
    X(nvjpegJpegStreamParse, (handle_t, const unsigned char*, std::size_t, int, int, stream_t))                              \
    X(nvjpegJpegStreamParseHeader, (handle_t, const unsigned char*, std::size_t, stream_t))                                  \
    X(nvjpegDecodeParamsCreate, (handle_t, params_t*))                                                                       \
    X(nvjpegDecodeParamsDestroy, (params_t))                                                                                 \
    X(nvjpegDecodeParamsSetOutputFormat, (params_t, output_format))                                                          \
    X(nvjpegDecodeParamsSetROI, (params_t, int, int, int, int))                                                              \
    X(nvjpegDecoderCreate, (handle_t, backend, decoder_t*))                                                                  \
    X(nvjpegDecoderDestroy, (decoder_t))                                                                                     \
    X(nvjpegDecoderStateCreate, (handle_t, decoder_t, state_t*))                                                             \
    X(nvjpegBufferPinnedCreate, (handle_t, pinned_allocator*, pinned_buffer_t*))                                             \
    X(nvjpegBufferPinnedDestroy, (pinned_buffer_t))                                                                          \
    X(nvjpegBufferDeviceCreate, (handle_t, dev_allocator*, device_buffer_t*))                                                \
    X(nvjpegBufferDeviceDestroy, (device_buffer_t))                                                                          \
    X(nvjpegStateAttachPinnedBuffer, (state_t, pinned_buffer_t))                                                             \
    X(nvjpegStateAttachDeviceBuffer, (state_t, device_buffer_t))                                                             \
    X(nvjpegDecodeJpegHost, (handle_t, decoder_t, state_t, params_t, stream_t))                                              \
    X(nvjpegDecodeJpegTransferToDevice, (handle_t, decoder_t, state_t, stream_t, cuda_stream_t))                             \
    X(nvjpegDecodeJpegDevice, (handle_t, decoder_t, state_t, image*, cuda_stream_t))

/// One pointer type per function: `fn::nvjpegCreateEx` and so on.
namespace fn {
#define CONVEYOR_NVJPEG_POINTER_TYPE(name, params) using name = status(*) params;
CONVEYOR_NVJPEG_FUNCTIONS(CONVEYOR_NVJPEG_POINTER_TYPE)
#undef CONVEYOR_NVJPEG_POINTER_TYPE
} // namespace fn

/// The resolved functions of one loaded library.
struct functions {
#define CONVEYOR_NVJPEG_MEMBER(name, params) fn::name name = nullptr;
    CONVEYOR_NVJPEG_FUNCTIONS(CONVEYOR_NVJPEG_MEMBER)
#undef CONVEYOR_NVJPEG_MEMBER
};

/// The name of status `s` as the documentation writes it ("NVJPEG_STATUS_BAD_JPEG").
constexpr const char* name_of(status s) noexcept
{
    switch (s) {
    case status::success: return "NVJPEG_STATUS_SUCCESS";
    case status::not_initialized: return "NVJPEG_STATUS_NOT_INITIALIZED";
    case status::invalid_parameter: return "NVJPEG_STATUS_INVALID_PARAMETER";
    case status::bad_jpeg: return "NVJPEG_STATUS_BAD_JPEG";
    case status::jpeg_not_supported: return "NVJPEG_STATUS_JPEG_NOT_SUPPORTED";
    case status::allocator_failure: return "NVJPEG_STATUS_ALLOCATOR_FAILURE";
    case status::execution_failed: return "NVJPEG_STATUS_EXECUTION_FAILED";
    case status::arch_mismatch: return "NVJPEG_STATUS_ARCH_MISMATCH";
    case status::internal_error: return "NVJPEG_STATUS_INTERNAL_ERROR";
    case status::implementation_not_supported: return "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED";
    case status::incomplete_bitstream: return "NVJPEG_STATUS_INCOMPLETE_BITSTREAM";
    }
    return "an unknown nvJPEG status";
}

} // namespace conveyor::cuda::nvjpeg_api

#endif
