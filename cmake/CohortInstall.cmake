# Installation: the layers' static libraries, their public headers and the `cohort` binary, and
# the CMake package `Cohort` that lets a program of its own use them:
#
#   find_package(Cohort REQUIRED)
#   target_link_libraries(app PRIVATE Cohort::ddp)   # or Cohort::comm, Cohort::elastic, ...
#
# Layout under the prefix: lib/libcohort_<layer>.a, include/cohort/<layer>/*.h, bin/cohort and
# lib/cmake/Cohort/{CohortConfig,CohortConfigVersion,CohortTargets}.cmake.
# Included at the end of src/CMakeLists.txt, once every target exists.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(cohort_installed_layers base net store comm compress trace elastic ps sim)
if(COHORT_WITH_TORCH)
  list(APPEND cohort_installed_layers ddp train)
endif()

set(cohort_installed_targets)
foreach(layer IN LISTS cohort_installed_layers)
  # Exported as Cohort::<layer>; the same name works inside this build through the alias.
  set_target_properties(cohort_${layer} PROPERTIES EXPORT_NAME ${layer})
  add_library(Cohort::${layer} ALIAS cohort_${layer})
  list(APPEND cohort_installed_targets cohort_${layer})
endforeach()

install(TARGETS ${cohort_installed_targets} EXPORT CohortTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS cohort RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET cohort-comm)
  install(TARGETS cohort-comm RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

# Headers keep their source layout: #include "cohort/<layer>/<file>.h" (the libraries' install
# include directory, set in cohort_target_defaults, is <prefix>/include).
foreach(layer IN LISTS cohort_installed_layers)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/cohort/${layer}
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/cohort FILES_MATCHING PATTERN "*.h")
endforeach()

set(cohort_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/Cohort)
install(EXPORT CohortTargets NAMESPACE Cohort:: DESTINATION ${cohort_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/CohortConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/CohortConfig.cmake
                              INSTALL_DESTINATION ${cohort_cmake_dir})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/CohortConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/CohortConfig.cmake ${CMAKE_BINARY_DIR}/CohortConfigVersion.cmake
        DESTINATION ${cohort_cmake_dir})
