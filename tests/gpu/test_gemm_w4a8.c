/* SPDX-License-Identifier: Apache-2.0 */
/*
 * W4A8 GEMMs (4-bit weights widened to 8 bits in the W8A8 mma.sync kernel) on the device
 * against the host reference (hm_ref_gemm on the same quantized weights and activations):
 * mxfp4 (e2m1 with e8m0 scales per 32) x fp8 e4m3 and int4 (per-channel scales) x int8,
 * per-token or 1x128 activation scales; dense at M = 1, 7, 64, 333 and the three MoE
 * layouts (indexed gate-up gather and down with top-k weights, grouped-contiguous,
 * grouped-masked) with an expert that gets no tokens. N and K are not powers of two (K
 * an odd multiple of 16 for int4, whose last k32 step is half padding). Adversarial
 * cases draw each e8m0 scale (or int4 channel scale) from 2^-20..2^20, so one column's
 * K groups span 2^40. C is poisoned first: every element the reference writes must be
 * written, no other.
 */
#include "gemm_moe_util.h"
#include "kernels/gemm_gen.h"
#include "layer_internal.h"

static hm_engine *engine;

typedef struct w8_case {
  const char *name;
  hm_quant_format fmt;
  hm_dtype act;
  hm_act_scale_kind act_scale;
  hm_dtype out;
  bool bias;
  bool adversarial; /* scales from 2^-20..2^20 */
  int64_t n, k, experts;
} w8_case;

#define MXFP4 \
  { HM_F4E2M1, HM_E8M0, HM_SCALE_GROUP, 32, 0, false, false }
#define INT4(s) \
  { HM_I4, s, HM_SCALE_CHANNEL, 0, 0, false, false }
#define FP8 HM_F8E4M3, HM_ACT_SCALE_TOKEN
#define FP8_G HM_F8E4M3, HM_ACT_SCALE_GROUP128
#define I8 HM_I8, HM_ACT_SCALE_TOKEN
#define I8_G HM_I8, HM_ACT_SCALE_GROUP128

/* Adversarial cases write bf16: f16 would overflow at 2^20 scales. */
static const w8_case dense_cases[] = {
    {"dense mxfp4 tok bf16 bias", MXFP4, FP8, HM_BF16, true, false, 712, 736, 1},
    {"dense mxfp4 ag128 f16", MXFP4, FP8_G, HM_F16, false, false, 520, 896, 1},
    {"dense mxfp4 tok bf16 adversarial", MXFP4, FP8, HM_BF16, false, true, 456, 1056, 1},
    {"dense int4 tok bf16 bias", INT4(HM_F32), I8, HM_BF16, true, false, 456, 1040, 1},
    {"dense int4 ag128 f16", INT4(HM_F16), I8_G, HM_F16, false, false, 200, 592, 1},
    {"dense int4 tok bf16 adversarial", INT4(HM_F32), I8, HM_BF16, false, true, 328, 720, 1},
};

static const w8_case moe_cases[] = {
    {"moe mxfp4 tok bf16", MXFP4, FP8, HM_BF16, false, false, 456, 640, 8},
    {"moe mxfp4 tok bf16 bias adversarial", MXFP4, FP8, HM_BF16, true, true, 384, 544, 8},
    {"moe int4 tok f16 bias", INT4(HM_BF16), I8, HM_F16, true, false, 328, 400, 6},
    {"moe int4 ag128 bf16 adversarial", INT4(HM_F32), I8_G, HM_BF16, false, true, 264, 784, 6},
};

static const int64_t m_list[] = {1, 7, 64, 333};

/* Both sides sum the same quantized values; left are f32 sums in another order and output rounding. */
static double tolerance(const w8_case *c) {
  return c->out == HM_BF16 ? 1.2e-2 : 5e-3;
}

/* Every e8m0 scale 2^(-20..20), or every int4 channel scale times that. */
static void make_scales_adversarial(hm_rng *rng, const w8_case *c, hm_host_weights *w) {
  if (c->fmt.weight == HM_F4E2M1) {
    uint8_t *s = w->scales;
    for (int64_t i = 0; i < c->experts * c->n * (c->k / 32); i++)
      s[i] = (uint8_t)(127 - 20 + (int)(hm_rng_next(rng) % 41));
    return;
  }
  for (int64_t i = 0; i < c->experts * c->n; i++) {
    const float s =
        hm_load_f32(c->fmt.scale, w->scales, i) * ldexpf(1.0f, -20 + (int)(hm_rng_next(rng) % 41));
    HM_ASSERT_OK(
        hm_convert_from_f32(c->fmt.scale, &s, (char *)w->scales + i * (hm_dtype_bits(c->fmt.scale) / 8), 1));
  }
}

typedef struct w8_layer {
  hm_layer *layer;
  hm_host_weights w;
  void *bias;
} w8_layer;

static void w8_layer_make(hm_rng *rng, const w8_case *c, w8_layer *x) {
  memset(x, 0, sizeof(*x));
  const int64_t count = c->experts * c->n * c->k;
  float *src = gt_alloc((size_t)count * sizeof(float));
  hm_rng_fill_normal(rng, src, (size_t)count, 0.05f);
  HM_ASSERT_OK(hm_host_weights_alloc(&x->w, &c->fmt, c->experts, c->n, c->k));
  HM_ASSERT_OK(hm_quantize_weights(src, &x->w));
  free(src);
  if (c->adversarial) make_scales_adversarial(rng, c, &x->w);
  if (c->bias) x->bias = gt_random(rng, c->out, c->experts * c->n, 0.5f);
  hm_layer_config cfg = HM_LAYER_CONFIG_INIT;
  cfg.n = c->n;
  cfg.k = c->k;
  cfg.experts = c->experts;
  cfg.scheme.weight = c->fmt;
  cfg.scheme.act = c->act;
  cfg.scheme.act_scale = c->act_scale;
  cfg.out = c->out;
  cfg.bias = c->bias;
  HM_ASSERT_OK(hm_layer_create(engine, &cfg, &x->layer));
  hm_weights_view v = hm_host_weights_view(&x->w);
  v.bias = x->bias;
  HM_ASSERT_OK(hm_layer_load(x->layer, &v));
  HM_ASSERT_OK(hm_layer_transform(x->layer, NULL));
}

static void w8_layer_free(w8_layer *x) {
  hm_layer_destroy(x->layer);
  hm_host_weights_free(&x->w);
  free(x->bias);
}

/* Quantized activations (rows, K) with their scales, as the GPU's quantization kernels give them. */
typedef struct w8_act {
  void *q;
  float *scales;
  int64_t rows, scales_per_row;
} w8_act;

static void w8_act_make(hm_rng *rng, const w8_case *c, int64_t rows, w8_act *a) {
  a->rows = rows;
  a->scales_per_row = c->act_scale == HM_ACT_SCALE_GROUP128 ? (c->k + 127) / 128 : 1;
  float *x = gt_alloc((size_t)(rows * c->k) * sizeof(float));
  hm_rng_fill_normal(rng, x, (size_t)(rows * c->k), 1.0f);
  a->q = gt_alloc((size_t)(rows * c->k));
  a->scales = gt_alloc((size_t)(rows * a->scales_per_row) * sizeof(float));
  if (rows > 0) HM_ASSERT_OK(hm_quantize_activations(x, rows, c->k, c->act, c->act_scale, a->q, a->scales));
  free(x);
}

static void w8_act_free(w8_act *a) {
  free(a->q);
  free(a->scales);
}

/* The device copies of A and its scales, which gt_device_run_with (16-bit A) leaves to us. */
typedef struct w8_forward_ctx {
  const w8_layer *x;
  const void *a;
  const float *a_scale;
} w8_forward_ctx;

static void w8_forward(void *ctx, const hm_gemm_args *device_args) {
  const w8_forward_ctx *c = ctx;
  hm_gemm_args args = *device_args;
  args.a = c->a;
  args.a_scale = c->a_scale;
  HM_ASSERT_OK(hm_layer_forward(c->x->layer, &args, NULL));
}

/* Runs host_args (A = act) on the host reference and on the device; prints and checks rel_err. */
static bool w8_check(const w8_case *c, const w8_layer *x, hm_gemm_args host_args, const w8_act *act,
                     int64_t c_rows, const char *layout, int64_t m) {
  host_args.a = act->q;
  host_args.a_scale = act->scales;
  const size_t c_bytes = (size_t)(c_rows * c->n) * 2;
  void *ref = gt_alloc(c_bytes), *out = gt_alloc(c_bytes);
  memset(ref, 0xff, c_bytes);
  hm_ref_gemm_problem p = {.w = &x->w,
                           .act = c->act,
                           .act_scale = c->act_scale,
                           .out = c->out,
                           .bias = x->bias,
                           .args = host_args,
                           .threads = 0};
  p.args.c = ref;
  HM_ASSERT_OK(hm_ref_gemm(&p));
  w8_forward_ctx ctx = {x, gt_upload(engine, act->q, (size_t)(act->rows * c->k)),
                        gt_upload(engine, act->scales, (size_t)(act->rows * act->scales_per_row) * 4)};
  hm_gemm_args device_host_args = host_args;
  device_host_args.a = NULL; /* w8_forward supplies A */
  gt_device_run_with(engine, w8_forward, &ctx, &device_host_args, act->rows, c->k, c_rows, c->n, c->experts,
                     out);
  char what[160];
  snprintf(what, sizeof(what), "%s %s", c->name, layout);
  const double err = gt_compare(out, ref, c_rows * c->n, c->out, c->n, what);
  const bool ok = err <= tolerance(c);
  printf("%-56s M=%-4lld rel_err %.2e %s\n", what, (long long)m, err, ok ? "ok" : "FAIL");
  hm_mem_free(engine, (void *)ctx.a);
  hm_mem_free(engine, (void *)ctx.a_scale);
  free(ref);
  free(out);
  return ok;
}

static bool w8_dense(hm_rng *rng, const w8_case *c, const w8_layer *x, int64_t m) {
  w8_act act;
  w8_act_make(rng, c, m, &act);
  const hm_gemm_args args = {.type = HM_GEMM_DENSE, .m = m};
  const bool ok = w8_check(c, x, args, &act, m, "dense", m);
  w8_act_free(&act);
  return ok;
}

static bool w8_indexed(hm_rng *rng, const w8_case *c, const w8_layer *x, int64_t m, bool down) {
  int32_t *ids = gt_alloc((size_t)(m * GT_TOP_K) * 4);
  gt_route(rng, m, c->experts, ids);
  gt_indexed_meta meta;
  const int block_m = hm_layer_block_m(x->layer, m * GT_TOP_K);
  gt_build_indexed(ids, m * GT_TOP_K, c->experts, block_m, &meta);
  const int64_t c_rows = m * GT_TOP_K;
  w8_act act;
  w8_act_make(rng, c, down ? c_rows : m, &act);
  float *topk_w = down ? gt_topk_weights(rng, c_rows) : NULL;
  const hm_gemm_args args = gt_indexed_args(&meta, m, block_m, GT_TOP_K, down, topk_w);
  const bool ok = w8_check(c, x, args, &act, c_rows, down ? "indexed-down+topk_w" : "indexed-gate_up", m);
  w8_act_free(&act);
  free(ids), free(meta.sorted_ids), free(meta.expert_ids), free(topk_w);
  return ok;
}

/* Segments in expert order, each padded by 0..5 unused rows. */
static bool w8_contiguous(hm_rng *rng, const w8_case *c, const w8_layer *x, int64_t m) {
  int32_t *ids = gt_alloc((size_t)(m * GT_TOP_K) * 4);
  gt_route(rng, m, c->experts, ids);
  int32_t *off, *cnt;
  const int64_t rows = gt_contiguous_segments(rng, ids, m * GT_TOP_K, c->experts, &off, &cnt);
  w8_act act;
  w8_act_make(rng, c, rows, &act);
  const hm_gemm_args args = {
      .type = HM_GEMM_GROUPED_CONTIGUOUS, .m = rows, .expert_offsets = off, .expert_counts = cnt};
  const bool ok = w8_check(c, x, args, &act, rows, "grouped-contiguous", m);
  w8_act_free(&act);
  free(ids), free(off), free(cnt);
  return ok;
}

/* Rows past an expert's count (and all of the expert without tokens) stay unwritten. */
static bool w8_masked(hm_rng *rng, const w8_case *c, const w8_layer *x, int64_t m) {
  int32_t *ids = gt_alloc((size_t)(m * GT_TOP_K) * 4);
  gt_route(rng, m, c->experts, ids);
  int32_t *cnt;
  const int64_t max_m = gt_masked_counts(ids, m * GT_TOP_K, c->experts, &cnt);
  const int64_t rows = c->experts * max_m;
  w8_act act;
  w8_act_make(rng, c, rows, &act);
  const hm_gemm_args args = {.type = HM_GEMM_GROUPED_MASKED, .m = max_m, .expert_counts = cnt};
  const bool ok = w8_check(c, x, args, &act, rows, "grouped-masked", m);
  w8_act_free(&act);
  free(ids), free(cnt);
  return ok;
}

static bool arch_takes(const w8_case *c) {
  return engine->arch >= (c->act == HM_F8E4M3 ? 89 : 80);
}

static void dense_matches_reference(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("w4a8_dense_matches_reference"));
  int failed = 0;
  for (size_t i = 0; i < HM_ARRAY_SIZE(dense_cases); i++) {
    const w8_case *c = &dense_cases[i];
    if (!arch_takes(c)) {
      printf("skip %s on sm_%d\n", c->name, engine->arch);
      continue;
    }
    w8_layer x;
    w8_layer_make(&rng, c, &x);
    for (size_t j = 0; j < HM_ARRAY_SIZE(m_list); j++) failed += !w8_dense(&rng, c, &x, m_list[j]);
    w8_layer_free(&x);
  }
  if (failed) fail_msg("%d dense W4A8 cases out of bound", failed);
}

static void moe_layouts_match_reference(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("w4a8_moe_layouts_match_reference"));
  int failed = 0;
  for (size_t i = 0; i < HM_ARRAY_SIZE(moe_cases); i++) {
    const w8_case *c = &moe_cases[i];
    if (!arch_takes(c)) {
      printf("skip %s on sm_%d\n", c->name, engine->arch);
      continue;
    }
    w8_layer x;
    w8_layer_make(&rng, c, &x);
    for (size_t j = 0; j < HM_ARRAY_SIZE(m_list); j++) {
      failed += !w8_indexed(&rng, c, &x, m_list[j], false);
      failed += !w8_indexed(&rng, c, &x, m_list[j], true);
      failed += !w8_contiguous(&rng, c, &x, m_list[j]);
      failed += !w8_masked(&rng, c, &x, m_list[j]);
    }
    w8_layer_free(&x);
  }
  if (failed) fail_msg("%d MoE W4A8 cases out of bound", failed);
}

int main(void) {
  engine = hm_test_cuda_engine_or_skip();
  if (engine == NULL) return HM_TEST_SKIP;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(dense_matches_reference),
      cmocka_unit_test(moe_layouts_match_reference),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_engine_destroy(engine);
  hm_shutdown();
  return rc;
}
