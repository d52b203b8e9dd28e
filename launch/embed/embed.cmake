# SPDX-License-Identifier: Apache-2.0
# The embedding example: a program that drives the engine the way a serving stack does
# (its own processes, NCCL id, memory and stream, no MPI), built next to the other
# binaries; and the ctypes module, which needs no build step, installed beside it.
file(GLOB embed_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/launch/embed/*.c)
add_executable(humming-moe-embed-example ${embed_sources})
target_include_directories(humming-moe-embed-example PRIVATE ${CMAKE_SOURCE_DIR}/launch)
target_link_libraries(humming-moe-embed-example PRIVATE humming_static)

include(GNUInstallDirs)
install(TARGETS humming-moe-embed-example RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS humming LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${CMAKE_SOURCE_DIR}/python/humming_moe.py DESTINATION ${CMAKE_INSTALL_LIBDIR}/humming-moe/python)
