/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fp8 weights (128x128 blocks, channel, group, tensor scales; e4m3 and e5m2) and the
 * unquantized f16/bf16 "format", with an expert dimension.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_quant_check.h"

static const float magnitudes[] = {1.0f, 0.003f, 200.0f};

/* fp8 scales are absmax / max_finite, stored in the scale type. */
static void check_fp8_scales(const hm_host_weights *w, const float *x) {
  const hm_quant_format *f = &w->fmt;
  float top = f->weight == HM_F8E4M3 ? 448.0f : 57344.0f;
  for (int64_t e = 0; e < w->experts; e++)
    for (int64_t r = 0; r < w->n; r++)
      for (int64_t c = 0; c < w->k; c++) {
        float want = qc_group_absmax(w, x, e, r, c) / top;
        uint8_t buf[4];
        HM_ASSERT_OK(hm_convert_from_f32(f->scale, &want, buf, 1));
        assert_true(qc_scale(w, e, r, c) == hm_load_f32(f->scale, buf, 0));
        if (f->scale_kind != HM_SCALE_TENSOR)
          c += (f->scale_kind == HM_SCALE_CHANNEL ? w->k : f->group_k) - 1;
      }
}

static void run_fp8(hm_dtype weight, hm_dtype scale, hm_scale_kind kind, int group_n, int group_k, int64_t n,
                    int64_t k) {
  hm_quant_format f = {weight, scale, kind, group_k, group_n, false, false};
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("fp8"));
  float *x = qc_normal_weights(&rng, 3, n, k, magnitudes);
  hm_host_weights w;
  double err = qc_round_trip(&f, 3, n, k, x, &w);
  double bound = hm_quant_error_bound(&f);
  printf("# %s %s kind %d %dx%d: rel error %.5f bound %.5f\n", hm_dtype_name(weight), hm_dtype_name(scale),
         (int)kind, group_n, group_k, err, bound);
  assert_true(err <= bound);
  check_fp8_scales(&w, x);
  hm_host_weights_free(&w);
  free(x);
}

static void fp8_block_128x128(void **state) {
  (void)state;
  run_fp8(HM_F8E4M3, HM_F32, HM_SCALE_BLOCK, 128, 128, 256, 384);
}

static void fp8_channel_group_tensor(void **state) {
  (void)state;
  run_fp8(HM_F8E4M3, HM_F32, HM_SCALE_CHANNEL, 0, 0, 37, 200);
  run_fp8(HM_F8E4M3, HM_BF16, HM_SCALE_CHANNEL, 0, 0, 37, 200);
  run_fp8(HM_F8E4M3, HM_F32, HM_SCALE_TENSOR, 0, 0, 37, 200);
  run_fp8(HM_F8E5M2, HM_F16, HM_SCALE_GROUP, 0, 128, 37, 256);
  run_fp8(HM_F8E5M2, HM_F32, HM_SCALE_CHANNEL, 0, 0, 37, 200);
}

/* A global scale on top of f16 group scales: stored scales stay within [0, 1]. */
static void fp8_with_global_scale(void **state) {
  (void)state;
  hm_quant_format f = {HM_F8E4M3, HM_F16, HM_SCALE_GROUP, 64, 0, false, true};
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("fp8_with_global_scale"));
  float *x = qc_normal_weights(&rng, 3, 33, 128, magnitudes);
  hm_host_weights w;
  double err = qc_round_trip(&f, 3, 33, 128, x, &w);
  assert_true(err <= hm_quant_error_bound(&f));
  for (int64_t e = 0; e < 3; e++) {
    float absmax = 0.0f;
    for (int64_t i = 0; i < 33 * 128; i++) absmax = fmaxf(absmax, fabsf(x[e * 33 * 128 + i]));
    assert_true(w.global_scale[e] == absmax / 448.0f);
    float top = 0.0f;
    for (int64_t r = 0; r < 33; r++) top = fmaxf(top, fmaxf(qc_scale(&w, e, r, 0), qc_scale(&w, e, r, 64)));
    assert_true(top == 1.0f);
  }
  hm_host_weights_free(&w);
  free(x);
}

/* 16-bit weights: two per word, low half first; dequantization is the plain conversion. */
static void unquantized_16bit(void **state) {
  (void)state;
  static const hm_dtype types[] = {HM_F16, HM_BF16};
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("unquantized_16bit"));
  for (int t = 0; t < 2; t++) {
    hm_quant_format f = {types[t], types[t], HM_SCALE_NONE, 0, 0, false, false};
    int64_t n = 5, k = 33; /* odd K: the last word of a row holds one value */
    float *x = qc_normal_weights(&rng, 2, n, k, magnitudes);
    float deq[5 * 33];
    hm_host_weights w;
    HM_ASSERT_OK(hm_host_weights_alloc(&w, &f, 2, n, k));
    assert_null(w.scales);
    assert_null(w.zeros);
    HM_ASSERT_OK(hm_quantize_weights(x, &w));
    for (int64_t e = 0; e < 2; e++) {
      HM_ASSERT_OK(hm_dequantize_rows(&w, e, 0, n, deq));
      for (int64_t r = 0; r < n; r++)
        for (int64_t c = 0; c < k; c++) {
          float v = x[(e * n + r) * k + c];
          uint16_t want = types[t] == HM_F16 ? hm_f16_from_f32(v) : hm_bf16_from_f32(v);
          assert_int_equal(qc_bits_at(w.qweight + (e * n + r) * 17, c, 16), want);
          assert_true(deq[r * k + c] == (types[t] == HM_F16 ? hm_f16_to_f32(want) : hm_bf16_to_f32(want)));
        }
      double err = hm_rel_error(deq, x + e * n * k, (size_t)(n * k));
      if (!(err <= hm_quant_error_bound(&f))) fail_msg("%s: rel error %g", hm_dtype_name(types[t]), err);
      float rows[2 * 33];
      HM_ASSERT_OK(hm_dequantize_rows(&w, e, 3, 2, rows));
      assert_memory_equal(rows, deq + 3 * k, sizeof(rows));
    }
    hm_host_weights_free(&w);
    free(x);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(fp8_block_128x128),
      cmocka_unit_test(fp8_channel_group_tensor),
      cmocka_unit_test(fp8_with_global_scale),
      cmocka_unit_test(unquantized_16bit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
