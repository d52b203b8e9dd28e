# SPDX-License-Identifier: Apache-2.0
# humming-moe's own commands on the host. tune --plan prints every kernel table an MoE layer
# runs: the masked (decode), indexed and contiguous (prefill) ones of the auto layout, the
# largest contiguous bucket on the warp-specialized TMA kernel.
add_test(NAME test_cli_tune_plan COMMAND humming-moe tune --model deepseek-v3 --quant w8a8-fp8 --plan)
set_tests_properties(test_cli_tune_plan PROPERTIES LABELS unit TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "experts.down +grouped_contiguous +131584 .*_wgmma_ws"
                     FAIL_REGULAR_EXPRESSION "unsupported")
# --layout narrows a MoE layer's tables to one layout.
add_test(NAME test_cli_tune_layout COMMAND humming-moe tune --model deepseek-v3 --quant w4a16 --plan --layout masked)
set_tests_properties(test_cli_tune_layout PROPERTIES LABELS unit TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "experts.down +grouped_masked"
                     FAIL_REGULAR_EXPRESSION "indexed|grouped_contiguous|unsupported")
# precompile compiles a model's kernel tables and names every kernel whose registers spill
# to local memory; the tiny model's weight-only tables on sm_80 have none.
add_test(NAME test_cli_precompile COMMAND humming-moe precompile --model tiny --quant w4a16 --arch sm_80)
set_tests_properties(test_cli_precompile PROPERTIES LABELS unit TIMEOUT 300
                     ENVIRONMENT "HUMMING_CACHE_DIR=${HM_TEST_CACHE_DIR}"
                     PASS_REGULAR_EXPRESSION "precompile: 0 of [0-9]+ kernels spill registers")
# --gaps walks the token counts and prices each layer's table against the cost model's
# best kernel; without --plan it is refused.
add_test(NAME test_cli_tune_gaps COMMAND humming-moe tune --model qwen3-30b-a3b --quant w4a8-mxfp4 --plan --gaps)
set_tests_properties(test_cli_tune_gaps PROPERTIES LABELS unit TIMEOUT 120 ENVIRONMENT "HUMMING_DEVICE_PROFILE=h200"
                     PASS_REGULAR_EXPRESSION "# experts.down +indexed +27 token counts: table / best 1\\.[0-9]+"
                     FAIL_REGULAR_EXPRESSION "unsupported|rror")
add_test(NAME test_cli_tune_gaps_needs_plan COMMAND humming-moe tune --model tiny --gaps)
set_tests_properties(test_cli_tune_gaps_needs_plan PROPERTIES LABELS unit TIMEOUT 60 WILL_FAIL TRUE)
# --layer narrows the run to one of the model's layers; a name the model lacks is refused
# with the ones it has.
add_test(NAME test_cli_tune_layer COMMAND humming-moe tune --model deepseek-v3 --quant w4a16 --plan --layer experts.down)
set_tests_properties(test_cli_tune_layer PROPERTIES LABELS unit TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "experts.down +grouped_masked"
                     FAIL_REGULAR_EXPRESSION "experts.gate_up +|dense.down +|unsupported")
add_test(NAME test_cli_tune_layer_unknown COMMAND humming-moe tune --model deepseek-v3 --plan --layer shared.down)
set_tests_properties(test_cli_tune_layer_unknown PROPERTIES LABELS unit TIMEOUT 60 WILL_FAIL TRUE)
# --max-m keeps the buckets that start below a valid M: DeepSeek-V3's masked down up to two
# tokens (valid M 18) is the buckets of 9 and 33 rows.
add_test(NAME test_cli_tune_max_m COMMAND humming-moe tune --model deepseek-v3 --quant w4a16 --plan --layout masked
                                          --layer experts.down --max-m 18)
set_tests_properties(test_cli_tune_max_m PROPERTIES LABELS unit TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "grouped_masked +33 "
                     FAIL_REGULAR_EXPRESSION "grouped_masked +129 |unsupported")
# gpt-oss-120b's K = 2880 is no whole number of 128-groups: w4a16 is refused for it, and
# w4a16-g32 (groups of 32, as its checkpoints come) gets every table.
add_test(NAME test_cli_tune_scheme_parts COMMAND humming-moe tune --model gpt-oss-120b --quant w4a16-g32 --plan)
set_tests_properties(test_cli_tune_scheme_parts PROPERTIES LABELS unit TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "experts.down +grouped_masked"
                     FAIL_REGULAR_EXPRESSION "unsupported|rror")
add_test(NAME test_cli_tune_scheme_refused COMMAND humming-moe tune --model gpt-oss-120b --quant w4a16 --plan)
set_tests_properties(test_cli_tune_scheme_refused PROPERTIES LABELS unit TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "group size 128 must be a multiple of 16 dividing K=2880")
