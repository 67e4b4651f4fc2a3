// conveyor/bench/impl/src.hpp — the bench support module's non-template definitions,
// compiled once (CONVEYOR_SEPARATE_COMPILATION; see conveyor/src.hpp).
#ifndef CONVEYOR_BENCH_IMPL_SRC_HPP
#define CONVEYOR_BENCH_IMPL_SRC_HPP

#if !defined(CONVEYOR_SEPARATE_COMPILATION)
#error "conveyor/bench/impl/src.hpp is for CONVEYOR_SEPARATE_COMPILATION builds"
#endif

// One line per impl/*.ipp file of the module.
#include <conveyor/bench/impl/histogram.ipp>
#include <conveyor/bench/impl/json_line.ipp>
#include <conveyor/bench/impl/progress.ipp>
#include <conveyor/bench/impl/report.ipp>
#include <conveyor/bench/impl/synthetic.ipp>
#include <conveyor/bench/impl/timer.ipp>

#endif
