# SPDX-License-Identifier: Apache-2.0
# The node-wide compile cache once more in fresh processes: after test_cache_mpi filled
# it, eight new ranks asking for the same kernels must compile nothing.
add_test(NAME test_cache_mpi_second_run
         COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np 8 $<TARGET_FILE:test_cache_mpi> --second-run)
set_tests_properties(test_cache_mpi PROPERTIES FIXTURES_SETUP jit_mpi_cache)
set_tests_properties(test_cache_mpi_second_run PROPERTIES
                     LABELS mpi TIMEOUT 600 RUN_SERIAL TRUE FIXTURES_REQUIRED jit_mpi_cache
                     ENVIRONMENT "${HM_MPI_ENV};HUMMING_CACHE_DIR=${HM_TEST_CACHE_DIR}")
