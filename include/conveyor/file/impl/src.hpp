// conveyor/file/impl/src.hpp — the file module's non-template definitions, compiled once
// (CONVEYOR_SEPARATE_COMPILATION; see conveyor/src.hpp).
#ifndef CONVEYOR_FILE_IMPL_SRC_HPP
#define CONVEYOR_FILE_IMPL_SRC_HPP

#if !defined(CONVEYOR_SEPARATE_COMPILATION)
#error "conveyor/file/impl/src.hpp is for CONVEYOR_SEPARATE_COMPILATION builds"
#endif

// One line per impl/*.ipp file of the module.
#include <conveyor/file/detail/impl/uring.ipp>
#include <conveyor/file/impl/error.ipp>
#include <conveyor/file/impl/index.ipp>
#include <conveyor/file/impl/source.ipp>
#include <conveyor/file/impl/chunks.ipp>

#endif
