// Compile-time check of conveyor's nvJPEG declarations against NVIDIA's nvjpeg.h: every
// function pointer type, with our types replaced by the header's, is the header's function
// type; enum values, struct sizes and member offsets agree. Built only where nvjpeg.h is
// (a CUDA toolkit with nvJPEG: GPU hosts); compiling is the test, and the program says so.
#include <conveyor/cuda/detail/nvjpeg_api.hpp>

#include <nvjpeg.h>

#include <cstddef>
#include <cstdio>
#include <type_traits>

namespace api = conveyor::cuda::nvjpeg_api;

// ---- our type → the header's type -------------------------------------------------------
template <class T>
struct real {
    using type = T;
};
template <class T>
using real_t = typename real<T>::type;
template <class T>
struct real<T*> {
    using type = real_t<T>*;
};
template <class T>
struct real<const T> {
    using type = const real_t<T>;
};
template <>
struct real<api::status> {
    using type = nvjpegStatus_t;
};
template <>
struct real<api::backend> {
    using type = nvjpegBackend_t;
};
template <>
struct real<api::output_format> {
    using type = nvjpegOutputFormat_t;
};
template <>
struct real<api::chroma_subsampling> {
    using type = nvjpegChromaSubsampling_t;
};
template <>
struct real<api::library_property> {
    using type = libraryPropertyType;
};
template <>
struct real<api::image> {
    using type = nvjpegImage_t;
};
template <>
struct real<api::dev_allocator> {
    using type = nvjpegDevAllocator_t;
};
template <>
struct real<api::pinned_allocator> {
    using type = nvjpegPinnedAllocator_t;
};
template <class R, class... A>
struct real<R (*)(A...)> {
    using type = real_t<R> (*)(real_t<A>...);
};

// ---- functions ----------------------------------------------------------------------------
#define CHECK_FUNCTION(name, params)                                                                                   \
    static_assert(std::is_same_v<real_t<api::fn::name>, decltype(&::name)>, #name " differs from nvjpeg.h's");
CONVEYOR_NVJPEG_FUNCTIONS(CHECK_FUNCTION)
#undef CHECK_FUNCTION

// ---- handles: the header's own types ------------------------------------------------------
static_assert(std::is_same_v<api::handle_t, nvjpegHandle_t>);
static_assert(std::is_same_v<api::state_t, nvjpegJpegState_t>);
static_assert(std::is_same_v<api::decoder_t, nvjpegJpegDecoder_t>);
static_assert(std::is_same_v<api::stream_t, nvjpegJpegStream_t>);
static_assert(std::is_same_v<api::pinned_buffer_t, nvjpegBufferPinned_t>);
static_assert(std::is_same_v<api::device_buffer_t, nvjpegBufferDevice_t>);
static_assert(std::is_same_v<api::params_t, nvjpegDecodeParams_t>);
static_assert(std::is_same_v<api::cuda_stream_t, cudaStream_t>);

// ---- enums: sizes and every value we name -------------------------------------------------
#define SAME_VALUE(ours, theirs) static_assert(static_cast<int>(ours) == static_cast<int>(theirs), #theirs);
static_assert(sizeof(api::status) == sizeof(nvjpegStatus_t));
static_assert(sizeof(api::backend) == sizeof(nvjpegBackend_t));
static_assert(sizeof(api::output_format) == sizeof(nvjpegOutputFormat_t));
static_assert(sizeof(api::chroma_subsampling) == sizeof(nvjpegChromaSubsampling_t));
static_assert(sizeof(api::library_property) == sizeof(libraryPropertyType));
SAME_VALUE(api::status::success, NVJPEG_STATUS_SUCCESS)
SAME_VALUE(api::status::not_initialized, NVJPEG_STATUS_NOT_INITIALIZED)
SAME_VALUE(api::status::invalid_parameter, NVJPEG_STATUS_INVALID_PARAMETER)
SAME_VALUE(api::status::bad_jpeg, NVJPEG_STATUS_BAD_JPEG)
SAME_VALUE(api::status::jpeg_not_supported, NVJPEG_STATUS_JPEG_NOT_SUPPORTED)
SAME_VALUE(api::status::allocator_failure, NVJPEG_STATUS_ALLOCATOR_FAILURE)
SAME_VALUE(api::status::execution_failed, NVJPEG_STATUS_EXECUTION_FAILED)
SAME_VALUE(api::status::arch_mismatch, NVJPEG_STATUS_ARCH_MISMATCH)
SAME_VALUE(api::status::internal_error, NVJPEG_STATUS_INTERNAL_ERROR)
SAME_VALUE(api::status::implementation_not_supported, NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED)
SAME_VALUE(api::status::incomplete_bitstream, NVJPEG_STATUS_INCOMPLETE_BITSTREAM)
SAME_VALUE(api::backend::default_backend, NVJPEG_BACKEND_DEFAULT)
SAME_VALUE(api::backend::hybrid, NVJPEG_BACKEND_HYBRID)
SAME_VALUE(api::backend::gpu_hybrid, NVJPEG_BACKEND_GPU_HYBRID)
SAME_VALUE(api::backend::hardware, NVJPEG_BACKEND_HARDWARE)
SAME_VALUE(api::output_format::unchanged, NVJPEG_OUTPUT_UNCHANGED)
SAME_VALUE(api::output_format::yuv, NVJPEG_OUTPUT_YUV)
SAME_VALUE(api::output_format::y, NVJPEG_OUTPUT_Y)
SAME_VALUE(api::output_format::rgb, NVJPEG_OUTPUT_RGB)
SAME_VALUE(api::output_format::bgr, NVJPEG_OUTPUT_BGR)
SAME_VALUE(api::output_format::rgbi, NVJPEG_OUTPUT_RGBI)
SAME_VALUE(api::output_format::bgri, NVJPEG_OUTPUT_BGRI)
SAME_VALUE(api::chroma_subsampling::css_444, NVJPEG_CSS_444)
SAME_VALUE(api::chroma_subsampling::css_422, NVJPEG_CSS_422)
SAME_VALUE(api::chroma_subsampling::css_420, NVJPEG_CSS_420)
SAME_VALUE(api::chroma_subsampling::css_440, NVJPEG_CSS_440)
SAME_VALUE(api::chroma_subsampling::css_411, NVJPEG_CSS_411)
SAME_VALUE(api::chroma_subsampling::css_410, NVJPEG_CSS_410)
SAME_VALUE(api::chroma_subsampling::gray, NVJPEG_CSS_GRAY)
SAME_VALUE(api::chroma_subsampling::css_410v, NVJPEG_CSS_410V)
SAME_VALUE(api::chroma_subsampling::unknown, NVJPEG_CSS_UNKNOWN)
SAME_VALUE(api::library_property::major_version, MAJOR_VERSION)
SAME_VALUE(api::library_property::minor_version, MINOR_VERSION)
SAME_VALUE(api::library_property::patch_level, PATCH_LEVEL)
static_assert(api::max_component == NVJPEG_MAX_COMPONENT);
#undef SAME_VALUE

// ---- structs: size and each member's offset and size --------------------------------------
#define SAME_MEMBER(ours, theirs, member)                                                                              \
    static_assert(offsetof(ours, member) == offsetof(theirs, member) &&                                                \
                      sizeof(ours::member) == sizeof(theirs::member),                                                  \
                  #theirs "::" #member);
static_assert(sizeof(api::image) == sizeof(nvjpegImage_t));
SAME_MEMBER(api::image, nvjpegImage_t, channel)
SAME_MEMBER(api::image, nvjpegImage_t, pitch)
static_assert(sizeof(api::dev_allocator) == sizeof(nvjpegDevAllocator_t));
SAME_MEMBER(api::dev_allocator, nvjpegDevAllocator_t, dev_malloc)
SAME_MEMBER(api::dev_allocator, nvjpegDevAllocator_t, dev_free)
static_assert(sizeof(api::pinned_allocator) == sizeof(nvjpegPinnedAllocator_t));
SAME_MEMBER(api::pinned_allocator, nvjpegPinnedAllocator_t, pinned_malloc)
SAME_MEMBER(api::pinned_allocator, nvjpegPinnedAllocator_t, pinned_free)
static_assert(std::is_same_v<decltype(api::image::pitch[0]), decltype(nvjpegImage_t::pitch[0])>);
#undef SAME_MEMBER

int main()
{
#define COUNT(name, params) +1
    constexpr int n = 0 CONVEYOR_NVJPEG_FUNCTIONS(COUNT);
#undef COUNT
    std::printf("nvjpeg_api_check: %d functions, 4 enums, 3 structs and 8 handle types match nvjpeg.h (NVJPEG_VER %d.%d)\n", n,
#if defined(NVJPEG_VER_MAJOR)
                NVJPEG_VER_MAJOR, NVJPEG_VER_MINOR
#else
                0, 0
#endif
    );
    return 0;
}
