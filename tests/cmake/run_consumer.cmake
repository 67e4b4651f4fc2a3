# Configures, builds and runs tests/cmake/consumer against conveyor obtained one way.
#
#   cmake -DMODE=add_subdirectory|fetchcontent|find_package
#         -DCONVEYOR_SOURCE_DIR=<conveyor's source tree> -DWORK_DIR=<scratch dir, wiped first>
#         [-DGENERATOR=Ninja] [-DMAKE_PROGRAM=...] [-DCXX_COMPILER=...] [-DCXX_LAUNCHER=...]
#         [-DBUILD_TYPE=...] [-DEXPECTED_VERSION=...] -P run_consumer.cmake
#
# The consumer builds and runs two programs from the same sources: one linking
# conveyor::conveyor (the static library), one linking conveyor::header-only.
#
# Any failing step stops the script with an error, which fails the ctest test.
cmake_minimum_required(VERSION 3.25)

foreach(required MODE CONVEYOR_SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${required} OR "${${required}}" STREQUAL "")
    message(FATAL_ERROR "run_consumer.cmake: -D${required}=... is required")
  endif()
endforeach()
if(NOT MODE MATCHES "^(add_subdirectory|fetchcontent|find_package)$")
  message(FATAL_ERROR "run_consumer.cmake: MODE='${MODE}': expected add_subdirectory, fetchcontent or find_package")
endif()
if(NOT GENERATOR)
  set(GENERATOR Ninja)
endif()

set(consumer_src "${CMAKE_CURRENT_LIST_DIR}/consumer")
set(consumer_build "${WORK_DIR}/consumer-build")

# What every configure step shares: generator, compiler, launcher, and the build type of the
# build that runs the test (BUILD_TYPE), so that with ccache the library's files compiled
# here are the build's own (scripts/test.sh has ccache leave the working directory out of
# its hash, as these builds live in folders of their own).
set(common_args -G "${GENERATOR}")
if(BUILD_TYPE)
  list(APPEND common_args "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}")
endif()
if(MAKE_PROGRAM)
  list(APPEND common_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(CXX_COMPILER)
  list(APPEND common_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
if(CXX_LAUNCHER)
  list(APPEND common_args "-DCMAKE_CXX_COMPILER_LAUNCHER=${CXX_LAUNCHER}")
endif()

# run(<what> <command...>): echoes the command, runs it, stops on failure.
function(run what)
  list(JOIN ARGN " " shown)
  message(STATUS "[${MODE}] ${what}: ${shown}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "[${MODE}] ${what} failed (${rc}): ${shown}")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

set(consumer_args
  -S "${consumer_src}" -B "${consumer_build}" ${common_args}
  "-DCONVEYOR_CONSUME=${MODE}"
  "-DCONVEYOR_SOURCE_DIR=${CONVEYOR_SOURCE_DIR}")

if(MODE STREQUAL "find_package")
  # Install conveyor alone (no tests, examples, benchmarks or Python module) into a scratch prefix.
  set(conveyor_build "${WORK_DIR}/conveyor-build")
  set(prefix "${WORK_DIR}/prefix")
  run("configure conveyor" "${CMAKE_COMMAND}"
      -S "${CONVEYOR_SOURCE_DIR}" -B "${conveyor_build}" ${common_args}
      -DCONVEYOR_BUILD_TESTS=OFF -DCONVEYOR_BUILD_EXAMPLES=OFF -DCONVEYOR_BUILD_BENCH=OFF -DCONVEYOR_BUILD_PYTHON=OFF
      -DCONVEYOR_INSTALL=ON
      "-DCMAKE_INSTALL_PREFIX=${prefix}" -DCMAKE_INSTALL_LIBDIR=lib)
  run("build conveyor" "${CMAKE_COMMAND}" --build "${conveyor_build}")
  run("install conveyor" "${CMAKE_COMMAND}" --install "${conveyor_build}" --prefix "${prefix}")
  set(cmakedir lib/cmake/conveyor)
  foreach(f include/conveyor/conveyor.hpp include/conveyor/src.hpp include/conveyor/version.hpp lib/libconveyor.a
            ${cmakedir}/conveyorConfig.cmake
            ${cmakedir}/conveyorConfigVersion.cmake
            ${cmakedir}/conveyorTargets.cmake
            ${cmakedir}/conveyorDependencies.cmake)
    if(NOT EXISTS "${prefix}/${f}")
      message(FATAL_ERROR "[${MODE}] the install lacks ${f}")
    endif()
  endforeach()
  # The bench support library is the bench tool's, not conveyor's: never installed.
  if(EXISTS "${prefix}/include/conveyor/bench")
    message(FATAL_ERROR "[${MODE}] the install carries include/conveyor/bench")
  endif()
  list(APPEND consumer_args "-DCMAKE_PREFIX_PATH=${prefix}")
  if(EXPECTED_VERSION)
    list(APPEND consumer_args "-DCONVEYOR_EXPECTED_VERSION=${EXPECTED_VERSION}")
  endif()
endif()

run("configure consumer" "${CMAKE_COMMAND}" ${consumer_args})
if(NOT MODE STREQUAL "find_package")
  # The header-only consumer's two translation units are the heaviest part of these tests
  # (every definition of conveyor.hpp, twice). They are built once, against the installed
  # headers (the find_package test), which is where a missing file would show; in the source
  # tree, the header tests (tests/headers) compile every module header-only and link them
  # into one program. Here both targets are checked at configure time and the compiled form
  # is built and run.
  run("build consumer" "${CMAKE_COMMAND}" --build "${consumer_build}" --target consumer)
  run("run consumer (conveyor::conveyor)" "${consumer_build}/consumer")
  message(STATUS "[${MODE}] ok: conveyor::conveyor (conveyor::header-only: built by the find_package test)")
  return()
endif()
run("build consumer" "${CMAKE_COMMAND}" --build "${consumer_build}")
run("run consumer (conveyor::conveyor)" "${consumer_build}/consumer")
run("run consumer (conveyor::header-only)" "${consumer_build}/consumer-header-only")
message(STATUS "[${MODE}] ok: conveyor::conveyor and conveyor::header-only")
