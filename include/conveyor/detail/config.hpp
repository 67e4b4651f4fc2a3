// conveyor/detail/config.hpp — how conveyor's non-template code is compiled.
//
// Header-only (CMake target conveyor::header-only): every non-template definition lives in
// an `impl/*.ipp` file that its header includes, each marked `inline` through CONVEYOR_DECL,
// so any number of translation units may include conveyor.
//
// Separate compilation (CMake target conveyor::conveyor, the default): define
// CONVEYOR_SEPARATE_COMPILATION in every translation unit (conveyor::conveyor does it for
// everything that links it) and compile `conveyor/src.hpp` in exactly one (its static
// library does, one translation unit per module). Headers then carry
// declarations only and leave the heavy dependencies (Beast, OpenSSL, liburing, Boost.JSON)
// to that one translation unit. This is Asio's ASIO_SEPARATE_COMPILATION and Beast's
// BOOST_BEAST_SEPARATE_COMPILATION.
#ifndef CONVEYOR_DETAIL_CONFIG_HPP
#define CONVEYOR_DETAIL_CONFIG_HPP

#if defined(CONVEYOR_SEPARATE_COMPILATION)
#define CONVEYOR_HEADER_ONLY 0
#define CONVEYOR_DECL
#else
#define CONVEYOR_HEADER_ONLY 1
#define CONVEYOR_DECL inline
#endif

#endif
