# Install rules: libkolo, the public headers, the tools, a CMake package
# (find_package(kolo) -> kolo::kolo) and a pkg-config file (kolo.pc).
#
#   cmake --install build --prefix /opt/kolo
#
# Both package files are relocatable: they find the prefix from where they
# are installed, so --prefix at install time is honoured.
include(CMakePackageConfigHelpers)

set(KOLO_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kolo)

install(TARGETS kolo EXPORT koloTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/kolo
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")

# Tools find libkolo next to them: PREFIX/bin -> PREFIX/lib.
foreach(tool kolorun kolo-bench kolo-predict)
  if(TARGET ${tool})
    set_target_properties(${tool} PROPERTIES
      INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
    install(TARGETS ${tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()

install(EXPORT koloTargets
  NAMESPACE kolo::
  FILE kolo-targets.cmake
  DESTINATION ${KOLO_CMAKE_DIR})
configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/kolo-config.cmake.in
  ${CMAKE_BINARY_DIR}/generated/kolo-config.cmake
  INSTALL_DESTINATION ${KOLO_CMAKE_DIR})
write_basic_package_version_file(
  ${CMAKE_BINARY_DIR}/generated/kolo-config-version.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${CMAKE_BINARY_DIR}/generated/kolo-config.cmake
  ${CMAKE_BINARY_DIR}/generated/kolo-config-version.cmake
  DESTINATION ${KOLO_CMAKE_DIR})

# pkg-config: the prefix is computed from ${pcfiledir} (LIBDIR/pkgconfig).
file(RELATIVE_PATH KOLO_PC_PREFIX_FROM_PCFILEDIR
  "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" KOLO_PC_PREFIX_FROM_PCFILEDIR "${KOLO_PC_PREFIX_FROM_PCFILEDIR}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/kolo.pc.in
  ${CMAKE_BINARY_DIR}/generated/kolo.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/generated/kolo.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
