# SPDX-License-Identifier: Apache-2.0
# humming-moe-bench's tests. The unit programs come from the unit/ glob; this adds what
# they need beyond the library: the launch/ sources (options, report, #wrong counter, the
# bench's option table, the trace's per-CTA lines) and the path of the bench binary, which test_bench_modes runs in
# every mode on the host.
# Under mpirun, the comm mode runs dispatch/combine over 4 host ranks (label mpi).

target_sources(test_bench_options PRIVATE ${CMAKE_SOURCE_DIR}/launch/common/options.c
               ${CMAKE_SOURCE_DIR}/launch/common/report.c ${CMAKE_SOURCE_DIR}/launch/bench/bench_check.c
               ${CMAKE_SOURCE_DIR}/launch/bench/bench_args.c)
target_include_directories(test_bench_options PRIVATE ${CMAKE_SOURCE_DIR}/launch)
target_sources(test_bench_trace_rows PRIVATE ${CMAKE_SOURCE_DIR}/launch/bench/bench_trace_rows.c)
target_include_directories(test_bench_trace_rows PRIVATE ${CMAKE_SOURCE_DIR}/launch)

target_compile_definitions(test_bench_modes PRIVATE HM_BENCH_EXE="$<TARGET_FILE:humming-moe-bench>")
add_dependencies(test_bench_modes humming-moe-bench)
target_compile_definitions(test_bench_plan PRIVATE HM_BENCH_EXE="$<TARGET_FILE:humming-moe-bench>")
add_dependencies(test_bench_plan humming-moe-bench)
# The comm mode initializes MPI as a singleton, which Open MPI refuses to root without these.
set_tests_properties(test_bench_modes PROPERTIES
                     ENVIRONMENT "${HM_MPI_ENV};HUMMING_CACHE_DIR=${HM_TEST_CACHE_DIR}")

add_test(NAME test_bench_comm_mpi
         COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np 4 $<TARGET_FILE:humming-moe-bench> comm --backend host
                 --model tiny --m 1,16 --iters 3 --warmup 1)
set_tests_properties(test_bench_comm_mpi PROPERTIES LABELS mpi TIMEOUT 300 RUN_SERIAL TRUE
                     ENVIRONMENT "${HM_MPI_ENV};HUMMING_CACHE_DIR=${HM_TEST_CACHE_DIR}")

# A weight-only scheme spelled by its parts (u3 with zero points in groups of 64) runs and
# checks against the host reference, a layer partly in a 64-row group and an odd M.
add_test(NAME test_bench_scheme_parts
         COMMAND humming-moe-bench kernel --backend host --model tiny --quant w3a16-g64 --m 1,7 --iters 1
                 --warmup 0)
set_tests_properties(test_bench_scheme_parts PROPERTIES LABELS unit TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "# OK: 2 sizes, #wrong 0")
