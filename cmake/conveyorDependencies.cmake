# Finds conveyor's dependencies and gathers them into the INTERFACE target conveyor::deps.
# Used both by the source tree and by the installed conveyorConfig.cmake, so a consumer
# that calls find_package(conveyor) sees exactly what the build tree saw.
include_guard(GLOBAL)
include(CMakeFindDependencyMacro)

find_package(Threads REQUIRED)
find_package(Boost 1.81 REQUIRED CONFIG COMPONENTS json url)
find_package(OpenSSL 3 REQUIRED)
find_package(ZLIB REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(CONVEYOR_URING REQUIRED IMPORTED_TARGET GLOBAL liburing)
pkg_check_modules(CONVEYOR_IMAGE REQUIRED IMPORTED_TARGET GLOBAL libturbojpeg libjpeg spng)
pkg_check_modules(CONVEYOR_ISAL REQUIRED IMPORTED_TARGET GLOBAL libisal) # Debian libisal-dev: CRC-32C (core/checksum.hpp)
find_package(dlpack REQUIRED CONFIG) # Debian libdlpack-dev (header only): image/dlpack.hpp

if(NOT TARGET conveyor::deps)
  # The imported target itself carries the namespaced name (no alias), so that install(EXPORT)
  # writes `conveyor::deps` into conveyor::conveyor's link interface; conveyorConfig.cmake
  # recreates it by including this file before the exported targets.
  add_library(conveyor::deps INTERFACE IMPORTED GLOBAL)
  target_link_libraries(conveyor::deps INTERFACE Boost::headers Boost::json Boost::url OpenSSL::SSL OpenSSL::Crypto ZLIB::ZLIB Threads::Threads PkgConfig::CONVEYOR_URING PkgConfig::CONVEYOR_IMAGE PkgConfig::CONVEYOR_ISAL dlpack::dlpack)
  # Asio: no deprecated interfaces; io_uring stays ours (Asio's own backend is not used).
  target_compile_definitions(conveyor::deps INTERFACE BOOST_ASIO_NO_DEPRECATED)
endif()

if(NOT DEFINED CONVEYOR_WITH_CUDA)
  set(CONVEYOR_WITH_CUDA AUTO)
endif()
# AUTO: on when FindCUDAToolkit finds the toolkit (nvcc on PATH, CUDAToolkit_ROOT, CUDA_PATH,
# or the /usr/local/cuda link); ON: required; OFF: not looked for.
if(NOT CONVEYOR_WITH_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    target_link_libraries(conveyor::deps INTERFACE CUDA::cudart)
    target_compile_definitions(conveyor::deps INTERFACE CONVEYOR_WITH_CUDA=1)
    set(CONVEYOR_HAS_CUDA ON)
  elseif(CONVEYOR_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "conveyor: CONVEYOR_WITH_CUDA=ON but the CUDA toolkit was not found")
  endif()
endif()

# WebP and AVIF in the image decoder (image/detail/webp.hpp, avif.hpp), each AUTO (on where
# pkg-config finds it), ON (required) or OFF. Debian: libwebp-dev (libwebp, libwebpdemux for
# animations) and libavif-dev (with an AV1 decoder: libdav1d). Without one, the decoder still
# tells the format by its bytes and refuses it with errc::unsupported, saying the build lacks it.
foreach(_conveyor_codec WEBP AVIF)
  if(NOT DEFINED CONVEYOR_WITH_${_conveyor_codec})
    set(CONVEYOR_WITH_${_conveyor_codec} AUTO)
  endif()
endforeach()
set(_conveyor_codec_modules_WEBP libwebp libwebpdemux)
set(_conveyor_codec_modules_AVIF libavif)
foreach(_conveyor_codec WEBP AVIF)
  set(CONVEYOR_HAS_${_conveyor_codec} OFF)
  if(NOT CONVEYOR_WITH_${_conveyor_codec} STREQUAL "OFF")
    pkg_check_modules(CONVEYOR_${_conveyor_codec} QUIET IMPORTED_TARGET GLOBAL ${_conveyor_codec_modules_${_conveyor_codec}})
    if(CONVEYOR_${_conveyor_codec}_FOUND)
      target_link_libraries(conveyor::deps INTERFACE PkgConfig::CONVEYOR_${_conveyor_codec})
      target_compile_definitions(conveyor::deps INTERFACE CONVEYOR_WITH_${_conveyor_codec}=1)
      set(CONVEYOR_HAS_${_conveyor_codec} ON)
    elseif(CONVEYOR_WITH_${_conveyor_codec} STREQUAL "ON")
      message(FATAL_ERROR "conveyor: CONVEYOR_WITH_${_conveyor_codec}=ON but pkg-config finds no "
                          "${_conveyor_codec_modules_${_conveyor_codec}} (Debian: scripts/install-deps.sh)")
    else()
      message(STATUS "conveyor: ${_conveyor_codec_modules_${_conveyor_codec}} not found: the image decoder refuses ${_conveyor_codec} images")
    endif()
  endif()
endforeach()
