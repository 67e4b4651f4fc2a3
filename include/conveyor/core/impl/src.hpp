// conveyor/core/impl/src.hpp — the core module's non-template definitions, compiled once
// (CONVEYOR_SEPARATE_COMPILATION; see conveyor/src.hpp).
#ifndef CONVEYOR_CORE_IMPL_SRC_HPP
#define CONVEYOR_CORE_IMPL_SRC_HPP

#if !defined(CONVEYOR_SEPARATE_COMPILATION)
#error "conveyor/core/impl/src.hpp is for CONVEYOR_SEPARATE_COMPILATION builds"
#endif

#include <conveyor/core/impl/buffer.ipp>
#include <conveyor/core/impl/checksum.ipp>
#include <conveyor/core/impl/error.ipp>
#include <conveyor/core/impl/location.ipp>
#include <conveyor/core/impl/memory_budget.ipp>
#include <conveyor/core/impl/metrics.ipp>
#include <conveyor/core/impl/mix.ipp>
#include <conveyor/core/impl/order.ipp>
#include <conveyor/core/impl/run_context.ipp>
#include <conveyor/core/impl/runtime.ipp>
#include <conveyor/core/impl/slice.ipp>
#include <conveyor/core/impl/source.ipp>
#include <conveyor/core/detail/impl/read_file.ipp>
#include <conveyor/core/detail/impl/replace_file.ipp>

#endif
