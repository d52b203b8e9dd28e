/* SPDX-License-Identifier: Apache-2.0 */
/* Dense reference GEMM against a naive double product, over formats and odd shapes. */
#include "test_ref_gemm_util.h"

struct dense_case {
  const char *name;
  hm_quant_format fmt;
  hm_dtype act, out;
  int64_t m, n, k;
  bool bias;
};

static void run_case(hm_rng *rng, const struct dense_case *t) {
  hm_host_weights w = {0};
  rg_weights(rng, &t->fmt, 2, t->n, t->k, &w);
  rg_acts a;
  rg_acts_make(rng, t->act, HM_ACT_SCALE_NONE, t->m, t->k, &a);
  float *bias_f32 = rg_alloc((size_t)(2 * t->n) * sizeof(float));
  void *bias = t->bias ? rg_bias_make(rng, t->out, 2 * t->n, bias_f32) : NULL;
  size_t c_bytes = (size_t)(t->m * t->n) * (size_t)hm_dtype_bits(t->out) / 8;
  void *c = rg_alloc(c_bytes);
  rg_fill_untouched(c, c_bytes);

  hm_ref_gemm_problem p = {.w = &w, .act = t->act, .out = t->out, .bias = bias};
  p.args = (hm_gemm_args){.type = HM_GEMM_DENSE, .m = t->m, .a = a.q, .c = c};
  HM_ASSERT_OK(hm_ref_gemm(&p));

  /* Dense uses expert 0 (and bias row 0) even when the weights hold more experts. */
  double *ref = rg_alloc((size_t)(t->m * t->n) * sizeof(double));
  rg_naive(&w, 0, a.f32, t->m, bias ? bias_f32 : NULL, ref);
  double err = rg_rel_error(t->out, c, ref, t->m * t->n);
  if (err > rg_tolerance(t->out))
    fail_msg("%s: M=%lld N=%lld K=%lld rel error %.3g > %.3g", t->name, (long long)t->m, (long long)t->n,
             (long long)t->k, err, rg_tolerance(t->out));
  free(ref);
  free(c);
  free(bias);
  free(bias_f32);
  rg_acts_free(&a);
  hm_host_weights_free(&w);
}

static void matches_naive_double_product(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("ref_gemm_dense"));
  hm_quant_format nvfp4 = rg_format(HM_F4E2M1, HM_F8E4M3, HM_SCALE_GROUP, 16, false);
  nvfp4.global_scale = true;
  const struct dense_case cases[] = {
      {"bf16 odd K", rg_format(HM_BF16, HM_BF16, HM_SCALE_NONE, 0, false), HM_BF16, HM_F32, 1, 37, 199,
       false},
      {"f16 f16-out bias", rg_format(HM_F16, HM_F16, HM_SCALE_NONE, 0, false), HM_F16, HM_F16, 7, 33, 257,
       true},
      {"w4a16 u4 zp g128", rg_format(HM_U4, HM_BF16, HM_SCALE_GROUP, 128, true), HM_BF16, HM_BF16, 333, 96,
       384, true},
      {"i4 g32 f32-act", rg_format(HM_I4, HM_F16, HM_SCALE_GROUP, 32, false), HM_F32, HM_F32, 7, 65, 160,
       false},
      {"u8 channel odd K", rg_format(HM_U8, HM_F32, HM_SCALE_CHANNEL, 0, false), HM_F16, HM_F32, 1, 31, 131,
       true},
      {"u3 zp g64", rg_format(HM_U3, HM_F16, HM_SCALE_GROUP, 64, true), HM_F16, HM_F32, 9, 17, 192, false},
      {"mxfp4", rg_format(HM_F4E2M1, HM_E8M0, HM_SCALE_GROUP, 32, false), HM_BF16, HM_F32, 5, 40, 96, true},
      {"nvfp4 global", nvfp4, HM_BF16, HM_BF16, 3, 24, 64, false},
      {"fp8 e5m2 tensor", rg_format(HM_F8E5M2, HM_F32, HM_SCALE_TENSOR, 0, false), HM_F16, HM_F32, 66, 70,
       1030, true},
  };
  for (size_t i = 0; i < HM_ARRAY_SIZE(cases); i++) run_case(&rng, &cases[i]);
}

static void zero_rows_write_nothing(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("ref_gemm_dense_empty"));
  hm_quant_format f = rg_format(HM_U4, HM_BF16, HM_SCALE_GROUP, 128, true);
  hm_host_weights w = {0};
  rg_weights(&rng, &f, 1, 8, 128, &w);
  float a[128] = {0}, c[8];
  rg_fill_untouched(c, sizeof(c));
  hm_ref_gemm_problem p = {.w = &w, .act = HM_F32, .out = HM_F32};
  p.args = (hm_gemm_args){.type = HM_GEMM_DENSE, .m = 0, .a = a, .c = c};
  HM_ASSERT_OK(hm_ref_gemm(&p));
  assert_true(rg_untouched(c, sizeof(c)));
  hm_host_weights_free(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(matches_naive_double_product),
      cmocka_unit_test(zero_rows_write_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
