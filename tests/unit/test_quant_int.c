/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Integer weight formats: round to nearest on each group's grid, scale and zero-point
 * rules (absmax/qmax symmetric, min/max with a rounded zero point), error bounds, with
 * an expert dimension.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_quant_check.h"

#define EXPERTS 3
#define N 37
#define K 256

static const float magnitudes[EXPERTS] = {1.0f, 0.01f, 30.0f};

static float round_to_scale_dtype(hm_dtype d, float s) {
  uint8_t buf[4];
  HM_ASSERT_OK(hm_convert_from_f32(d, &s, buf, 1));
  return hm_load_f32(d, buf, 0);
}

/* Symmetric: s = absmax / (2^(b-1) - 1); with zero points: s = (max - min) / (2^b - 1), z = rint(-min / s).
 */
static void check_scale_rules(const hm_host_weights *w, const float *x) {
  const hm_quant_format *f = &w->fmt;
  int bits = hm_dtype_bits(f->weight);
  for (int64_t e = 0; e < w->experts; e++) {
    for (int64_t r = 0; r < w->n; r++) {
      for (int64_t c = 0; c < w->k; c += f->scale_kind == HM_SCALE_GROUP ? f->group_k : w->k) {
        float s = qc_scale(w, e, r, c);
        if (!f->zero_point) {
          float qmax = bits > 1 ? (float)((1 << (bits - 1)) - 1) : 1.0f;
          float want = round_to_scale_dtype(f->scale, qc_group_absmax(w, x, e, r, c) / qmax);
          if (s != want)
            fail_msg("scale (%lld, %lld, %lld) %g, want %g", (long long)e, (long long)r, (long long)c,
                     (double)s, (double)want);
          continue;
        }
        float lo = 0.0f, hi = 0.0f;
        int64_t c1 = f->scale_kind == HM_SCALE_GROUP ? c + f->group_k : w->k;
        for (int64_t j = c; j < c1; j++) {
          lo = fminf(lo, x[(e * w->n + r) * w->k + j]);
          hi = fmaxf(hi, x[(e * w->n + r) * w->k + j]);
        }
        assert_true(s == round_to_scale_dtype(f->scale, (hi - lo) / (float)((1 << bits) - 1)));
        float z = rintf(-lo / s);
        z = fminf(fmaxf(z, 0.0f), (float)((1 << bits) - 1));
        assert_true(qc_zero(w, e, r, c) == z);
      }
    }
  }
}

static void run_format(hm_dtype weight, hm_dtype scale, hm_scale_kind kind, int group_k, bool zp) {
  hm_quant_format f = {weight, scale, kind, group_k, 0, zp, false};
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed(hm_dtype_name(weight)));
  float *x = qc_normal_weights(&rng, EXPERTS, N, K, magnitudes);
  hm_host_weights w;
  double err = qc_round_trip(&f, EXPERTS, N, K, x, &w);
  double bound = hm_quant_error_bound(&f);
  printf("# %s %s kind %d g%d zp %d: rel error %.5f bound %.5f\n", hm_dtype_name(weight),
         hm_dtype_name(scale), (int)kind, group_k, zp, err, bound);
  assert_true(err <= bound);
  check_scale_rules(&w, x);
  hm_host_weights_free(&w);
  free(x);
}

static void u4_zero_point_groups(void **state) {
  (void)state;
  run_format(HM_U4, HM_BF16, HM_SCALE_GROUP, 32, true);
  run_format(HM_U4, HM_BF16, HM_SCALE_GROUP, 64, true);
  run_format(HM_U4, HM_F16, HM_SCALE_GROUP, 128, true);
  run_format(HM_U4, HM_F32, HM_SCALE_CHANNEL, 0, true);
}

static void signed_symmetric(void **state) {
  (void)state;
  run_format(HM_I4, HM_BF16, HM_SCALE_GROUP, 128, false);
  run_format(HM_I4, HM_F32, HM_SCALE_CHANNEL, 0, false);
  run_format(HM_I8, HM_F32, HM_SCALE_CHANNEL, 0, false);
  run_format(HM_I8, HM_BF16, HM_SCALE_GROUP, 16, false);
}

static void unsigned_without_zero_points(void **state) {
  (void)state;
  run_format(HM_U8, HM_BF16, HM_SCALE_GROUP, 128, false);
  run_format(HM_U4, HM_F16, HM_SCALE_GROUP, 64, false);
  run_format(HM_U6, HM_F32, HM_SCALE_CHANNEL, 0, false);
  run_format(HM_U4, HM_F32, HM_SCALE_TENSOR, 0, false);
}

static void narrow_widths(void **state) {
  (void)state;
  run_format(HM_U3, HM_F16, HM_SCALE_GROUP, 64, true);
  run_format(HM_U2, HM_BF16, HM_SCALE_GROUP, 32, true);
  run_format(HM_U1, HM_F16, HM_SCALE_GROUP, 32, true);
  run_format(HM_U5, HM_BF16, HM_SCALE_GROUP, 128, true);
  run_format(HM_U7, HM_F32, HM_SCALE_CHANNEL, 0, true);
  run_format(HM_U3, HM_F32, HM_SCALE_GROUP, 32, false);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(u4_zero_point_groups),
      cmocka_unit_test(signed_symmetric),
      cmocka_unit_test(unsigned_without_zero_points),
      cmocka_unit_test(narrow_widths),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
