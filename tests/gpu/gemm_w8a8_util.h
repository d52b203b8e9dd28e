/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The harness of the device tests of the W8A8 mma.sync kernel (test_gemm_w8a8.c, and
 * test_gemm_w4a8.c, whose 4-bit weights the kernel widens to 8 bits): a case (weight
 * format, 8-bit activations and their scales, output, shape), its layer, activations
 * quantized on the host as the GPU's quantization kernels give them, and one run of a
 * dense GEMM or of each MoE layout against hm_ref_gemm with C poisoned first, each
 * printed with its rel_err. A layer may carry forced kernels, one a GEMM type, that run
 * instead of its own kernel table: the wgmma shapes, and the swapped 8-row tunings that
 * every format runs.
 */
#ifndef TEST_GEMM_W8A8_UTIL_H
#define TEST_GEMM_W8A8_UTIL_H

#include "gemm_moe_util.h"
#include "hm_swap8_tunings.h"
#include "kernels/gemm_gen.h"
#include "layer_internal.h"

/* The device of the test, set by its main before any test runs. */
static hm_engine *engine;

typedef struct w8_case {
  const char *name;
  hm_quant_format fmt;
  hm_dtype act;
  hm_act_scale_kind act_scale;
  hm_dtype out;
  bool bias;
  bool adversarial; /* scales over their range (make_scales_adversarial) */
  int64_t n, k, experts;
} w8_case;

static const int64_t m_list[] = {1, 7, 64, 333};

/* Both sides sum the same quantized values; left are f32 sums in another order and output rounding. */
static inline double tolerance(const w8_case *c) {
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

/* Every e8m0 scale 2^(-20..20); every nvfp4 e4m3 scale any positive code (2^-9..448,
 * subnormals included) and each global scale times 2^(-10..10); or every int4 channel
 * scale times 2^(-20..20). */
static inline void make_scales_adversarial(hm_rng *rng, const w8_case *c, hm_host_weights *w) {
  uint8_t *s = w->scales;
  if (c->fmt.scale == HM_E8M0) {
    for (int64_t i = 0; i < c->experts * c->n * (c->k / 32); i++)
      s[i] = (uint8_t)(127 - 20 + (int)(hm_rng_next(rng) % 41));
    return;
  }
  if (c->fmt.weight == HM_F4E2M1) {
    for (int64_t i = 0; i < c->experts * c->n * (c->k / 16); i++)
      s[i] = (uint8_t)(1 + hm_rng_next(rng) % 126);
    for (int64_t e = 0; c->fmt.global_scale && e < c->experts; e++)
      w->global_scale[e] *= ldexpf(1.0f, -10 + (int)(hm_rng_next(rng) % 21));
    return;
  }
  for (int64_t i = 0; i < c->experts * c->n; i++) {
    const float s =
        hm_load_f32(c->fmt.scale, w->scales, i) * ldexpf(1.0f, -20 + (int)(hm_rng_next(rng) % 41));
    HM_ASSERT_OK(
        hm_convert_from_f32(c->fmt.scale, &s, (char *)w->scales + i * (hm_dtype_bits(c->fmt.scale) / 8), 1));
  }
}

/* The layer of case c over f32 weights src (E, N, K). */
static inline void w8_layer_from(hm_rng *rng, const w8_case *c, const float *src, bool f16_acc, w8_layer *x) {
  memset(x, 0, sizeof(*x));
  x->f16_acc = f16_acc;
  HM_ASSERT_OK(hm_host_weights_alloc(&x->w, &c->fmt, c->experts, c->n, c->k));
  HM_ASSERT_OK(hm_quantize_weights(src, &x->w));
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
  cfg.fp16_accumulate = f16_acc;
  x->layer = gt_layer_loaded(engine, &cfg, &x->w, x->bias);
}

/* The layer of case c over random normal weights. */
static inline void w8_layer_random(hm_rng *rng, const w8_case *c, bool f16_acc, w8_layer *x) {
  const int64_t count = c->experts * c->n * c->k;
  float *src = gt_alloc((size_t)count * sizeof(float));
  hm_rng_fill_normal(rng, src, (size_t)count, 0.05f);
  w8_layer_from(rng, c, src, f16_acc, x);
  free(src);
}

static inline void w8_layer_free(w8_layer *x) {
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
static inline void w8_act_from(const w8_case *c, int64_t rows, const float *x, w8_act *a) {
  a->rows = rows;
  a->scales_per_row = c->act_scale == HM_ACT_SCALE_GROUP128 ? (c->k + 127) / 128 : 1;
  a->q = gt_alloc((size_t)(rows * c->k));
  a->scales = gt_alloc((size_t)(rows * a->scales_per_row) * sizeof(float));
  if (rows > 0) HM_ASSERT_OK(hm_quantize_activations(x, rows, c->k, c->act, c->act_scale, a->q, a->scales));
}

static inline void w8_act_make(hm_rng *rng, const w8_case *c, int64_t rows, w8_act *a) {
  float *x = gt_alloc((size_t)(rows * c->k) * sizeof(float));
  hm_rng_fill_normal(rng, x, (size_t)(rows * c->k), 1.0f);
  w8_act_from(c, rows, x, a);
  free(x);
}

static inline void w8_act_free(w8_act *a) {
  free(a->q);
  free(a->scales);
}

/* The device copies of A and its scales, which gt_device_run_with (16-bit A) leaves to us. */
typedef struct w8_forward_ctx {
  const w8_layer *x;
  const void *a;
  const float *a_scale;
} w8_forward_ctx;

static inline void w8_forward(void *ctx, const hm_gemm_args *device_args) {
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
static inline bool w8_check(const w8_case *c, const w8_layer *x, hm_gemm_args host_args, const w8_act *act,
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

static inline bool w8_dense(hm_rng *rng, const w8_case *c, const w8_layer *x, int64_t m) {
  w8_act act;
  w8_act_make(rng, c, m, &act);
  const hm_gemm_args args = {.type = HM_GEMM_DENSE, .m = m};
  const bool ok = w8_check(c, x, args, &act, m, "dense", m);
  w8_act_free(&act);
  return ok;
}

static inline bool w8_indexed(hm_rng *rng, const w8_case *c, const w8_layer *x, int64_t m, bool down) {
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
static inline bool w8_contiguous(hm_rng *rng, const w8_case *c, const w8_layer *x, int64_t m) {
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
static inline bool w8_masked(hm_rng *rng, const w8_case *c, const w8_layer *x, int64_t m) {
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

/* Each MoE layout at M tokens: indexed gate-up and down, grouped-contiguous, grouped-masked.
 * Returns the ones out of bound. */
static inline int w8_moe_layouts(hm_rng *rng, const w8_case *c, const w8_layer *x, int64_t m) {
  int failed = 0;
  failed += !w8_indexed(rng, c, x, m, false);
  failed += !w8_indexed(rng, c, x, m, true);
  failed += !w8_contiguous(rng, c, x, m);
  failed += !w8_masked(rng, c, x, m);
  return failed;
}

static inline bool arch_takes(const w8_case *c) {
  return engine->arch >= (c->act == HM_F8E4M3 ? 89 : 80);
}

/* What a run of cases checks at each M: the dense GEMM, or every MoE layout. */
typedef enum w8_layouts { W8_DENSE, W8_MOE } w8_layouts;

/* The layer's config of a GEMM type with tuning t, compiled and bound to its weights. */
static inline void w8_forced_make(const w8_layer *x, hm_gemm_type type, const hm_gemm_tuning *t,
                                  w8_forced *f) {
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
  f->ops = hm_layer_operands(l);
  const size_t ws = hm_gemm_workspace_bytes(&f->cfg, engine->sm_count);
  if (ws > 0) {
    HM_ASSERT_OK(hm_mem_alloc(engine, ws, &f->workspace));
    HM_ASSERT_OK(hm_engine_memset(engine, f->workspace, 0, ws, NULL));
  }
}

static inline void w8_forced_free(w8_forced *f) {
  hm_mem_free(engine, f->workspace);
}

/* Tile shapes forced on a run of cases, and the Ms each case runs at. */
typedef struct w8_forced_plan {
  const hm_gemm_tuning *shapes;
  size_t shape_count;
  const int64_t *ms;
  size_t m_count;
} w8_forced_plan;

/* The cases the device takes, each on its own layer of random weights (f16 accumulation
 * or not) at each M of the plan, drawing from one generator seeded by seed. Each GEMM type
 * of the layouts runs the layer's own kernel table, or, where the plan has shapes, is
 * forced to one; the shapes rotate over the cases and types, so that each layout and
 * schedule runs. Returns the runs out of bound. */
static inline int w8_plan_run(const char *seed, const w8_case *cases, size_t count, w8_layouts layouts,
                              bool f16_acc, const w8_forced_plan *plan) {
  const int first = layouts == W8_DENSE ? HM_GEMM_DENSE : HM_GEMM_INDEXED;
  const int last = layouts == W8_DENSE ? HM_GEMM_DENSE : HM_GEMM_GROUPED_MASKED;
  const bool forced = plan->shape_count > 0;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed(seed));
  int failed = 0;
  for (size_t i = 0; i < count; i++) {
    const w8_case *c = &cases[i];
    if (!arch_takes(c)) {
      printf("skip %s on sm_%d\n", c->name, engine->arch);
      continue;
    }
    w8_layer x;
    w8_layer_random(&rng, c, f16_acc, &x);
    w8_forced f[4];
    for (int t = first; forced && t <= last; t++) {
      w8_forced_make(&x, (hm_gemm_type)t, &plan->shapes[(i + (size_t)t) % plan->shape_count], &f[t]);
      x.forced[t] = &f[t];
    }
    for (size_t j = 0; j < plan->m_count; j++) {
      const int64_t m = plan->ms[j];
      failed += layouts == W8_DENSE ? !w8_dense(&rng, c, &x, m) : w8_moe_layouts(&rng, c, &x, m);
    }
    for (int t = first; forced && t <= last; t++) w8_forced_free(&f[t]);
    w8_layer_free(&x);
  }
  return failed;
}

/* w8_plan_run on the layers' own kernel tables at every M of m_list. */
static inline int w8_cases_run(const char *seed, const w8_case *cases, size_t count, w8_layouts layouts,
                               bool f16_acc) {
  const w8_forced_plan own = {NULL, 0, m_list, HM_ARRAY_SIZE(m_list)};
  return w8_plan_run(seed, cases, count, layouts, f16_acc, &own);
}

/* A test of w8_cases_run: fails naming how many runs of what ("dense W8A8") were out of bound. */
static inline void w8_cases_test(const char *seed, const w8_case *cases, size_t count, w8_layouts layouts,
                                 bool f16_acc, const char *what) {
  const int failed = w8_cases_run(seed, cases, count, layouts, f16_acc);
  if (failed) fail_msg("%d %s cases out of bound", failed, what);
}

/* One partly filled 8-row tile (dense M 1..8, MoE experts of none to a few rows), and
 * several 8-row m-tiles a tile column (M 64, 333). */
static const int64_t swap8_m_list[] = {1, 3, 8, 64, 333};

/* tunings forced on every GEMM type of the cases at swap8_m_list: fails naming how many runs
 * of what were out of bound. */
static inline void w8_forced_test(const char *seed, const w8_case *cases, size_t count, w8_layouts layouts,
                                  bool f16_acc, const hm_gemm_tuning *tunings, size_t tuning_count,
                                  const char *what) {
  const w8_forced_plan plan = {tunings, tuning_count, swap8_m_list, HM_ARRAY_SIZE(swap8_m_list)};
  const int failed = w8_plan_run(seed, cases, count, layouts, f16_acc, &plan);
  if (failed) fail_msg("%d %s cases out of bound", failed, what);
}

/* The swapped 8-row tunings (hm_swap8_tunings.h), forced as w8_forced_test forces them. */
static inline void w8_swap8_test(const char *seed, const w8_case *cases, size_t count, w8_layouts layouts,
                                 bool f16_acc, const char *what) {
  w8_forced_test(seed, cases, count, layouts, f16_acc, hm_swap8_tunings, HM_ARRAY_SIZE(hm_swap8_tunings),
                 what);
}

#endif
