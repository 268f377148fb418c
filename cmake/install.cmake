# install.cmake — the installed package. `cmake --install build --prefix P`
# puts
#   P/include/gradeq/          the headers (gradeq.h and testing.h are the
#                              entry points; the layers' headers beside them)
#   P/lib/libgradeq_*.a        the libraries
#   P/bin/gradeq               the stock command line
#   P/lib/cmake/gradeq/        gradeqConfig.cmake: find_package(gradeq) gives
#                              gradeq::gradeq (everything a program needs),
#                              gradeq::testing (GoogleTest helper, where
#                              GoogleTest was found) and gradeq::cuda (where built)
#   P/lib/pkgconfig/gradeq.pc  the same for pkg-config
include(CMakePackageConfigHelpers)

# The mutants (gradeq_mutants, gradeq_kernel_mutants) are libraries of their
# own, linked by the gate for the self-test; gradeq_harness does not carry them.
set(GRADEQ_PACKAGE_LIBRARIES gradeq_cli gradeq_reports gradeq_gate gradeq_properties gradeq_mutants gradeq_harness
    gradeq_kernel_mutants gradeq_kernels gradeq_reference)
if(TARGET gradeq_cuda)
  list(INSERT GRADEQ_PACKAGE_LIBRARIES 7 gradeq_cuda)  # below the mutants that use it, above the kernels
endif()
if(TARGET gradeq_mpi)
  list(INSERT GRADEQ_PACKAGE_LIBRARIES 1 gradeq_mpi)  # used by the command line only
endif()
foreach(target IN LISTS GRADEQ_PACKAGE_LIBRARIES)
  string(REPLACE "gradeq_" "" export_name ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
  # The public headers are C++20 (std::span, concepts): so is every user.
  if(NOT target STREQUAL "gradeq_cuda")
    target_compile_features(${target} PUBLIC cxx_std_20)
  endif()
endforeach()
# <gradeq/gradeq.h> is found through include/ once installed.
target_include_directories(gradeq_cli PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

# gradeq::gradeq, the one target a user links: the command line's library
# and, through it, every layer below.
add_library(gradeq_package INTERFACE)
target_link_libraries(gradeq_package INTERFACE gradeq_cli)
set_target_properties(gradeq_package PROPERTIES EXPORT_NAME gradeq)
add_library(gradeq::gradeq ALIAS gradeq_package)
if(TARGET gradeq_testing)
  set_target_properties(gradeq_testing PROPERTIES EXPORT_NAME testing)
  add_library(gradeq::testing ALIAS gradeq_testing)
endif()
if(TARGET gradeq_cuda)
  add_library(gradeq::cuda ALIAS gradeq_cuda)
endif()

set(GRADEQ_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/gradeq)
install(TARGETS ${GRADEQ_PACKAGE_LIBRARIES} gradeq_package EXPORT gradeqTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS gradeq RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT gradeqTargets NAMESPACE gradeq:: DESTINATION ${GRADEQ_CMAKE_DIR})
if(TARGET gradeq_testing)
  install(TARGETS gradeq_testing EXPORT gradeqTestingTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT gradeqTestingTargets NAMESPACE gradeq:: DESTINATION ${GRADEQ_CMAKE_DIR})
endif()

foreach(layer reference kernels harness properties reports)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/gradeq/${layer}
          FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh" PATTERN "*.def" PATTERN "cli/gradeq" EXCLUDE)
endforeach()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/harness/cli/gradeq/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/gradeq
        FILES_MATCHING PATTERN "*.h")

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/gradeqConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/gradeqConfig.cmake INSTALL_DESTINATION ${GRADEQ_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/gradeqConfigVersion.cmake VERSION ${PROJECT_VERSION}
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/gradeqConfig.cmake ${PROJECT_BINARY_DIR}/gradeqConfigVersion.cmake
        DESTINATION ${GRADEQ_CMAKE_DIR})

# pkg-config: the libraries in link order, then what they need.
set(GRADEQ_PC_LIBS "")
foreach(target IN LISTS GRADEQ_PACKAGE_LIBRARIES)
  string(APPEND GRADEQ_PC_LIBS " -l${target}")
endforeach()
set(GRADEQ_PC_MPI "")
if(TARGET gradeq_mpi)
  set(GRADEQ_PC_MPI " ${MPI_CXX_LINK_FLAGS}")
  foreach(lib IN LISTS MPI_CXX_LIBRARIES)
    string(APPEND GRADEQ_PC_MPI " ${lib}")
  endforeach()
endif()
set(GRADEQ_PC_CUDA "")
if(TARGET gradeq_cuda)
  set(GRADEQ_PC_CUDA " -L${CUDAToolkit_LIBRARY_DIR} -lcublas -lcudart")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/gradeq.pc.in ${PROJECT_BINARY_DIR}/gradeq.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/gradeq.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
