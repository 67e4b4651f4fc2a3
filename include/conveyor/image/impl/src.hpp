// conveyor/image/impl/src.hpp — the image module's non-template definitions, compiled once
// (CONVEYOR_SEPARATE_COMPILATION; see conveyor/src.hpp).
#ifndef CONVEYOR_IMAGE_IMPL_SRC_HPP
#define CONVEYOR_IMAGE_IMPL_SRC_HPP

#if !defined(CONVEYOR_SEPARATE_COMPILATION)
#error "conveyor/image/impl/src.hpp is for CONVEYOR_SEPARATE_COMPILATION builds"
#endif

#include <conveyor/image/impl/error.ipp>
#include <conveyor/image/impl/decode.ipp>
#include <conveyor/image/impl/labels.ipp>
#include <conveyor/image/impl/stage.ipp>
#include <conveyor/image/impl/batch.ipp>
#include <conveyor/image/impl/dlpack.ipp>
#include <conveyor/image/impl/encode.ipp>
#include <conveyor/image/impl/synthetic.ipp>

#endif
