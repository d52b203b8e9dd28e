/* SPDX-License-Identifier: Apache-2.0 */
/*
 * W8A8 GEMMs on the device against the host reference (hm_ref_gemm on the same quantized
 * weights and activations): fp8 e4m3 with 128x128 block scales and 1x128 activation
 * scales, fp8 and int8 with per-channel weight scales and per-token (or 1x128)
 * activation scales; dense at M = 1, 7, 64, 333 and the three MoE layouts (indexed
 * gate-up gather and down with top-k weights, grouped-contiguous, grouped-masked) with an
 * expert that gets no tokens. C is poisoned first: every element the reference writes
 * must be written, no other. On sm_90 the same cases run again with the wgmma kernel
 * (gemm_w8a8_wgmma.cuh) forced, at 7, 333 and 1027 tokens, over its tile shapes, and
 * again with its warp-specialized form (gemm_w8a8_ws.cuh). f16 accumulation
 * (hm_layer_config.fp16_accumulate): fp8 per-channel and mxfp4 weights with per-token
 * scales, dense and the MoE layouts, and every code at 448, within a looser bound.
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
  int64_t n, k, experts;
} w8_case;

/* gs: a per-expert global scale on top of the blocks. */
#define FP8_BLOCK(gs) \
  { HM_F8E4M3, HM_F32, HM_SCALE_BLOCK, 128, 128, false, gs }
#define CHANNEL(t, s) \
  { t, s, HM_SCALE_CHANNEL, 0, 0, false, false }

/* N and K are not powers of two: multiples of 128 for blocks, of 16 (K) and 2 (N) otherwise. */
static const w8_case dense_cases[] = {
    {"dense fp8 block128 ag128 bf16 bias", FP8_BLOCK(false), HM_F8E4M3, HM_ACT_SCALE_GROUP128, HM_BF16, true,
     640, 896, 1},
    {"dense fp8 channel tok f16", CHANNEL(HM_F8E4M3, HM_F32), HM_F8E4M3, HM_ACT_SCALE_TOKEN, HM_F16, false,
     712, 720, 1},
    {"dense fp8 channel ag128 bf16", CHANNEL(HM_F8E4M3, HM_BF16), HM_F8E4M3, HM_ACT_SCALE_GROUP128, HM_BF16,
     false, 520, 784, 1},
    {"dense int8 channel tok bf16 bias", CHANNEL(HM_I8, HM_F32), HM_I8, HM_ACT_SCALE_TOKEN, HM_BF16, true,
     456, 1040, 1},
    {"dense int8 channel ag128 f16", CHANNEL(HM_I8, HM_F16), HM_I8, HM_ACT_SCALE_GROUP128, HM_F16, false, 200,
     592, 1},
};

static const w8_case moe_cases[] = {
    {"moe fp8 block128 ag128 bf16 gscale", FP8_BLOCK(true), HM_F8E4M3, HM_ACT_SCALE_GROUP128, HM_BF16, false,
     384, 640, 8},
    {"moe fp8 channel tok f16 bias", CHANNEL(HM_F8E4M3, HM_F32), HM_F8E4M3, HM_ACT_SCALE_TOKEN, HM_F16, true,
     456, 528, 8},
    {"moe int8 channel tok bf16", CHANNEL(HM_I8, HM_F32), HM_I8, HM_ACT_SCALE_TOKEN, HM_BF16, false, 328, 400,
     6},
};

/* f16 accumulation: per-channel fp8 (f32 and bf16 scales) or mxfp4 weights, per-token scales. */
#define MXFP4 \
  { HM_F4E2M1, HM_E8M0, HM_SCALE_GROUP, 32, 0, false, false }
static const w8_case acc16_dense_cases[] = {
    {"dense fp8 channel tok bf16 bias acc16", CHANNEL(HM_F8E4M3, HM_F32), HM_F8E4M3, HM_ACT_SCALE_TOKEN,
     HM_BF16, true, 712, 720, 1},
    {"dense fp8 channel tok f16 acc16", CHANNEL(HM_F8E4M3, HM_BF16), HM_F8E4M3, HM_ACT_SCALE_TOKEN, HM_F16,
     false, 520, 1040, 1},
    {"dense mxfp4 tok bf16 acc16", MXFP4, HM_F8E4M3, HM_ACT_SCALE_TOKEN, HM_BF16, false, 456, 736, 1},
};
static const w8_case acc16_moe_cases[] = {
    {"moe fp8 channel tok f16 bias acc16", CHANNEL(HM_F8E4M3, HM_F32), HM_F8E4M3, HM_ACT_SCALE_TOKEN, HM_F16,
     true, 456, 528, 8},
};
/* Every code of A and W at 448: 32 products of 448 x 448 a k32 MMA, the most f16 must hold. */
static const w8_case acc16_saturated_cases[] = {
    {"dense fp8 channel tok bf16 acc16 all 448", CHANNEL(HM_F8E4M3, HM_F32), HM_F8E4M3, HM_ACT_SCALE_TOKEN,
     HM_BF16, false, 264, 1024, 1},
};

static const int64_t m_list[] = {1, 7, 64, 333};
static const int64_t wgmma_m_list[] = {7, 333, 1027};

/* bm bn bk warps_m warps_n warps_k stages stream_k min_iters ctas_per_sm mma ws */
static const hm_gemm_tuning wgmma_shapes[] = {
    {128, 128, 128, 1, 8, 1, 6, true, 4, 1, HM_MMA_WGMMA, false}, /* the large-M default */
    {64, 128, 128, 1, 8, 1, 6, true, 4, 1, HM_MMA_WGMMA, false},  /* the 33..64-row default */
    {128, 64, 128, 2, 4, 1, 4, false, 0, 1, HM_MMA_WGMMA, false}, /* 2 token warpgroups, data-parallel */
    {96, 128, 128, 1, 8, 1, 5, true, 2, 1, HM_MMA_WGMMA, false},  /* N = 96, short Stream-K pieces */
    {64, 64, 128, 1, 4, 1, 4, true, 4, 2, HM_MMA_WGMMA, false},   /* one warpgroup, 2 CTAs an SM */
};

/* Warp-specialized: two consumer warpgroups and a producer, one CTA an SM. */
static const hm_gemm_tuning ws_shapes[] = {
    {128, 128, 128, 1, 8, 1, 4, true, 4, 1, HM_MMA_WGMMA, true}, /* the large-M default */
    {64, 128, 128, 1, 8, 1, 6, true, 4, 1, HM_MMA_WGMMA, true},  /* the 33..64-row default */
    {128, 64, 128, 2, 4, 1, 4, false, 0, 1, HM_MMA_WGMMA, true}, /* 2 token warpgroups, data-parallel */
    {96, 128, 128, 1, 8, 1, 3, true, 1, 1, HM_MMA_WGMMA, true},  /* one-iteration Stream-K pieces, 3 stages */
};

/* Both sides sum the same quantized values; left are f32 sums in another order and output rounding. */
static double tolerance(const w8_case *c) {
  return c->out == HM_BF16 ? 1.2e-2 : 5e-3;
}

/*
 * What f16 accumulation (gemm_w8a8_kernel.cuh, acc16) adds to that bound. Each k32 MMA's
 * sum of 32 products is rounded to f16 before the f32 sums take it: a relative error
 * below 2^-11 of that partial (2^-10 if the tensor core truncates). On random data the
 * partials are independent with one spread, so the normwise error of their f32 sum is a
 * partial's, at most 2^-10 / sqrt(3) = 5.6e-4 (uniform rounding error). The 2^-7 the
 * kernel puts on A moves only codes under 2 (1.3% of N(0,1) rows quantized to a maximum
 * of 448 near 3.5 sigma), each by at most 2^-3 of a code spread near 128: 6e-5 normwise.
 * Three times their sum.
 */
#define F16_ACC_EXTRA 2e-3

/* One tuning compiled for a layer's GEMM type and bound to the layer's weights. */
typedef struct w8_forced {
  hm_gemm_config cfg;
  hm_kernel *kernel;
  hm_gemm_operands ops;
  void *workspace;
} w8_forced;

/* forced[type], where set, runs instead of the layer's own kernel table. */
typedef struct w8_layer {
  hm_layer *layer;
  hm_host_weights w;
  void *bias;
  const w8_forced *forced[4];
  bool f16_acc; /* hm_layer_config.fp16_accumulate */
} w8_layer;

/* The layer of case c over f32 weights src (E, N, K). */
static void w8_layer_from(hm_rng *rng, const w8_case *c, const float *src, bool f16_acc, w8_layer *x) {
  memset(x, 0, sizeof(*x));
  x->f16_acc = f16_acc;
  HM_ASSERT_OK(hm_host_weights_alloc(&x->w, &c->fmt, c->experts, c->n, c->k));
  HM_ASSERT_OK(hm_quantize_weights(src, &x->w));
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
  cfg.fp16_accumulate = f16_acc;
  HM_ASSERT_OK(hm_layer_create(engine, &cfg, &x->layer));
  hm_weights_view v = hm_host_weights_view(&x->w);
  v.bias = x->bias;
  HM_ASSERT_OK(hm_layer_load(x->layer, &v));
  HM_ASSERT_OK(hm_layer_transform(x->layer, NULL));
}

/* The layer of case c over random normal weights. */
static void w8_layer_random(hm_rng *rng, const w8_case *c, bool f16_acc, w8_layer *x) {
  const int64_t count = c->experts * c->n * c->k;
  float *src = gt_alloc((size_t)count * sizeof(float));
  hm_rng_fill_normal(rng, src, (size_t)count, 0.05f);
  w8_layer_from(rng, c, src, f16_acc, x);
  free(src);
}

static void w8_layer_make(hm_rng *rng, const w8_case *c, w8_layer *x) {
  w8_layer_random(rng, c, false, x);
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

/* Quantizes f32 activations x (rows, K) as case c says. */
static void w8_act_from(const w8_case *c, int64_t rows, const float *x, w8_act *a) {
  a->rows = rows;
  a->scales_per_row = c->act_scale == HM_ACT_SCALE_GROUP128 ? (c->k + 127) / 128 : 1;
  a->q = gt_alloc((size_t)(rows * c->k));
  a->scales = gt_alloc((size_t)(rows * a->scales_per_row) * sizeof(float));
  if (rows > 0) HM_ASSERT_OK(hm_quantize_activations(x, rows, c->k, c->act, c->act_scale, a->q, a->scales));
}

static void w8_act_make(hm_rng *rng, const w8_case *c, int64_t rows, w8_act *a) {
  float *x = gt_alloc((size_t)(rows * c->k) * sizeof(float));
  hm_rng_fill_normal(rng, x, (size_t)(rows * c->k), 1.0f);
  w8_act_from(c, rows, x, a);
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
  const w8_forced *f = c->x->forced[args.type];
  if (f == NULL) {
    HM_ASSERT_OK(hm_layer_forward(c->x->layer, &args, NULL));
    return;
  }
  HM_ASSERT_OK(hm_gemm_launch(f->kernel, &f->cfg, engine->sm_count, &f->ops, &args, f->workspace, NULL));
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
  const bool ok = err <= tolerance(c) + (x->f16_acc ? F16_ACC_EXTRA : 0.0);
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
  const w8_forced *f = x->forced[HM_GEMM_INDEXED];
  const int block_m = f ? f->cfg.tuning.bm : hm_layer_block_m(x->layer, m * GT_TOP_K);
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
  hm_rng_seed(&rng, hm_test_seed("w8a8_dense_matches_reference"));
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
  if (failed) fail_msg("%d dense W8A8 cases out of bound", failed);
}

static void moe_layouts_match_reference(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("w8a8_moe_layouts_match_reference"));
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
  if (failed) fail_msg("%d MoE W8A8 cases out of bound", failed);
}

/* The layer's config of a GEMM type with tuning t, compiled and bound to its weights. */
static void w8_forced_make(const w8_layer *x, hm_gemm_type type, const hm_gemm_tuning *t, w8_forced *f) {
  memset(f, 0, sizeof(*f));
  HM_ASSERT_OK(hm_layer_gemm_base(x->layer, type, &f->cfg));
  f->cfg.tuning = *t;
  HM_ASSERT_OK(hm_gemm_config_check(&f->cfg));
  hm_gemm_source src;
  HM_ASSERT_OK(hm_gemm_gen(&f->cfg, &src));
  printf("# %s\n", src.name);
  HM_ASSERT_OK(hm_kernel_get(engine, &src.src, &f->kernel));
  hm_gemm_source_free(&src);
  const hm_layer *l = x->layer;
  f->ops = (hm_gemm_operands){l->dev.weight, l->dev.scales, l->dev.zeros, l->dev.bias, l->dev.global_scale};
  const size_t ws = hm_gemm_workspace_bytes(&f->cfg, engine->sm_count);
  if (ws > 0) {
    HM_ASSERT_OK(hm_mem_alloc(engine, ws, &f->workspace));
    HM_ASSERT_OK(hm_engine_memset(engine, f->workspace, 0, ws, NULL));
  }
}

static void w8_forced_free(w8_forced *f) {
  hm_mem_free(engine, f->workspace);
}

static bool wgmma_or_skip(void) {
  if (engine->arch == 90) return true;
  printf("SKIP: the W8A8 wgmma kernel needs sm_90a, device is sm_%d\n", engine->arch);
  return false;
}

/* Tile shapes rotate over the cases, so that each layout and schedule runs. Returns the
 * cases out of bound. */
static int forced_dense(const char *seed, const hm_gemm_tuning *shapes, size_t shape_count) {
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed(seed));
  int failed = 0;
  for (size_t i = 0; i < HM_ARRAY_SIZE(dense_cases); i++) {
    const w8_case *c = &dense_cases[i];
    w8_layer x;
    w8_layer_make(&rng, c, &x);
    w8_forced f;
    w8_forced_make(&x, HM_GEMM_DENSE, &shapes[i % shape_count], &f);
    x.forced[HM_GEMM_DENSE] = &f;
    for (size_t j = 0; j < HM_ARRAY_SIZE(wgmma_m_list); j++)
      failed += !w8_dense(&rng, c, &x, wgmma_m_list[j]);
    w8_forced_free(&f);
    w8_layer_free(&x);
  }
  return failed;
}

static int forced_moe(const char *seed, const hm_gemm_tuning *shapes, size_t shape_count) {
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed(seed));
  int failed = 0;
  for (size_t i = 0; i < HM_ARRAY_SIZE(moe_cases); i++) {
    const w8_case *c = &moe_cases[i];
    w8_layer x;
    w8_layer_make(&rng, c, &x);
    w8_forced f[4];
    for (int t = HM_GEMM_INDEXED; t <= HM_GEMM_GROUPED_MASKED; t++) {
      w8_forced_make(&x, (hm_gemm_type)t, &shapes[(i + (size_t)t) % shape_count], &f[t]);
      x.forced[t] = &f[t];
    }
    for (size_t j = 0; j < HM_ARRAY_SIZE(wgmma_m_list); j++) {
      const int64_t m = wgmma_m_list[j];
      failed += !w8_indexed(&rng, c, &x, m, false);
      failed += !w8_indexed(&rng, c, &x, m, true);
      failed += !w8_contiguous(&rng, c, &x, m);
      failed += !w8_masked(&rng, c, &x, m);
    }
    for (int t = HM_GEMM_INDEXED; t <= HM_GEMM_GROUPED_MASKED; t++) w8_forced_free(&f[t]);
    w8_layer_free(&x);
  }
  return failed;
}

static void wgmma_dense_matches_reference(void **state) {
  (void)state;
  if (!wgmma_or_skip()) skip();
  const int failed =
      forced_dense("w8a8_wgmma_dense_matches_reference", wgmma_shapes, HM_ARRAY_SIZE(wgmma_shapes));
  if (failed) fail_msg("%d dense W8A8 wgmma cases out of bound", failed);
}

static void wgmma_moe_layouts_match_reference(void **state) {
  (void)state;
  if (!wgmma_or_skip()) skip();
  const int failed =
      forced_moe("w8a8_wgmma_moe_layouts_match_reference", wgmma_shapes, HM_ARRAY_SIZE(wgmma_shapes));
  if (failed) fail_msg("%d MoE W8A8 wgmma cases out of bound", failed);
}

static void ws_dense_matches_reference(void **state) {
  (void)state;
  if (!wgmma_or_skip()) skip();
  const int failed = forced_dense("w8a8_ws_dense_matches_reference", ws_shapes, HM_ARRAY_SIZE(ws_shapes));
  if (failed) fail_msg("%d dense W8A8 warp-specialized cases out of bound", failed);
}

static void ws_moe_layouts_match_reference(void **state) {
  (void)state;
  if (!wgmma_or_skip()) skip();
  const int failed = forced_moe("w8a8_ws_moe_layouts_match_reference", ws_shapes, HM_ARRAY_SIZE(ws_shapes));
  if (failed) fail_msg("%d MoE W8A8 warp-specialized cases out of bound", failed);
}

static bool f16_acc_or_skip(void) {
  if (engine->arch >= 89) return true;
  printf("SKIP: f16 accumulation of fp8 MMAs needs sm_89, device is sm_%d\n", engine->arch);
  return false;
}

/* Weights of +-1/20 by column and activations of 1: every code 448, so that each k32 MMA
 * sums 32 x 448 x 448 (f16 would overflow without the kernel's 2^-7 on A). */
static bool f16_acc_saturated(const w8_case *c, int64_t m) {
  float *w = gt_alloc((size_t)(c->n * c->k) * sizeof(float));
  for (int64_t i = 0; i < c->n * c->k; i++) w[i] = (i / c->k) % 2 ? -0.05f : 0.05f;
  w8_layer x;
  w8_layer_from(NULL, c, w, true, &x);
  free(w);
  float *a = gt_alloc((size_t)(m * c->k) * sizeof(float));
  for (int64_t i = 0; i < m * c->k; i++) a[i] = 1.0f;
  w8_act act;
  w8_act_from(c, m, a, &act);
  free(a);
  const hm_gemm_args args = {.type = HM_GEMM_DENSE, .m = m};
  const bool ok = w8_check(c, &x, args, &act, m, "dense", m);
  w8_act_free(&act);
  w8_layer_free(&x);
  return ok;
}

static void f16_acc_dense_matches_reference(void **state) {
  (void)state;
  if (!f16_acc_or_skip()) skip();
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("w8a8_f16_acc_dense_matches_reference"));
  int failed = 0;
  for (size_t i = 0; i < HM_ARRAY_SIZE(acc16_dense_cases); i++) {
    const w8_case *c = &acc16_dense_cases[i];
    w8_layer x;
    w8_layer_random(&rng, c, true, &x);
    for (size_t j = 0; j < HM_ARRAY_SIZE(m_list); j++) failed += !w8_dense(&rng, c, &x, m_list[j]);
    w8_layer_free(&x);
  }
  for (size_t i = 0; i < HM_ARRAY_SIZE(acc16_saturated_cases); i++)
    for (size_t j = 0; j < HM_ARRAY_SIZE(m_list); j++)
      failed += !f16_acc_saturated(&acc16_saturated_cases[i], m_list[j]);
  if (failed) fail_msg("%d dense W8A8 f16-accumulation cases out of bound", failed);
}

static void f16_acc_moe_layouts_match_reference(void **state) {
  (void)state;
  if (!f16_acc_or_skip()) skip();
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("w8a8_f16_acc_moe_layouts_match_reference"));
  int failed = 0;
  for (size_t i = 0; i < HM_ARRAY_SIZE(acc16_moe_cases); i++) {
    const w8_case *c = &acc16_moe_cases[i];
    w8_layer x;
    w8_layer_random(&rng, c, true, &x);
    for (size_t j = 0; j < HM_ARRAY_SIZE(m_list); j++) {
      failed += !w8_indexed(&rng, c, &x, m_list[j], false);
      failed += !w8_indexed(&rng, c, &x, m_list[j], true);
      failed += !w8_contiguous(&rng, c, &x, m_list[j]);
      failed += !w8_masked(&rng, c, &x, m_list[j]);
    }
    w8_layer_free(&x);
  }
  if (failed) fail_msg("%d MoE W8A8 f16-accumulation cases out of bound", failed);
}

int main(void) {
  engine = hm_test_cuda_engine_or_skip();
  if (engine == NULL) return HM_TEST_SKIP;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(dense_matches_reference),
      cmocka_unit_test(moe_layouts_match_reference),
      cmocka_unit_test(wgmma_dense_matches_reference),
      cmocka_unit_test(wgmma_moe_layouts_match_reference),
      cmocka_unit_test(ws_dense_matches_reference),
      cmocka_unit_test(ws_moe_layouts_match_reference),
      cmocka_unit_test(f16_acc_dense_matches_reference),
      cmocka_unit_test(f16_acc_moe_layouts_match_reference),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_engine_destroy(engine);
  hm_shutdown();
  return rc;
}
