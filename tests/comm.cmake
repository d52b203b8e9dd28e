# SPDX-License-Identifier: Apache-2.0
# comm/: the fault test is a driver that runs mpirun -np 4 on itself, with a short
# HUMMING_COMM_TIMEOUT so that survivors of a hung or killed rank fail quickly.
if(TARGET test_comm_fault)
  target_compile_definitions(test_comm_fault PRIVATE HM_MPIEXEC="${MPIEXEC_EXECUTABLE}")
  set_tests_properties(test_comm_fault PROPERTIES LABELS mpi RUN_SERIAL TRUE TIMEOUT 600
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_btl_vader_single_copy_mechanism=none;HUMMING_COMM_TIMEOUT=3;HUMMING_CACHE_DIR=${HM_TEST_CACHE_DIR}")
endif()

# The bench's layer and e2e modes sharded over 8 host ranks: a driver that runs mpirun on the bench.
if(TARGET test_bench_dist)
  target_compile_definitions(test_bench_dist PRIVATE HM_MPIEXEC="${MPIEXEC_EXECUTABLE}"
                             HM_BENCH_EXE="$<TARGET_FILE:humming-moe-bench>")
  add_dependencies(test_bench_dist humming-moe-bench)
  set_tests_properties(test_bench_dist PROPERTIES LABELS mpi RUN_SERIAL TRUE TIMEOUT 900
    ENVIRONMENT "${HM_MPI_ENV};HUMMING_CACHE_DIR=${HM_TEST_CACHE_DIR}")
endif()
