include(CMakePackageConfigHelpers)

install(TARGETS parley EXPORT parleyTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS parley_postgres EXPORT parleyPostgresTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/parley DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/parley/version.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/parley)
install(EXPORT parleyTargets NAMESPACE parley:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/parley)
install(EXPORT parleyPostgresTargets NAMESPACE parley::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/parley)

configure_package_config_file(cmake/parleyConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/parleyConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/parley)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/parleyConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/parleyConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/parleyConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/parley)
