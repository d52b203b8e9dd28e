/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The swapped-operand 8-row decode kernels (bm = 8) against the host reference, forced
 * whatever the layer's own plan picks: every weight format (u1..u8, i4/i8, zero points
 * or not, group 16..128 and per channel, f16 and bf16, bias, and unquantized weights,
 * which the kernel takes though the plans keep them on 16 rows) on dense layers, and
 * every GEMM type (indexed gate-up gather with top_k 2, down with top-k weights, down
 * with top_k 1, grouped-contiguous, grouped-masked with an expert of 0 tokens) on MoE
 * layers, at M = 1, 2, 7, 8 with N and K off the tile grid, C poisoned first; four
 * tunings (Stream-K or not, 1, 2 or 4 k-warps, bk 64..256, 1 or 2 units a warp, 1 to 16
 * k16 steps a warp sums before the late-scale fold, gemm_swap.cuh) and the dense decode
 * unit tile (bk 512 on eight k-warps, four or six stages, heuristics/choose.c). All cases
 * run and print before the test fails. The MoE checks are a test a GEMM type, so that a
 * device call runs them side by side (scripts/device-ab.sh run_cases): as one they took
 * over 280 s on an H100 (docs/PERF.md, thirty-third and thirty-fourth sessions). The
 * indexed one's down runs of data-parallel tunings, whose grids have spare CTAs, stalled
 * for minutes in a third of its processes until the prefetch stopped dividing by a
 * min_iters of 0 (hm_sk_split.cuh; thirty-sixth and thirty-seventh sessions).
 */
#include "gemm_moe_util.h"
#include "kernels/gemm_gen.h"
#include "layer_internal.h"

static hm_engine *engine;

#define FS(w, g, zp, s) \
  { HM_##w, HM_##s, (g) ? HM_SCALE_GROUP : HM_SCALE_CHANNEL, g, 0, zp, false }

static const gt_case dense_cases[] = {
    {"u4z g128 bf16", FS(U4, 128, true, BF16), HM_BF16, HM_BF16, false, 1000, 1408, 1, false},
    {"u4z g64 f16 bias", FS(U4, 64, true, F16), HM_F16, HM_F16, true, 576, 1344, 1, false},
    {"u4z g32 bf16->f16", FS(U4, 32, true, BF16), HM_BF16, HM_F16, false, 832, 1056, 1, false},
    {"u4z channel f16 K=1000", FS(U4, 0, true, F16), HM_F16, HM_F16, false, 704, 1000, 1, false},
    {"i4 g128 bf16 bias", FS(I4, 128, false, BF16), HM_BF16, HM_BF16, true, 1000, 1408, 1, false},
    {"u4 g128 f16", FS(U4, 128, false, F16), HM_F16, HM_BF16, false, 640, 768, 1, false},
    {"u8 g128 bf16", FS(U8, 128, false, BF16), HM_BF16, HM_BF16, false, 1000, 1408, 1, false},
    {"u8z g64 f16", FS(U8, 64, true, F16), HM_F16, HM_F16, false, 576, 1344, 1, false},
    {"i8 channel bf16 f32-scales", FS(I8, 0, false, F32), HM_BF16, HM_BF16, true, 832, 1056, 1, false},
    {"i8 g32 f16", FS(I8, 32, false, F16), HM_F16, HM_F16, false, 520, 992, 1, false},
    {"u3z g128 bf16", FS(U3, 128, true, BF16), HM_BF16, HM_BF16, false, 1000, 1408, 1, false},
    {"u3 g64 f16 bias", FS(U3, 64, false, F16), HM_F16, HM_F16, true, 576, 1344, 1, false},
    {"u2z g64 bf16", FS(U2, 64, true, BF16), HM_BF16, HM_BF16, false, 704, 1024, 1, false},
    {"u2z g32 f16", FS(U2, 32, true, F16), HM_F16, HM_F16, false, 704, 1024, 1, false},
    {"u5z g128 bf16", FS(U5, 128, true, BF16), HM_BF16, HM_BF16, false, 640, 1280, 1, false},
    {"u6 g64 f16", FS(U6, 64, false, F16), HM_F16, HM_F16, false, 640, 1280, 1, false},
    {"u7z channel bf16", FS(U7, 0, true, BF16), HM_BF16, HM_BF16, false, 640, 1280, 1, false},
    {"u1 g128 f16", FS(U1, 128, false, F16), HM_F16, HM_F16, false, 576, 1280, 1, false},
    /* Late scale: a k16 step per group, symmetric per channel (groups over several stages:
     * g128 under the bk64 tuning). */
    {"u4 g16 f16", FS(U4, 16, false, F16), HM_F16, HM_F16, false, 576, 1024, 1, false},
    {"i4 channel bf16 K=1000", FS(I4, 0, false, BF16), HM_BF16, HM_BF16, false, 1000, 1000, 1, false},
    {"bf16 unquantized",
     {HM_BF16, HM_BF16, HM_SCALE_NONE, 0, 0, false, false},
     HM_BF16,
     HM_BF16,
     true,
     1000,
     1400,
     1,
     false},
    {"f16 unquantized",
     {HM_F16, HM_F16, HM_SCALE_NONE, 0, 0, false, false},
     HM_F16,
     HM_F16,
     false,
     576,
     1344,
     1,
     false},
};

static const gt_case moe_cases[] = {
    {"moe u4z g128 bf16", FS(U4, 128, true, BF16), HM_BF16, HM_BF16, false, 704, 1024, 8, false},
    {"moe i4 g64 f16 bias", FS(I4, 64, false, F16), HM_F16, HM_F16, true, 576, 832, 6, false},
    {"moe u8 channel bf16", FS(U8, 0, false, BF16), HM_BF16, HM_BF16, false, 640, 768, 4, false},
    {"moe u3z g32 f16", FS(U3, 32, true, F16), HM_F16, HM_BF16, false, 520, 992, 4, false},
};

/* bm bn bk warps_m warps_n warps_k stages stream_k min_iters ctas_per_sm mma ws */
static const hm_gemm_tuning tunings[] = {
    {8, 256, 128, 1, 4, 2, 4, true, 4, 1, HM_MMA_SYNC, false},
    {8, 128, 64, 1, 2, 1, 3, false, 0, 2, HM_MMA_SYNC, false},
    {8, 128, 256, 1, 1, 4, 3, true, 2, 1, HM_MMA_SYNC, false},
    {8, 256, 256, 1, 4, 1, 3, true, 2, 1, HM_MMA_SYNC, false}, /* 16 k16 steps a warp and stage */
    {8, 64, 512, 1, 1, 8, 4, false, 0, 1, HM_MMA_SYNC, false}, /* the dense decode unit tile */
    {8, 64, 512, 1, 1, 8, 6, false, 0, 1, HM_MMA_SYNC, false}, /* its six-stage ring */
};
#define TUNINGS ((int)HM_ARRAY_SIZE(tunings))

static const int64_t m_list[] = {1, 2, 7, 8};

/* One forced kernel of a layer and what its launches need. */
typedef struct forced {
  hm_gemm_config cfg;
  hm_kernel *kernel;
  hm_gemm_operands ops;
  void *workspace;
  hm_gemm_source src;
} forced;

static void forced_launch(void *ctx, const hm_gemm_args *device_args) {
  const forced *f = ctx;
  HM_ASSERT_OK(
      hm_gemm_launch(f->kernel, &f->cfg, engine->sm_count, &f->ops, device_args, f->workspace, NULL));
}

/*
 * Every tuning for the layer's GEMM type, compiled in one batch, with one zeroed
 * workspace for all; a tuning whose shared memory the device lacks keeps kernel NULL.
 */
static void forced_make(hm_layer *l, hm_gemm_type type, forced *f) {
  hm_gemm_config base;
  HM_ASSERT_OK(hm_layer_gemm_base(l, type, &base));
  hm_kernel_source ks[TUNINGS];
  const hm_cubin *cubins[TUNINGS];
  int slot[TUNINGS], count = 0;
  size_t ws = 0;
  for (int i = 0; i < TUNINGS; i++) {
    memset(&f[i], 0, sizeof(f[i]));
    f[i].cfg = base;
    f[i].cfg.tuning = tunings[i];
    if (hm_gemm_config_check(&f[i].cfg) == HM_UNSUPPORTED) {
      printf("# tuning %d skipped on sm_%d: %s\n", i, base.arch, hm_last_error());
      continue;
    }
    HM_ASSERT_OK(hm_gemm_gen(&f[i].cfg, &f[i].src));
    slot[count] = i;
    ks[count++] = f[i].src.src;
    const size_t b = hm_gemm_workspace_bytes(&f[i].cfg, engine->sm_count);
    if (b > ws) ws = b;
  }
  HM_ASSERT_OK(hm_jit_get_cubins(ks, count, cubins));
  void *workspace = NULL;
  if (ws > 0) {
    HM_ASSERT_OK(hm_mem_alloc(engine, ws, &workspace));
    HM_ASSERT_OK(hm_engine_memset(engine, workspace, 0, ws, NULL));
  }
  for (int c = 0; c < count; c++) {
    forced *x = &f[slot[c]];
    HM_ASSERT_OK(hm_kernel_get(engine, &ks[c], &x->kernel));
    x->ops = hm_layer_operands(l);
  }
  for (int i = 0; i < TUNINGS; i++) f[i].workspace = workspace;
}

static void forced_free(forced *f) {
  hm_mem_free(engine, f[0].workspace);
  for (int i = 0; i < TUNINGS; i++) hm_gemm_source_free(&f[i].src);
}

static bool check(const gt_case *c, const char *layout, const forced *f, int64_t m, const void *out,
                  const void *ref, int64_t rows) {
  char what[200];
  snprintf(what, sizeof(what), "%s %s bn%d bk%d wk%d%s", c->name, layout, f->cfg.tuning.bn, f->cfg.tuning.bk,
           f->cfg.tuning.warps_k, f->cfg.tuning.stream_k ? " sk" : "");
  const double err = gt_compare(out, ref, rows * c->n, c->out, c->n, what);
  const bool ok = err <= gt_tolerance(c);
  printf("%-64s N=%-4lld K=%-4lld M=%-3lld rel_err %.2e %s\n", what, (long long)c->n, (long long)c->k,
         (long long)m, err, ok ? "ok" : "FAIL");
  return ok;
}

/* Runs args (host pointers) through kernel f and the reference; c_rows x N of output. */
static bool run_case(const gt_case *c, const gt_layer_data *d, forced *f, const char *layout,
                     const hm_gemm_args *args, int64_t a_rows, int64_t c_rows, int64_t m) {
  void *out = gt_alloc((size_t)(c_rows * c->n) * 2), *ref = gt_alloc((size_t)(c_rows * c->n) * 2);
  gt_reference(c, d, args, c_rows, ref);
  gt_device_run_with(engine, forced_launch, f, args, a_rows, c->k, c_rows, c->n, c->experts, out);
  const bool ok = check(c, layout, f, m, out, ref, c_rows);
  free(out);
  free(ref);
  return ok;
}

static void swapped_dense_matches_reference(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("swapped_dense_matches_reference"));
  int failed = 0;
  for (size_t i = 0; i < HM_ARRAY_SIZE(dense_cases); i++) {
    const gt_case *c = &dense_cases[i];
    gt_layer_data d;
    gt_layer_data_make(&rng, c, &d);
    hm_layer *l = gt_layer_make(engine, c, &d);
    forced f[TUNINGS];
    forced_make(l, HM_GEMM_DENSE, f);
    /* Beyond decode, M = 37 spans several 8-row m-tiles (and Stream-K pieces of them). */
    const int64_t extra_m = i == 0 ? 37 : 0;
    for (int t = 0; t < TUNINGS; t++)
      for (size_t j = 0; j <= HM_ARRAY_SIZE(m_list); j++) {
        const int64_t m = j < HM_ARRAY_SIZE(m_list) ? m_list[j] : extra_m;
        if (m == 0 || f[t].kernel == NULL) continue;
        void *a = gt_random(&rng, c->act, m * c->k, 1.0f);
        const hm_gemm_args args = {.type = HM_GEMM_DENSE, .m = m, .a = a};
        failed += !run_case(c, &d, &f[t], "dense", &args, m, m, m);
        free(a);
      }
    forced_free(f);
    hm_layer_destroy(l);
    gt_layer_data_free(&d);
  }
  if (failed) fail_msg("%d swapped dense cases out of bound", failed);
}

/* top_k distinct experts per token, never expert 1 (an expert with 0 tokens). */
static void route(hm_rng *rng, int64_t m, int64_t experts, int top_k, int32_t *ids) {
  for (int64_t t = 0; t < m; t++)
    for (int s = 0; s < top_k; s++) {
      int32_t e;
      bool taken;
      do {
        e = (int32_t)(hm_rng_next(rng) % (uint64_t)experts);
        taken = e == 1;
        for (int q = 0; q < s; q++) taken |= ids[t * top_k + q] == e;
      } while (taken);
      ids[t * top_k + s] = e;
    }
}

/* What a MoE test runs at M = m on one forced kernel: its count of cases out of bound. */
typedef int (*moe_runs)(hm_rng *rng, const gt_case *c, const gt_layer_data *d, forced *f, int64_t m);

/* Indexed: gate-up gathers token rows (top_k 2), down reads slot rows with top-k weights (top_k 2 or 1). */
static bool run_indexed(hm_rng *rng, const gt_case *c, const gt_layer_data *d, forced *f, int64_t m,
                        int top_k, bool down, int block_m) {
  int32_t *ids = gt_alloc((size_t)(m * top_k) * 4);
  route(rng, m, c->experts, top_k, ids);
  gt_indexed_meta x;
  gt_build_indexed(ids, m * top_k, c->experts, block_m, &x);
  const int64_t a_rows = down ? m * top_k : m, c_rows = m * top_k;
  void *a = gt_random(rng, c->act, a_rows * c->k, 1.0f);
  float *topk_w = down ? gt_topk_weights(rng, c_rows) : NULL;
  hm_gemm_args args = gt_indexed_args(&x, m, block_m, top_k, down, topk_w);
  args.a = a;
  char layout[64];
  snprintf(layout, sizeof(layout), "indexed-%s top_k=%d block_m=%d", down ? "down" : "gate_up", top_k,
           block_m);
  const bool ok = run_case(c, d, f, layout, &args, a_rows, c_rows, m);
  free(ids), free(x.sorted_ids), free(x.expert_ids), free(a), free(topk_w);
  return ok;
}

/* block_m 8 is the tile; 16 puts two m-tiles in a block of one expert. */
static int indexed_runs(hm_rng *rng, const gt_case *c, const gt_layer_data *d, forced *f, int64_t m) {
  return !run_indexed(rng, c, d, f, m, 2, false, 8) + !run_indexed(rng, c, d, f, m, 2, true, 16) +
         !run_indexed(rng, c, d, f, m, 1, true, 8);
}

/* Segments in expert order, each padded by 0..5 unused rows. */
static int contiguous_runs(hm_rng *rng, const gt_case *c, const gt_layer_data *d, forced *f, int64_t m) {
  int32_t *ids = gt_alloc((size_t)(m * 2) * 4);
  route(rng, m, c->experts, 2, ids);
  int32_t *off, *cnt;
  const int64_t rows = gt_contiguous_segments(rng, ids, m * 2, c->experts, &off, &cnt);
  void *a = gt_random(rng, c->act, rows * c->k, 1.0f);
  const hm_gemm_args args = {
      .type = HM_GEMM_GROUPED_CONTIGUOUS, .m = rows, .a = a, .expert_offsets = off, .expert_counts = cnt};
  const bool ok = run_case(c, d, f, "grouped-contiguous", &args, rows, rows, m);
  free(ids), free(off), free(cnt), free(a);
  return !ok;
}

/* Rows past an expert's count (and all of expert 1's) stay unwritten. */
static int masked_runs(hm_rng *rng, const gt_case *c, const gt_layer_data *d, forced *f, int64_t m) {
  int32_t *ids = gt_alloc((size_t)(m * 2) * 4);
  route(rng, m, c->experts, 2, ids);
  int32_t *cnt;
  const int64_t max_m = gt_masked_counts(ids, m * 2, c->experts, &cnt);
  const int64_t rows = c->experts * max_m;
  void *a = gt_random(rng, c->act, rows * c->k, 1.0f);
  const hm_gemm_args args = {.type = HM_GEMM_GROUPED_MASKED, .m = max_m, .a = a, .expert_counts = cnt};
  const bool ok = run_case(c, d, f, "grouped-masked", &args, rows, rows, m);
  free(ids), free(cnt), free(a);
  return !ok;
}

/* The MoE cases on every tuning of one GEMM type (seeded by the test's name), at each M. */
static void moe_test(const char *test, hm_gemm_type type, moe_runs runs) {
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed(test));
  int failed = 0;
  for (size_t i = 0; i < HM_ARRAY_SIZE(moe_cases); i++) {
    const gt_case *c = &moe_cases[i];
    gt_layer_data d;
    gt_layer_data_make(&rng, c, &d);
    hm_layer *l = gt_layer_make(engine, c, &d);
    forced f[TUNINGS];
    forced_make(l, type, f);
    for (int t = 0; t < TUNINGS; t++)
      for (size_t j = 0; j < HM_ARRAY_SIZE(m_list) && f[t].kernel != NULL; j++)
        failed += runs(&rng, c, &d, &f[t], m_list[j]);
    forced_free(f);
    hm_layer_destroy(l);
    gt_layer_data_free(&d);
  }
  if (failed) fail_msg("%d %s cases out of bound", failed, test);
}

static void swapped_indexed_matches_reference(void **state) {
  (void)state;
  moe_test("swapped_indexed_matches_reference", HM_GEMM_INDEXED, indexed_runs);
}

static void swapped_contiguous_matches_reference(void **state) {
  (void)state;
  moe_test("swapped_contiguous_matches_reference", HM_GEMM_GROUPED_CONTIGUOUS, contiguous_runs);
}

static void swapped_masked_matches_reference(void **state) {
  (void)state;
  moe_test("swapped_masked_matches_reference", HM_GEMM_GROUPED_MASKED, masked_runs);
}

int main(void) {
  engine = hm_test_cuda_engine_or_skip();
  if (engine == NULL) return HM_TEST_SKIP;
  printf("# device: %s\n", hm_engine_device_name(engine));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(swapped_dense_matches_reference),
      cmocka_unit_test(swapped_indexed_matches_reference),
      cmocka_unit_test(swapped_contiguous_matches_reference),
      cmocka_unit_test(swapped_masked_matches_reference),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_engine_destroy(engine);
  hm_shutdown();
  return rc;
}
