# Install rules: headers, the static library, the exported targets conveyor::conveyor and
# conveyor::header-only, and a relocatable package config, so that
# `find_package(conveyor CONFIG)` works after `cmake --install`.
#
# Included by the top-level CMakeLists.txt when CONVEYOR_INSTALL is on.
include_guard(GLOBAL)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The package carries a static library, so it is architecture-dependent: lib/<arch>/cmake.
set(CONVEYOR_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/conveyor"
    CACHE STRING "Where conveyor's CMake package files are installed (relative to the prefix)")
mark_as_advanced(CONVEYOR_INSTALL_CMAKEDIR)

install(DIRECTORY "${conveyor_SOURCE_DIR}/include/conveyor"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
        FILES_MATCHING PATTERN "*.hpp" PATTERN "*.ipp" PATTERN "*.h")

# Both targets link conveyor::deps, an imported target that is not part of this export:
# the targets file names it, and conveyorConfig.cmake recreates it (by including
# conveyorDependencies.cmake) before it includes the targets file.
# conveyor_cuda_kernels (where nvcc built it) is linked by both, so it is exported with them.
set(_conveyor_install_targets conveyor conveyor-header-only)
if(TARGET conveyor_cuda_kernels)
  list(APPEND _conveyor_install_targets conveyor_cuda_kernels)
endif()
install(TARGETS ${_conveyor_install_targets} EXPORT conveyorTargets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")
install(EXPORT conveyorTargets
        NAMESPACE conveyor::
        FILE conveyorTargets.cmake
        DESTINATION "${CONVEYOR_INSTALL_CMAKEDIR}")

configure_package_config_file(
  "${conveyor_SOURCE_DIR}/cmake/conveyorConfig.cmake.in"
  "${conveyor_BINARY_DIR}/conveyorConfig.cmake"
  INSTALL_DESTINATION "${CONVEYOR_INSTALL_CMAKEDIR}")
write_basic_package_version_file(
  "${conveyor_BINARY_DIR}/conveyorConfigVersion.cmake"
  VERSION "${conveyor_VERSION}"
  COMPATIBILITY SameMajorVersion)

install(FILES
          "${conveyor_BINARY_DIR}/conveyorConfig.cmake"
          "${conveyor_BINARY_DIR}/conveyorConfigVersion.cmake"
          "${conveyor_SOURCE_DIR}/cmake/conveyorDependencies.cmake"
        DESTINATION "${CONVEYOR_INSTALL_CMAKEDIR}")
