/* SPDX-License-Identifier: Apache-2.0 */
/* Activation quantization: fp8 e4m3 and int8, per token and per 1x128 group; f16/bf16 plain. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hm_test.h"
#include "numfmt.h"
#include "quant.h"

#define M 9
#define K 300 /* not a multiple of 128: the last group of a row has 44 columns */

static float act_value(hm_dtype act, const void *q, int64_t i) {
  return act == HM_F8E4M3 ? hm_e4m3_to_f32(((const uint8_t *)q)[i]) : (float)((const int8_t *)q)[i];
}

/*
 * What round-to-nearest may cost element x of a group scaled by s: half a step of int8
 * (s / 2), or of e4m3 half an ulp, 2^-4 of |x| in the normal range and s * 2^-10 among the
 * subnormals (|x / s| < 2^-6). A row's relative error stays within the root of their sum of
 * squares over its norm, whatever the draw: a fixed bound (0.012 on int8 rows of 300
 * normals) failed on a row whose absmax was 5.5 standard deviations.
 */
static double rounding_error(hm_dtype act, float x, float s) {
  return act == HM_I8 ? 0.5 * s : ldexp(fabs((double)x), -4) + ldexp((double)s, -10);
}

static double row_bound(hm_dtype act, const float *x, const float *scales, int width) {
  double err = 0, norm = 0;
  for (int c = 0; c < K; c++) {
    const double e = rounding_error(act, x[c], scales[c / width]);
    err += e * e;
    norm += (double)x[c] * x[c];
  }
  return sqrt(err / norm);
}

/*
 * Each group's scale is absmax / qmax (448 or 127), its largest element lands exactly on
 * +-qmax, every code is the rounded x / s, and the dequantized rows stay within the rounding
 * bound of their scales.
 */
static void check_scaled(hm_dtype act, hm_act_scale_kind kind) {
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed(hm_dtype_name(act)));
  float x[M * K], back[M * K], scales[M * 3];
  int8_t q[M * K];
  for (int r = 0; r < M; r++) hm_rng_fill_normal(&rng, x + r * K, K, ldexpf(1.0f, 3 * r - 12));
  memset(x + 4 * K, 0, K * sizeof(float)); /* an all-zero token */
  HM_ASSERT_OK(hm_quantize_activations(x, M, K, act, kind, q, scales));
  float qmax = act == HM_F8E4M3 ? 448.0f : 127.0f;
  int width = kind == HM_ACT_SCALE_TOKEN ? K : 128, groups = kind == HM_ACT_SCALE_TOKEN ? 1 : 3;
  for (int r = 0; r < M; r++) {
    for (int g = 0; g < groups; g++) {
      int c0 = g * width, c1 = c0 + width < K ? c0 + width : K;
      float absmax = 0.0f;
      int arg = c0;
      for (int c = c0; c < c1; c++)
        if (fabsf(x[r * K + c]) > absmax) absmax = fabsf(x[r * K + c]), arg = c;
      float s = scales[r * groups + g];
      if (absmax == 0.0f) {
        assert_true(s == 1.0f);
      } else {
        assert_true(s == absmax / qmax);
        assert_true(act_value(act, q, r * K + arg) == copysignf(qmax, x[r * K + arg]));
      }
      for (int c = c0; c < c1; c++) {
        float v = x[r * K + c] / s;
        float want =
            act == HM_F8E4M3 ? hm_e4m3_to_f32(hm_e4m3_from_f32(v)) : (float)hm_int_from_f32(HM_I8, v);
        assert_true(act_value(act, q, r * K + c) == want);
      }
    }
  }
  HM_ASSERT_OK(hm_dequantize_activations(q, scales, M, K, act, kind, back));
  for (int r = 0; r < M; r++) {
    for (int c = 0; c < K; c++)
      assert_true(back[r * K + c] == act_value(act, q, r * K + c) * scales[r * groups + c / width]);
    if (r == 4) continue;
    const double err = hm_rel_error(back + r * K, x + r * K, K);
    const double bound = row_bound(act, x + r * K, scales + r * groups, width);
    if (err > bound) fail_msg("%s row %d: rel error %.5f above %.5f", hm_dtype_name(act), r, err, bound);
  }
}

static void fp8_per_token(void **state) {
  (void)state;
  check_scaled(HM_F8E4M3, HM_ACT_SCALE_TOKEN);
}

static void fp8_per_group128(void **state) {
  (void)state;
  check_scaled(HM_F8E4M3, HM_ACT_SCALE_GROUP128);
}

static void int8_per_token(void **state) {
  (void)state;
  check_scaled(HM_I8, HM_ACT_SCALE_TOKEN);
}

static void int8_per_group128(void **state) {
  (void)state;
  check_scaled(HM_I8, HM_ACT_SCALE_GROUP128);
}

static void plain_16bit(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("plain_16bit"));
  float x[M * K], back[M * K];
  uint16_t h[M * K];
  hm_rng_fill_normal(&rng, x, M * K, 3.0f);
  HM_ASSERT_OK(hm_quantize_activations(x, M, K, HM_BF16, HM_ACT_SCALE_NONE, h, NULL));
  HM_ASSERT_OK(hm_dequantize_activations(h, NULL, M, K, HM_BF16, HM_ACT_SCALE_NONE, back));
  for (int i = 0; i < M * K; i++) {
    assert_int_equal(h[i], hm_bf16_from_f32(x[i]));
    assert_true(back[i] == hm_bf16_to_f32(h[i]));
  }
  HM_ASSERT_OK(hm_quantize_activations(x, M, K, HM_F16, HM_ACT_SCALE_NONE, h, NULL));
  for (int i = 0; i < M * K; i++) assert_int_equal(h[i], hm_f16_from_f32(x[i]));
}

static void bad_arguments(void **state) {
  (void)state;
  float x[4] = {1, 2, 3, 4}, s[4];
  uint8_t q[4];
  assert_int_equal(hm_quantize_activations(x, 1, 4, HM_F8E4M3, HM_ACT_SCALE_NONE, q, s), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_quantize_activations(x, 1, 4, HM_BF16, HM_ACT_SCALE_TOKEN, q, s), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_quantize_activations(x, 1, 4, HM_U4, HM_ACT_SCALE_TOKEN, q, s), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_quantize_activations(x, 1, 4, HM_I8, HM_ACT_SCALE_TOKEN, q, NULL), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_quantize_activations(NULL, 1, 4, HM_I8, HM_ACT_SCALE_TOKEN, q, s), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_quantize_activations(x, -1, 4, HM_I8, HM_ACT_SCALE_TOKEN, q, s), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_quantize_activations(x, 1, 0, HM_I8, HM_ACT_SCALE_TOKEN, q, s), HM_INVALID_ARGUMENT);
  x[2] = NAN;
  assert_int_equal(hm_quantize_activations(x, 1, 4, HM_I8, HM_ACT_SCALE_TOKEN, q, s), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "finite"));
  assert_int_equal(hm_dequantize_activations(q, NULL, 1, 4, HM_F8E4M3, HM_ACT_SCALE_GROUP128, x),
                   HM_INVALID_ARGUMENT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(fp8_per_token),  cmocka_unit_test(fp8_per_group128),
      cmocka_unit_test(int8_per_token), cmocka_unit_test(int8_per_group128),
      cmocka_unit_test(plain_16bit),    cmocka_unit_test(bad_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
