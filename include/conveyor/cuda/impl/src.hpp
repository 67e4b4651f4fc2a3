// conveyor/cuda/impl/src.hpp — the CUDA module's non-template definitions, compiled once
// (CONVEYOR_SEPARATE_COMPILATION; see conveyor/src.hpp). Empty without the CUDA toolkit.
#ifndef CONVEYOR_CUDA_IMPL_SRC_HPP
#define CONVEYOR_CUDA_IMPL_SRC_HPP

#if !defined(CONVEYOR_SEPARATE_COMPILATION)
#error "conveyor/cuda/impl/src.hpp is for CONVEYOR_SEPARATE_COMPILATION builds"
#endif

#if CONVEYOR_WITH_CUDA
#include <conveyor/cuda/impl/error.ipp>
#include <conveyor/cuda/impl/device.ipp>
#include <conveyor/cuda/impl/staging.ipp>
#include <conveyor/cuda/impl/nvjpeg.ipp>
#if CONVEYOR_WITH_GPU_KERNELS
#include <conveyor/cuda/impl/jpeg_decoder.ipp>
#endif
#include <conveyor/cuda/impl/decode.ipp>
#endif

#endif
