// conveyor/src.hpp — compiles conveyor's non-template code once (separate compilation).
//
// Include this in exactly one translation unit of a program whose translation units are
// all compiled with CONVEYOR_SEPARATE_COMPILATION defined, when building conveyor without
// its CMake targets. The CMake target conveyor::conveyor does both: its static library
// compiles the same files, one translation unit per module (src/*.cpp), and everything
// linking it gets the definition.
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

#endif
