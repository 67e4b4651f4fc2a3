// conveyor/core/stages.hpp — the generic stages: map, filter, take, prefetch, batch, shuffle
// (one header each under core/stages/).
#ifndef CONVEYOR_CORE_STAGES_HPP
#define CONVEYOR_CORE_STAGES_HPP

#include <conveyor/core/stages/batch.hpp>
#include <conveyor/core/stages/filter.hpp>
#include <conveyor/core/stages/map.hpp>
#include <conveyor/core/stages/prefetch.hpp>
#include <conveyor/core/stages/shuffle.hpp>
#include <conveyor/core/stages/take.hpp>

#endif
