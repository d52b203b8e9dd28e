/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The activation stage on the host backend: SiLU-and-mul, GELU-and-mul, squared ReLU and
 * the identity against the formulas in double, the row map (-1 rows untouched), and the
 * requantization of 8-bit paths (scales, values) against hm_dequantize_activations.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hm_test.h"
#include "moe/moe_internal.h"
#include "numfmt.h"
#include "quant.h"

static double formula(int fn, double g, double u) {
  switch (fn) {
    case HM_ACT_FN_SILU_MUL: return g / (1.0 + exp(-g)) * u;
    case HM_ACT_FN_GELU_MUL: return 0.5 * g * (1.0 + erf(g / sqrt(2.0))) * u;
    case HM_ACT_FN_RELU2: return g > 0 ? g * g : 0.0;
    default: return g;
  }
}

typedef struct act_case {
  int fn;
  int64_t rows, width;
  hm_dtype out;
  hm_act_scale_kind scale;
} act_case;

/*
 * The most one requantized element may be off: half an int8 step, or half an e4m3 ulp (3
 * mantissa bits) plus half its smallest subnormal step, each with slack for the bf16 rounding
 * of the activation before it is quantized. A norm bound would fail on heavy-tailed rows,
 * whose large amax makes every step coarse.
 */
static double requant_bound(hm_dtype out, double scale, double want) {
  if (out == HM_I8) return 0.5 * scale * (1 + 1e-3) + 0x1p-8 * fabs(want);
  return (0x1p-4 + 0x1p-8) * fabs(want) + 0x1p-9 * scale;
}

/*
 * Runs one case with a shuffled row map, checks 8-bit outputs element by element, and
 * returns ||out - formula|| / ||formula||.
 */
static double run_case(const act_case *k, hm_rng *rng) {
  bool gated = k->fn == HM_ACT_FN_SILU_MUL || k->fn == HM_ACT_FN_GELU_MUL;
  int64_t stride = gated ? 2 * k->width : k->width, items = k->rows + 3;
  int64_t groups = k->scale == HM_ACT_SCALE_GROUP128 ? (k->width + 127) / 128 : 1;
  size_t elem = (size_t)hm_dtype_bits(k->out) / 8, n_out = (size_t)(k->rows * k->width);
  float *in_f = malloc((size_t)(k->rows * stride) * sizeof(float));
  uint16_t *in = malloc((size_t)(k->rows * stride) * sizeof(uint16_t));
  hm_rng_fill_normal(rng, in_f, (size_t)(k->rows * stride), 2.0f);
  HM_ASSERT_OK(hm_convert_from_f32(HM_BF16, in_f, in, k->rows * stride));
  /* Items map to rows in reverse; three extra items are -1. */
  int32_t *row_of = malloc((size_t)items * sizeof(int32_t));
  for (int64_t i = 0; i < items; i++) row_of[i] = i < k->rows ? (int32_t)(k->rows - 1 - i) : -1;
  uint8_t *out = malloc(n_out * elem);
  float *scales = malloc((size_t)(k->rows * groups) * sizeof(float)), *got = malloc(n_out * sizeof(float));
  float *want = malloc(n_out * sizeof(float));
  memset(out, 0x7f, n_out * elem);
  hm_moe_act_args a = {.fn = k->fn,
                       .items = items,
                       .row_of = row_of,
                       .in = in,
                       .in_stride = stride,
                       .width = k->width,
                       .out_type = k->out,
                       .scale = k->scale,
                       .out = out,
                       .out_scale = scales};
  hm_moe_exec x = {.engine = hm_test_host_engine()};
  HM_ASSERT_OK(hm_moe_act_run(&x, NULL, &a));
  assert_int_equal(x.launches, 1);
  HM_ASSERT_OK(hm_dequantize_activations(out, scales, k->rows, k->width, k->out, k->scale, got));
  for (int64_t r = 0; r < k->rows; r++)
    for (int64_t c = 0; c < k->width; c++) {
      double g = hm_bf16_to_f32(in[r * stride + c]),
             u = gated ? hm_bf16_to_f32(in[r * stride + k->width + c]) : 0;
      want[r * k->width + c] = (float)formula(k->fn, g, u);
    }
  for (int64_t r = 0; k->scale != HM_ACT_SCALE_NONE && r < k->rows; r++)
    for (int64_t g = 0; g < groups; g++) {
      float amax = 0.0f;
      int64_t c0 = g * (k->scale == HM_ACT_SCALE_GROUP128 ? 128 : k->width);
      int64_t c1 = k->scale == HM_ACT_SCALE_GROUP128 && c0 + 128 < k->width ? c0 + 128 : k->width;
      for (int64_t c = c0; c < c1; c++) amax = fmaxf(amax, fabsf(want[r * k->width + c]));
      float qmax = k->out == HM_F8E4M3 ? 448.0f : 127.0f, s = scales[r * groups + g];
      assert_true(fabsf(s - amax / qmax) <= 1e-3f * amax / qmax);
      for (int64_t c = c0; c < c1; c++) {
        double w = want[r * k->width + c], e = fabs((double)got[r * k->width + c] - w);
        if (e > requant_bound(k->out, s, w))
          fail_msg("row %lld col %lld: %g against %g, scale %g", (long long)r, (long long)c,
                   got[r * k->width + c], w, s);
      }
    }
  double err = hm_rel_error(got, want, n_out);
  hm_engine_destroy(x.engine);
  free(in_f), free(in), free(row_of), free(out), free(scales), free(got), free(want);
  return err;
}

static void gated_and_plain_functions(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_act"));
  const act_case cases[] = {
      {HM_ACT_FN_SILU_MUL, 7, 128, HM_BF16, HM_ACT_SCALE_NONE},
      {HM_ACT_FN_GELU_MUL, 5, 100, HM_BF16, HM_ACT_SCALE_NONE},
      {HM_ACT_FN_RELU2, 6, 256, HM_BF16, HM_ACT_SCALE_NONE},
      {HM_ACT_FN_IDENTITY, 4, 300, HM_F16, HM_ACT_SCALE_NONE},
      {HM_ACT_FN_SILU_MUL, 3, 2100, HM_F16, HM_ACT_SCALE_NONE},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    double err = run_case(&cases[i], &rng);
    if (err > 4e-3) fail_msg("case %zu: relative error %g", i, err);
  }
}

static void requantization_for_8bit_paths(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_act_8bit"));
  const act_case cases[] = {
      {HM_ACT_FN_SILU_MUL, 5, 256, HM_I8, HM_ACT_SCALE_TOKEN},
      {HM_ACT_FN_SILU_MUL, 5, 300, HM_I8, HM_ACT_SCALE_GROUP128},
      {HM_ACT_FN_GELU_MUL, 4, 384, HM_F8E4M3, HM_ACT_SCALE_GROUP128},
      {HM_ACT_FN_IDENTITY, 4, 200, HM_F8E4M3, HM_ACT_SCALE_TOKEN},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) run_case(&cases[i], &rng);
}

static void bad_arguments_are_refused(void **state) {
  (void)state;
  uint16_t in[16] = {0};
  uint8_t out[16];
  hm_moe_exec x = {.engine = hm_test_host_engine()};
  hm_moe_act_args ok = {.fn = HM_ACT_FN_SILU_MUL,
                        .items = 1,
                        .in = in,
                        .in_stride = 8,
                        .width = 4,
                        .out_type = HM_BF16,
                        .out = out};
  HM_ASSERT_OK(hm_moe_act_run(&x, NULL, &ok));
  hm_moe_act_args bad = ok;
  bad.in_stride = 6;
  assert_int_equal(hm_moe_act_run(&x, NULL, &bad), HM_INVALID_ARGUMENT);
  bad = ok;
  bad.out_type = HM_I8;
  assert_int_equal(hm_moe_act_run(&x, NULL, &bad), HM_INVALID_ARGUMENT);
  bad.scale = HM_ACT_SCALE_TOKEN;
  assert_int_equal(hm_moe_act_run(&x, NULL, &bad), HM_INVALID_ARGUMENT); /* no scale buffer */
  bad = ok;
  bad.scale = HM_ACT_SCALE_TOKEN;
  assert_int_equal(hm_moe_act_run(&x, NULL, &bad), HM_INVALID_ARGUMENT);
  bad = ok;
  bad.fn = 9;
  assert_int_equal(hm_moe_act_run(&x, NULL, &bad), HM_INVALID_ARGUMENT);
  bad = ok;
  bad.out_type = HM_F32;
  assert_int_equal(hm_moe_act_run(&x, NULL, &bad), HM_INVALID_ARGUMENT);
  hm_engine_destroy(x.engine);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gated_and_plain_functions),
      cmocka_unit_test(requantization_for_8bit_paths),
      cmocka_unit_test(bad_arguments_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
