/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every named scheme (weight format x activation type), W8A8 fp8 with 128x128 block
 * scales and 1x128 activation groups and int8 channel x token among them: exact
 * against a double product of the dequantized operands, and close to the product of
 * the unquantized ones.
 */
#include "test_ref_gemm_util.h"

static const char *const scheme_names[] = {"bf16",      "w4a16",       "w4a16-sym", "w8a16",
                                           "w8a8-fp8",  "w8a8-fp8-ch", "w8a8-int8", "w4a8-mxfp4",
                                           "w4a8-int4", "w4a8-nvfp4"};

struct scheme_case {
  const char *name;
  hm_quant_scheme s;
  hm_dtype out;
  int64_t m, n, k;
};

/* ||C - X W^T|| / ||X W^T|| over the unquantized operands, in double. */
static double error_vs_unquantized(const float *x, const float *wf, const float *c, int64_t m, int64_t n,
                                   int64_t k) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double ref = 0;
      for (int64_t kk = 0; kk < k; kk++) ref += (double)x[i * k + kk] * wf[j * k + kk];
      num += (c[i * n + j] - ref) * (c[i * n + j] - ref);
      den += ref * ref;
    }
  return sqrt(num / den);
}

static void run_case(hm_rng *rng, const struct scheme_case *t) {
  hm_host_weights w = {0};
  float *wf = rg_alloc((size_t)(t->n * t->k) * sizeof(float));
  hm_rng_fill_normal(rng, wf, (size_t)(t->n * t->k), 0.05f);
  HM_ASSERT_OK(hm_host_weights_alloc(&w, &t->s.weight, 1, t->n, t->k));
  HM_ASSERT_OK(hm_quantize_weights(wf, &w));
  rg_acts a;
  rg_acts_make(rng, t->s.act, t->s.act_scale, t->m, t->k, &a);
  /* The unquantized activations are gone; their dequantized values stand in (act error is separate). */
  size_t c_bytes = (size_t)(t->m * t->n) * (size_t)hm_dtype_bits(t->out) / 8;
  void *c = rg_alloc(c_bytes);
  hm_ref_gemm_problem p = {.w = &w, .act = t->s.act, .act_scale = t->s.act_scale, .out = t->out};
  p.args = (hm_gemm_args){.type = HM_GEMM_DENSE, .m = t->m, .a = a.q, .a_scale = a.scales, .c = c};
  HM_ASSERT_OK(hm_ref_gemm(&p));

  double *ref = rg_alloc((size_t)(t->m * t->n) * sizeof(double));
  rg_naive(&w, 0, a.f32, t->m, NULL, ref);
  double err = rg_rel_error(t->out, c, ref, t->m * t->n);
  if (err > rg_tolerance(t->out)) fail_msg("%s: rel error %.3g vs dequantized operands", t->name, err);
  if (t->out == HM_F32) {
    double bound = hm_quant_error_bound(&t->s.weight) + 1e-3;
    double qerr = error_vs_unquantized(a.f32, wf, c, t->m, t->n, t->k);
    if (qerr > bound)
      fail_msg("%s: rel error %.3g vs unquantized weights > bound %.3g", t->name, qerr, bound);
  }
  free(ref);
  free(c);
  rg_acts_free(&a);
  free(wf);
  hm_host_weights_free(&w);
}

static void every_named_scheme(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("ref_gemm_schemes"));
  for (size_t i = 0; i < HM_ARRAY_SIZE(scheme_names); i++) {
    struct scheme_case t = {scheme_names[i], {{0}, HM_BF16, HM_ACT_SCALE_NONE}, HM_F32, 19, 128, 384};
    HM_ASSERT_OK(hm_quant_scheme_parse(scheme_names[i], &t.s));
    run_case(&rng, &t);
    t.out = HM_BF16;
    t.m = 3;
    run_case(&rng, &t);
  }
}

/* Activation scale layouts the schemes do not name: partial last 1x128 group, fp8 per token. */
static void activation_scale_layouts(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("ref_gemm_act_scales"));
  hm_quant_format i8_channel = rg_format(HM_I8, HM_F32, HM_SCALE_CHANNEL, 0, false);
  hm_quant_format fp8_block = rg_format(HM_F8E4M3, HM_F32, HM_SCALE_BLOCK, 128, false);
  const struct scheme_case cases[] = {
      {"int8 x int8 g128, K = 200", {i8_channel, HM_I8, HM_ACT_SCALE_GROUP128}, HM_F32, 11, 48, 200},
      {"int8 x fp8 token", {i8_channel, HM_F8E4M3, HM_ACT_SCALE_TOKEN}, HM_F16, 5, 33, 72},
      {"fp8 block x fp8 token", {fp8_block, HM_F8E4M3, HM_ACT_SCALE_TOKEN}, HM_F32, 7, 256, 256},
      {"fp8 block x int8 g128", {fp8_block, HM_I8, HM_ACT_SCALE_GROUP128}, HM_F32, 2, 128, 512},
  };
  for (size_t i = 0; i < HM_ARRAY_SIZE(cases); i++) run_case(&rng, &cases[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_named_scheme),
      cmocka_unit_test(activation_scale_layouts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
