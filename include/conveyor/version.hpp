// conveyor/version.hpp — the version of conveyor these headers belong to.
//
// This file is where the version is kept: the top-level CMakeLists.txt reads the three
// numbers below into project(conveyor VERSION ...), so the CMake package's version
// (find_package(conveyor 0.1)) and these macros cannot disagree. Change them here, and
// add the release to CHANGELOG.md.
#ifndef CONVEYOR_VERSION_HPP
#define CONVEYOR_VERSION_HPP

/// The major version: changes that break the API.
#define CONVEYOR_VERSION_MAJOR 0
/// The minor version: features that keep the API.
#define CONVEYOR_VERSION_MINOR 1
/// The patch version: fixes.
#define CONVEYOR_VERSION_PATCH 0

/** The version as one number, major * 10000 + minor * 100 + patch (0.1.0 is 100), for
    comparisons in the preprocessor: `#if CONVEYOR_VERSION >= 100`. */
#define CONVEYOR_VERSION (CONVEYOR_VERSION_MAJOR * 10000 + CONVEYOR_VERSION_MINOR * 100 + CONVEYOR_VERSION_PATCH)

#define CONVEYOR_DETAIL_STRINGIZE_(x) #x
#define CONVEYOR_DETAIL_STRINGIZE(x) CONVEYOR_DETAIL_STRINGIZE_(x)

/// The version as a string literal, "major.minor.patch" (e.g. "0.1.0").
#define CONVEYOR_VERSION_STRING                                                                                                            \
    CONVEYOR_DETAIL_STRINGIZE(CONVEYOR_VERSION_MAJOR)                                                                                      \
    "." CONVEYOR_DETAIL_STRINGIZE(CONVEYOR_VERSION_MINOR) "." CONVEYOR_DETAIL_STRINGIZE(CONVEYOR_VERSION_PATCH)

#endif
