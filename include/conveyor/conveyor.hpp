// conveyor/conveyor.hpp — everything conveyor offers that this build enables.
#ifndef CONVEYOR_CONVEYOR_HPP
#define CONVEYOR_CONVEYOR_HPP

#include <conveyor/core/buffer.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/pipeline.hpp>
#include <conveyor/core/runtime.hpp>
#include <conveyor/core/stages.hpp>
#include <conveyor/file/error.hpp>
#include <conveyor/file/index.hpp>
#include <conveyor/file/source.hpp>
#include <conveyor/file/uring.hpp>

#endif
