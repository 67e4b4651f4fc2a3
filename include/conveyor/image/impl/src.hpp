// conveyor/image/impl/src.hpp — the image module's non-template definitions, compiled once
// (CONVEYOR_SEPARATE_COMPILATION; see conveyor/src.hpp).
#ifndef CONVEYOR_IMAGE_IMPL_SRC_HPP
#define CONVEYOR_IMAGE_IMPL_SRC_HPP

#if !defined(CONVEYOR_SEPARATE_COMPILATION)
#error "conveyor/image/impl/src.hpp is for CONVEYOR_SEPARATE_COMPILATION builds"
#endif

#include <conveyor/image/impl/error.ipp>
#include <conveyor/image/detail/impl/sniff.ipp>
#include <conveyor/image/detail/impl/codec_state.ipp>
#include <conveyor/image/detail/impl/plan.ipp>
#include <conveyor/image/detail/impl/resample.ipp>
#include <conveyor/image/detail/impl/jpeg.ipp>
#include <conveyor/image/detail/impl/jpeg_region.ipp>
#include <conveyor/image/detail/impl/png.ipp>
#include <conveyor/image/detail/impl/webp.ipp>
#include <conveyor/image/detail/impl/avif.ipp>
#include <conveyor/image/impl/augment.ipp>
#include <conveyor/image/impl/decode.ipp>
#include <conveyor/image/impl/labels.ipp>
#include <conveyor/image/impl/npy.ipp>
#include <conveyor/image/impl/fields.ipp>
#include <conveyor/image/impl/stage.ipp>
#include <conveyor/image/detail/impl/batch_assembler.ipp>
#include <conveyor/image/impl/columns.ipp>
#include <conveyor/image/impl/batch.ipp>
#include <conveyor/image/impl/dlpack.ipp>
#include <conveyor/image/impl/encode.ipp>
#include <conveyor/image/impl/synthetic.ipp>
#include <conveyor/image/impl/split.ipp>

#endif
