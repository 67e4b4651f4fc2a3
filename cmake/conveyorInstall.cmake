# Install rules: headers, the exported target conveyor::conveyor and a relocatable package
# config, so that `find_package(conveyor CONFIG)` works after `cmake --install`.
#
# Included by the top-level CMakeLists.txt when CONVEYOR_INSTALL is on.
include_guard(GLOBAL)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Header-only, the package is ARCH_INDEPENDENT and lives under share/; with
# CONVEYOR_SEPARATE_COMPILATION it carries a static library and lives under lib/<arch>/.
if(CONVEYOR_SEPARATE_COMPILATION)
  set(_conveyor_cmakedir "${CMAKE_INSTALL_LIBDIR}/cmake/conveyor")
  set(_conveyor_arch_independent "")
else()
  set(_conveyor_cmakedir "${CMAKE_INSTALL_DATADIR}/cmake/conveyor")
  set(_conveyor_arch_independent ARCH_INDEPENDENT)
endif()
set(CONVEYOR_INSTALL_CMAKEDIR "${_conveyor_cmakedir}"
    CACHE STRING "Where conveyor's CMake package files are installed (relative to the prefix)")
mark_as_advanced(CONVEYOR_INSTALL_CMAKEDIR)

install(DIRECTORY "${conveyor_SOURCE_DIR}/include/conveyor"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
        FILES_MATCHING PATTERN "*.hpp" PATTERN "*.ipp" PATTERN "*.h")

# conveyor links conveyor::deps, an imported target that is not part of this export: the
# targets file names it, and conveyorConfig.cmake recreates it (by including
# conveyorDependencies.cmake) before it includes the targets file.
install(TARGETS conveyor EXPORT conveyorTargets)
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
  COMPATIBILITY SameMajorVersion
  ${_conveyor_arch_independent})

install(FILES
          "${conveyor_BINARY_DIR}/conveyorConfig.cmake"
          "${conveyor_BINARY_DIR}/conveyorConfigVersion.cmake"
          "${conveyor_SOURCE_DIR}/cmake/conveyorDependencies.cmake"
        DESTINATION "${CONVEYOR_INSTALL_CMAKEDIR}")
