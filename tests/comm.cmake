# SPDX-License-Identifier: Apache-2.0
# comm/: the fault test is a driver that runs mpirun -np 4 on itself, with a short
# HUMMING_COMM_TIMEOUT so that survivors of a hung or killed rank fail quickly.
if(TARGET test_comm_fault)
  target_compile_definitions(test_comm_fault PRIVATE HM_MPIEXEC="${MPIEXEC_EXECUTABLE}")
  set_tests_properties(test_comm_fault PROPERTIES LABELS mpi RUN_SERIAL TRUE TIMEOUT 600
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_btl_vader_single_copy_mechanism=none;HUMMING_COMM_TIMEOUT=3;HUMMING_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache")
endif()
