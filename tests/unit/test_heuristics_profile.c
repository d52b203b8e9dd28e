/* SPDX-License-Identifier: Apache-2.0 */
/* Device profiles: built-in table, selection by HUMMING_DEVICE_PROFILE, host default; roofline. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine.h"
#include "heuristics/device_profile.h"
#include "hm_test.h"
#include "params.h"
#include "heuristics/roofline.h"

static void every_builtin_profile_is_complete(void **state) {
  (void)state;
  assert_true(hm_device_profile_count() >= 7);
  for (int i = 0; i < hm_device_profile_count(); i++) {
    hm_device_profile p;
    HM_ASSERT_OK(hm_device_profile_builtin(hm_device_profile_name(i), &p));
    assert_true(p.sm_count > 0 && p.mem_bw_gbs > 0 && p.tflops_f16 > 0);
    assert_true(p.smem_per_block_bytes <= p.smem_per_sm_bytes);
    assert_true(p.arch >= 75);
  }
  hm_device_profile p;
  assert_int_equal(hm_device_profile_builtin("v100", &p), HM_INVALID_ARGUMENT);
}

static void h20_is_compute_poor_and_bandwidth_rich(void **state) {
  (void)state;
  hm_device_profile h20, h200;
  HM_ASSERT_OK(hm_device_profile_builtin("h20", &h20));
  HM_ASSERT_OK(hm_device_profile_builtin("h200", &h200));
  assert_int_equal(h20.sm_count, 78);
  /* Ridge point (flop per byte) far lower on the H20: decode-like shapes stay memory-bound longer. */
  double ridge_h20 = h20.tflops_f16 * 1e12 / (h20.mem_bw_gbs * 1e9);
  double ridge_h200 = h200.tflops_f16 * 1e12 / (h200.mem_bw_gbs * 1e9);
  assert_true(ridge_h20 * 4 < ridge_h200);
}

static void env_selects_profile_for_host_engine(void **state) {
  (void)state;
  hm_engine *e = hm_test_host_engine();
  hm_device_profile p;
  HM_ASSERT_OK(hm_device_profile_for_engine(e, &p));
  assert_string_equal(p.name, "h200");
  setenv("HUMMING_DEVICE_PROFILE", "a100", 1);
  hm_params_reload();
  HM_ASSERT_OK(hm_device_profile_for_engine(e, &p));
  assert_string_equal(p.name, "a100");
  assert_int_equal(p.sm_count, 108);
  setenv("HUMMING_DEVICE_PROFILE", "mystery", 1);
  hm_params_reload();
  assert_int_equal(hm_device_profile_for_engine(e, &p), HM_INVALID_ARGUMENT);
  unsetenv("HUMMING_DEVICE_PROFILE");
  hm_params_reload();
  hm_engine_destroy(e);
}

/* Regression: "NVIDIA H200" once matched the h20 profile, so every %roof on the H200 used H20 rates. */
static void device_names_pick_their_own_profile(void **state) {
  (void)state;
  const char *names[][2] = {{"NVIDIA H200 (132 SMs, sm_90)", "h200"}, {"NVIDIA H20 (78 SMs, sm_90)", "h20"},
                            {"NVIDIA H100 80GB HBM3 (132 SMs, sm_90)", "h100"},
                            {"NVIDIA A100-SXM4-80GB (108 SMs, sm_80)", "a100"},
                            {"NVIDIA GeForce RTX 4090 (128 SMs, sm_89)", "rtx4090"},
                            {"NVIDIA L40S (142 SMs, sm_89)", "l40s"}};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    hm_engine fake = {.kind = HM_BACKEND_CUDA, .arch = 90, .sm_count = 100};
    snprintf(fake.device_name, sizeof(fake.device_name), "%s", names[i][0]);
    hm_device_profile p;
    HM_ASSERT_OK(hm_device_profile_for_engine(&fake, &p));
    assert_string_equal(p.name, names[i][1]);
    assert_int_equal(p.sm_count, 100);
  }
}

static void roofline_dense_w4a16_counts_bytes_and_flops(void **state) {
  (void)state;
  hm_device_profile p;
  HM_ASSERT_OK(hm_device_profile_builtin("h200", &p));
  hm_layer_config c = hm_test_layer_config("w4a16", 8192, 8192, 1, 0);
  hm_roofline r;
  HM_ASSERT_OK(hm_roofline_estimate(&c, 1, 1, &p, &r));
  /* 4-bit weights: N*K/2 bytes, bf16 scales per 128 and u4 zero points per group. */
  double expect_w = 8192.0 * 8192 / 2 + 8192.0 * 64 * 2 + 64.0 * 8192 / 2;
  assert_true(fabs(r.weight_bytes - expect_w) < 1);
  assert_true(r.memory_bound);
  assert_true(fabs(r.flops - 2.0 * 8192 * 8192) < 1);
  HM_ASSERT_OK(hm_roofline_estimate(&c, 16384, 1, &p, &r));
  assert_false(r.memory_bound);
  assert_true(fabs(r.predicted_us - r.flops / 790e12 * 1e6) < 1e-6 * r.predicted_us);
}

static void roofline_moe_counts_only_active_experts(void **state) {
  (void)state;
  hm_device_profile p;
  HM_ASSERT_OK(hm_device_profile_builtin("h200", &p));
  hm_layer_config c = hm_test_layer_config("w4a16", 4096, 7168, 256, 0);
  hm_roofline one, many;
  HM_ASSERT_OK(hm_roofline_estimate(&c, 8, 8, &p, &one));     /* one token, top-8 */
  HM_ASSERT_OK(hm_roofline_estimate(&c, 8192 * 8, 8, &p, &many));
  assert_true(one.active_experts > 7.8 && one.active_experts <= 8.0);
  assert_true(many.active_experts > 255.9 && many.active_experts <= 256.0);
  assert_true(fabs(hm_expected_active_experts(256, 0)) < 1e-12);
  hm_roofline r;
  assert_int_equal(hm_roofline_estimate(&c, -1, 8, &p, &r), HM_INVALID_ARGUMENT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_builtin_profile_is_complete),
      cmocka_unit_test(h20_is_compute_poor_and_bandwidth_rich),
      cmocka_unit_test(env_selects_profile_for_host_engine),
      cmocka_unit_test(device_names_pick_their_own_profile),
      cmocka_unit_test(roofline_dense_w4a16_counts_bytes_and_flops),
      cmocka_unit_test(roofline_moe_counts_only_active_experts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
