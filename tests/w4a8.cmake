# SPDX-License-Identifier: Apache-2.0
# W4A8 on the f16 codes (HUMMING_W4A8_F16=1, kernels/hm_w4a8_codes.cuh): the sm_90 e2m1
# kernels and transforms compiled on them, and on a GPU the W4A8 device test run on them.
add_test(NAME test_gemm_w4a8_nvrtc_f16 COMMAND test_gemm_w4a8_nvrtc)
set_tests_properties(test_gemm_w4a8_nvrtc_f16 PROPERTIES LABELS unit TIMEOUT 600
                     ENVIRONMENT "HUMMING_W4A8_F16=1;HUMMING_CACHE_DIR=${HM_TEST_CACHE_DIR}")
add_test(NAME test_gemm_w4a8_f16 COMMAND test_gemm_w4a8)
set_tests_properties(test_gemm_w4a8_f16 PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 600
                     ENVIRONMENT "HUMMING_W4A8_F16=1;HUMMING_CACHE_DIR=${HM_TEST_CACHE_DIR}")
