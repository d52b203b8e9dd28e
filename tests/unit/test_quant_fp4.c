/* SPDX-License-Identifier: Apache-2.0 */
/*
 * MXFP4 (e2m1 + e8m0 per 32, OCP scale rule) and NVFP4 (e2m1 + e4m3 per 16 + f32
 * per-expert global scale), with an expert dimension.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_quant_check.h"

#define EXPERTS 3
#define N 29
#define K 256

static const float magnitudes[EXPERTS] = {1.0f, 0.02f, 500.0f};

/* OCP MX: scale = 2^(floor(log2(absmax)) - 2), since e2m1's largest power of two is 2^2. */
static void mxfp4_scale_rule_and_error(void **state) {
  (void)state;
  hm_quant_format f = {HM_F4E2M1, HM_E8M0, HM_SCALE_GROUP, 32, 0, false, false};
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("mxfp4"));
  float *x = qc_normal_weights(&rng, EXPERTS, N, K, magnitudes);
  hm_host_weights w;
  double err = qc_round_trip(&f, EXPERTS, N, K, x, &w);
  printf("# mxfp4: rel error %.5f bound %.5f\n", err, hm_quant_error_bound(&f));
  assert_true(err <= hm_quant_error_bound(&f));
  const uint8_t *codes = w.scales;
  for (int64_t e = 0; e < EXPERTS; e++)
    for (int64_t r = 0; r < N; r++)
      for (int64_t g = 0; g < K / 32; g++) {
        float absmax = qc_group_absmax(&w, x, e, r, g * 32);
        int want = (int)floor(log2((double)absmax)) - 2 + 127;
        assert_int_equal(codes[(e * N + r) * (K / 32) + g], want);
        assert_true(qc_scale(&w, e, r, g * 32) == (float)ldexp(1.0, want - 127));
      }
  hm_host_weights_free(&w);
  free(x);
}

/* NVFP4: global = absmax_expert / (448 * 6); group scale = e4m3(absmax_group / 6 / global). */
static void nvfp4_global_and_group_scales(void **state) {
  (void)state;
  hm_quant_format f = {HM_F4E2M1, HM_F8E4M3, HM_SCALE_GROUP, 16, 0, false, true};
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("nvfp4"));
  float *x = qc_normal_weights(&rng, EXPERTS, N, K, magnitudes);
  hm_host_weights w;
  double err = qc_round_trip(&f, EXPERTS, N, K, x, &w);
  printf("# nvfp4: rel error %.5f bound %.5f\n", err, hm_quant_error_bound(&f));
  assert_true(err <= hm_quant_error_bound(&f));
  const uint8_t *codes = w.scales;
  for (int64_t e = 0; e < EXPERTS; e++) {
    float absmax = 0.0f;
    for (int64_t i = 0; i < N * K; i++) absmax = fmaxf(absmax, fabsf(x[e * N * K + i]));
    float global = (absmax / 6.0f) / 448.0f;
    assert_true(fabsf(w.global_scale[e] - global) <= 1e-6f * global);
    float top = 0.0f;
    for (int64_t r = 0; r < N; r++)
      for (int64_t g = 0; g < K / 16; g++) {
        float want = qc_group_absmax(&w, x, e, r, g * 16) / 6.0f / w.global_scale[e];
        assert_int_equal(codes[(e * N + r) * (K / 16) + g], hm_e4m3_from_f32(want));
        top = fmaxf(top, qc_scale(&w, e, r, g * 16));
      }
    assert_true(top == 448.0f); /* the group holding the expert's absmax uses the whole e4m3 range */
  }
  hm_host_weights_free(&w);
  free(x);
}

/* Without a global scale, e4m3 group scales must fit 448: small weights do, large ones are refused. */
static void nvfp4_without_global_scale(void **state) {
  (void)state;
  hm_quant_format f = {HM_F4E2M1, HM_F8E4M3, HM_SCALE_GROUP, 16, 0, false, false};
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("nvfp4_no_global"));
  const float unit[1] = {1.0f};
  float *x = qc_normal_weights(&rng, 1, N, K, unit);
  hm_host_weights w;
  double err = qc_round_trip(&f, 1, N, K, x, &w);
  assert_true(err <= hm_quant_error_bound(&f));
  x[5] = 1e4f;
  assert_int_equal(hm_quantize_weights(x, &w), HM_INVALID_ARGUMENT);
  hm_host_weights_free(&w);
  free(x);
}

/* An all-zero group keeps a finite scale and zero codes. */
static void zero_groups(void **state) {
  (void)state;
  static const hm_quant_format fmts[] = {
      {HM_F4E2M1, HM_E8M0, HM_SCALE_GROUP, 32, 0, false, false},
      {HM_F4E2M1, HM_F8E4M3, HM_SCALE_GROUP, 16, 0, false, true},
  };
  float x[2 * 64] = {0};
  x[64 + 3] = 2.0f;
  float deq[2 * 64];
  for (int i = 0; i < 2; i++) {
    hm_host_weights w;
    HM_ASSERT_OK(hm_host_weights_alloc(&w, &fmts[i], 1, 2, 64));
    HM_ASSERT_OK(hm_quantize_weights(x, &w));
    HM_ASSERT_OK(hm_dequantize_rows(&w, 0, 0, 2, deq));
    assert_memory_equal(deq, x, sizeof(x));
    hm_host_weights_free(&w);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(mxfp4_scale_rule_and_error),
      cmocka_unit_test(nvfp4_global_and_group_scales),
      cmocka_unit_test(nvfp4_without_global_scale),
      cmocka_unit_test(zero_groups),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
