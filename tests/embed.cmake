# SPDX-License-Identifier: Apache-2.0
# The embedding path: the example program (host backend in CI, CUDA on a GPU machine)
# and the ctypes module under plain python3 (host backend) and under torch (GPU).
# The Python tests find the library through HUMMING_LIBHUMMING; a sanitizer build
# preloads the ASan runtime into python3, which was not linked with it.
set(HM_EMBED_ENV "HUMMING_CACHE_DIR=${HM_TEST_CACHE_DIR}")

add_test(NAME test_example_embed COMMAND humming-moe-embed-example --backend host --tokens 8)
set_tests_properties(test_example_embed PROPERTIES LABELS unit TIMEOUT 300 ENVIRONMENT "${HM_EMBED_ENV}")
add_test(NAME test_example_embed_gpu COMMAND humming-moe-embed-example --backend cuda --tokens 64)
set_tests_properties(test_example_embed_gpu PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 600
                     ENVIRONMENT "${HM_EMBED_ENV}")

find_program(HM_PYTHON3 python3)
set(HM_PYTHON_ENV "${HM_EMBED_ENV};HUMMING_LIBHUMMING=$<TARGET_FILE:humming>")
if(HM_SANITIZE)
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so OUTPUT_VARIABLE hm_libasan
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  # The interpreter's own allocations live to exit: leaks are checked by the C tests.
  list(APPEND HM_PYTHON_ENV "LD_PRELOAD=${hm_libasan}" "ASAN_OPTIONS=detect_leaks=0")
endif()

foreach(case unit/test_python_host gpu/test_python_torch)
  get_filename_component(name ${case} NAME)
  get_filename_component(label ${case} DIRECTORY)
  if(HM_PYTHON3)
    add_test(NAME ${name} COMMAND ${HM_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/${case}.py)
  else()
    add_test(NAME ${name} COMMAND sh -c "echo 'SKIP: python3 not found'; exit 77")
  endif()
  set_tests_properties(${name} PROPERTIES LABELS ${label} SKIP_RETURN_CODE 77 TIMEOUT 600
                       ENVIRONMENT "${HM_PYTHON_ENV}")
endforeach()
