// conveyor/src.hpp — compiles conveyor's non-template code once (separate compilation).
//
// Include this in exactly one translation unit of a program whose translation units are
// all compiled with CONVEYOR_SEPARATE_COMPILATION defined; the CMake option
// CONVEYOR_SEPARATE_COMPILATION does both (its static library behind conveyor::conveyor
// compiles the same files, one translation unit per module: src/*.cpp).
#ifndef CONVEYOR_SRC_HPP
#define CONVEYOR_SRC_HPP

#if !defined(CONVEYOR_SEPARATE_COMPILATION)
#error "conveyor/src.hpp is for CONVEYOR_SEPARATE_COMPILATION builds; header-only builds need no source file"
#endif

#include <conveyor/detail/config.hpp>

#include <conveyor/core/impl/src.hpp>
#include <conveyor/file/impl/src.hpp>
#include <conveyor/http/impl/src.hpp>
#include <conveyor/s3/impl/src.hpp>
#include <conveyor/store/impl/src.hpp>
#include <conveyor/shard/impl/src.hpp>
#include <conveyor/image/impl/src.hpp>
#include <conveyor/cuda/impl/src.hpp>
#include <conveyor/bench/impl/src.hpp>

#endif
