// conveyor/core/impl/src.hpp — the core module's non-template definitions, compiled once
// (CONVEYOR_SEPARATE_COMPILATION; see conveyor/src.hpp).
#ifndef CONVEYOR_CORE_IMPL_SRC_HPP
#define CONVEYOR_CORE_IMPL_SRC_HPP

#if !defined(CONVEYOR_SEPARATE_COMPILATION)
#error "conveyor/core/impl/src.hpp is for CONVEYOR_SEPARATE_COMPILATION builds"
#endif

// One line per impl/*.ipp file of the module, e.g. #include <conveyor/core/impl/x.ipp>

#endif
