# SPDX-License-Identifier: Apache-2.0
# kernels/: embeds every kernels/*.cuh into the library and stamps the build id that
# keeps two library builds from sharing compile-cache entries.

file(GLOB HM_KERNEL_HEADERS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/*.cuh)
list(SORT HM_KERNEL_HEADERS)
set(HM_EMBED_OUT ${CMAKE_BINARY_DIR}/generated/hm_embedded_headers.c)
add_custom_command(
  OUTPUT ${HM_EMBED_OUT}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/generated
  COMMAND ${CMAKE_COMMAND} "-DOUT=${HM_EMBED_OUT}" "-DHEADERS=${HM_KERNEL_HEADERS}"
          -P ${CMAKE_SOURCE_DIR}/kernels/embed.cmake
  DEPENDS ${HM_KERNEL_HEADERS} ${CMAKE_SOURCE_DIR}/kernels/embed.cmake
  COMMENT "Embedding kernels/*.cuh"
  VERBATIM)
target_sources(humming_objects PRIVATE ${HM_EMBED_OUT})

# The commit the library was configured from; "unknown" outside a git checkout.
execute_process(COMMAND git -C ${CMAKE_SOURCE_DIR} rev-parse --short=12 HEAD
                OUTPUT_VARIABLE HM_BUILD_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE
                ERROR_QUIET RESULT_VARIABLE HM_BUILD_COMMIT_RESULT)
if(NOT HM_BUILD_COMMIT_RESULT EQUAL 0 OR HM_BUILD_COMMIT STREQUAL "")
  set(HM_BUILD_COMMIT unknown)
endif()
set_property(SOURCE ${CMAKE_SOURCE_DIR}/kernels/jit_identity.c APPEND PROPERTY
             COMPILE_DEFINITIONS HM_BUILD_COMMIT="${HM_BUILD_COMMIT}")
