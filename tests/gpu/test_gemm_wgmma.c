/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The wgmma GEMM kernel (sm_90a) forced on the weights of a layer, against the host
 * reference with C poisoned first: every weight format it takes, dense at M = 64, 333
 * and 4096 with N and K that are not powers of two, and the MoE layouts (indexed
 * gate-up and down with top-k weights, grouped-contiguous, grouped-masked, an expert
 * with no tokens) at 64, 333 and 4096 tokens. Tile shapes rotate over the cases so that
 * each warpgroup layout, Stream-K and data-parallel schedule runs; then the same with
 * the warp-specialized tiles (gemm_ws_wgmma.cuh), the tile that stages its output in a
 * ring slot (bm 256 x bn 128 x bk 128), and the dense formats on the bn64 bk64
 * two-warpgroup tiles. The first warp-specialized tile again with C 4 bytes past 16-byte
 * alignment: no tensor stores, the threads' copy from the swizzled tile. Skips without an
 * sm_90 device.
 */
#include "gemm_moe_util.h"
#include "hm_few_copy_tunings.h"
#include "kernels/gemm_config_wgmma.h"
#include "kernels/gemm_gen.h"
#include "layer_internal.h"

static hm_engine *engine;

#define FS(w, g, zp, s) \
  { HM_##w, HM_##s, (g) ? HM_SCALE_GROUP : HM_SCALE_CHANNEL, g, 0, zp, false }
#define F(w, g, zp) FS(w, g, zp, BF16)
#define UNQ(w) \
  { HM_##w, HM_##w, HM_SCALE_NONE, 0, 0, false, false }

static const gt_case dense_cases[] = {
    {"wgmma u4z g128 bf16", F(U4, 128, true), HM_BF16, HM_BF16, false, 1000, 1408, 1, false},
    {"wgmma u4z g64 f16 bias", FS(U4, 64, true, F16), HM_F16, HM_F16, true, 576, 704, 1, false},
    {"wgmma u4 g32 bf16->f16", F(U4, 32, false), HM_BF16, HM_F16, false, 520, 992, 1, false},
    {"wgmma u4z channel f16", FS(U4, 0, true, F16), HM_F16, HM_F16, false, 704, 1000, 1, false},
    {"wgmma i4 g128 bf16 bias", F(I4, 128, false), HM_BF16, HM_BF16, true, 1000, 640, 1, false},
    {"wgmma i4 g64 f16", FS(I4, 64, false, F16), HM_F16, HM_F16, false, 640, 768, 1, false},
    {"wgmma u8 g128 bf16", F(U8, 128, false), HM_BF16, HM_BF16, false, 832, 1152, 1, false},
    {"wgmma u8z g64 f16", FS(U8, 64, true, F16), HM_F16, HM_F16, false, 576, 704, 1, false},
    {"wgmma i8 channel bf16 f32-scales", FS(I8, 0, false, F32), HM_BF16, HM_BF16, true, 832, 1000, 1, false},
    {"wgmma i8 g32 f16", FS(I8, 32, false, F16), HM_F16, HM_F16, false, 520, 992, 1, false},
    {"wgmma bf16 unquantized", UNQ(BF16), HM_BF16, HM_BF16, true, 1000, 1400, 1, false},
    {"wgmma f16 unquantized", UNQ(F16), HM_F16, HM_F16, false, 576, 704, 1, false},
};

static const gt_case moe_cases[] = {
    {"moe wgmma u4z g128 bf16", F(U4, 128, true), HM_BF16, HM_BF16, false, 328, 384, 8, false},
    {"moe wgmma u4 g32 f16", FS(U4, 32, false, F16), HM_F16, HM_F16, false, 320, 256, 8, false},
    {"moe wgmma i4 g64 f16 bias", FS(I4, 64, false, F16), HM_F16, HM_F16, true, 384, 320, 8, false},
    {"moe wgmma u8z channel bf16", F(U8, 0, true), HM_BF16, HM_BF16, false, 320, 264, 8, false},
    {"moe wgmma i8 g128 bf16", F(I8, 128, false), HM_BF16, HM_BF16, true, 320, 256, 8, false},
    {"moe wgmma bf16 unquantized", UNQ(BF16), HM_BF16, HM_BF16, false, 264, 256, 8, false},
    {"moe wgmma f16 unquantized", UNQ(F16), HM_F16, HM_F16, true, 320, 200, 8, false},
};

/* bm bn bk warps_m warps_n warps_k stages stream_k min_iters ctas_per_sm mma ws */
static const hm_gemm_tuning shapes[] = {
    {128, 256, 64, 1, 8, 1, 6, true, 4, 1, HM_MMA_WGMMA, false},  /* large-M default, 2 x 128 columns */
    {256, 128, 64, 1, 8, 1, 5, true, 4, 1, HM_MMA_WGMMA, false},  /* 2 warpgroups x 64 columns, N = 256 */
    {64, 256, 128, 1, 8, 1, 4, false, 0, 1, HM_MMA_WGMMA, false}, /* the 33..64-row shape, data-parallel */
    {192, 128, 64, 2, 4, 1, 4, true, 4, 1, HM_MMA_WGMMA, false},  /* 2 warpgroups along tokens, N = 96 */
    {128, 128, 64, 1, 4, 1, 4, true, 2, 2, HM_MMA_WGMMA, false},  /* one warpgroup, 2 CTAs an SM */
    {192, 128, 64, 1, 8, 1, 4, true, 4, 1, HM_MMA_WGMMA, false},  /* 2 warpgroups x 64 columns, N = 192 */
    {64, 128, 128, 2, 4, 1, 4, true, 4, 2, HM_MMA_WGMMA, false},  /* N = 32, 2 warpgroups along tokens */
};

/* Warp-specialized: two consumer warpgroups, one CTA an SM; Stream-K down to one k-tile. */
static const hm_gemm_tuning ws_shapes[] = {
    {128, 256, 128, 1, 8, 1, 3, true, 4, 1, HM_MMA_WGMMA, true}, /* bk 128 over 3 stages */
    {128, 256, 64, 1, 8, 1, 6, true, 1, 1, HM_MMA_WGMMA, true},  /* bk 64 over 6, Stream-K to 1 k-tile */
    {256, 128, 64, 1, 8, 1, 4, true, 1, 1, HM_MMA_WGMMA, true},  /* 256 tokens a warpgroup */
    {128, 128, 64, 2, 4, 1, 4, false, 0, 1, HM_MMA_WGMMA, true}, /* 2 token warpgroups, data-parallel */
    {64, 256, 128, 1, 8, 1, 4, true, 1, 1, HM_MMA_WGMMA, true},  /* the 33..64-row shape */
};

/* A table of tunings the cases rotate over. */
typedef struct shape_set {
  const hm_gemm_tuning *t;
  int count;
} shape_set;

/* Three stages of 256 tokens x bk 128 leave no room beside them for the output tile: it is
 * staged in the slot of the segment's last stage (hm_gemm_ws_c_in_ring) where K has no
 * tail; the other cases run it at bk 64. Stream-K down to one k-tile, for split tiles. */
static const hm_gemm_tuning ring_shape = {256, 128, 128, 1, 8, 1, 3, true, 1, 1, HM_MMA_WGMMA, true};

static const shape_set plain = {shapes, (int)HM_ARRAY_SIZE(shapes)};
static const shape_set specialized = {ws_shapes, (int)HM_ARRAY_SIZE(ws_shapes)};
static const shape_set first_specialized = {ws_shapes, 1};
static const shape_set ring_staged = {&ring_shape, 1};
static const shape_set few_copies = {hm_few_copy_tunings, (int)HM_ARRAY_SIZE(hm_few_copy_tunings)};

static const int64_t m_list[] = {64, 333, 4096};

/* One tuning compiled for a layer's GEMM type and bound to the layer's weights. */
typedef struct forced {
  hm_gemm_config cfg;
  hm_kernel *kernel;
  hm_gemm_operands ops;
  void *workspace;
  char name[256];
} forced;

static void forced_run(void *ctx, const hm_gemm_args *device_args) {
  const forced *f = ctx;
  HM_ASSERT_OK(
      hm_gemm_launch(f->kernel, &f->cfg, engine->sm_count, &f->ops, device_args, f->workspace, NULL));
}

static int forced_block_m(void *ctx, int64_t valid_m) {
  (void)valid_m;
  return ((const forced *)ctx)->cfg.tuning.bm;
}

/* The layer's config for a GEMM type with tuning t (16-bit units shallower, as the selection
 * does; wider units beside a warp-specialized kernel's output tile: fewer stages, then bk 64). */
static hm_gemm_config forced_config(const hm_layer *l, hm_gemm_type type, const hm_gemm_tuning *t) {
  hm_gemm_config cfg;
  HM_ASSERT_OK(hm_layer_gemm_base(l, type, &cfg));
  cfg.tuning = *t;
  if (hm_gemm_weight_bits(cfg.layer.weight) == 16) {
    cfg.tuning.bk = 64;
    if (cfg.tuning.stages > 4) cfg.tuning.stages = 4;
  }
  while (hm_gemm_config_smem_bytes(&cfg) > hm_gemm_arch_smem_limit(90) &&
         (cfg.tuning.stages > 3 || cfg.tuning.bk > 64)) {
    if (cfg.tuning.stages > 3)
      cfg.tuning.stages--;
    else
      cfg.tuning.bk /= 2;
  }
  return cfg;
}

/* Compiles configs in one parallel batch, so that forced_make finds them compiled. */
static void compile_all(const hm_gemm_config *cfgs, int count) {
  hm_gemm_source *src = gt_alloc((size_t)count * sizeof(*src));
  hm_kernel_source *ks = gt_alloc((size_t)count * sizeof(*ks));
  const hm_cubin **cubins = gt_alloc((size_t)count * sizeof(*cubins));
  for (int i = 0; i < count; i++) {
    HM_ASSERT_OK(hm_gemm_gen(&cfgs[i], &src[i]));
    ks[i] = src[i].src;
  }
  HM_ASSERT_OK(hm_jit_get_cubins(ks, count, cubins));
  for (int i = 0; i < count; i++) hm_gemm_source_free(&src[i]);
  free(src), free(ks), free(cubins);
}

static void forced_make(hm_layer *l, const hm_gemm_config *cfg, forced *f) {
  memset(f, 0, sizeof(*f));
  f->cfg = *cfg;
  hm_gemm_source src;
  HM_ASSERT_OK(hm_gemm_gen(&f->cfg, &src));
  snprintf(f->name, sizeof(f->name), "%s", src.name);
  HM_ASSERT_OK(hm_kernel_get(engine, &src.src, &f->kernel));
  hm_gemm_source_free(&src);
  f->ops = hm_layer_operands(l);
  const size_t ws = hm_gemm_workspace_bytes(&f->cfg, engine->sm_count);
  if (ws > 0) {
    HM_ASSERT_OK(hm_mem_alloc(engine, ws, &f->workspace));
    HM_ASSERT_OK(hm_engine_memset(engine, f->workspace, 0, ws, NULL));
  }
}

static void forced_free(forced *f) {
  hm_mem_free(engine, f->workspace);
}

static bool run_dense(hm_rng *rng, const gt_case *c, const gt_layer_data *d, forced *f, int64_t m) {
  void *a = gt_random(rng, c->act, m * c->k, 1.0f);
  void *out = gt_alloc((size_t)(m * c->n) * 2), *ref = gt_alloc((size_t)(m * c->n) * 2);
  const hm_gemm_args args = {.type = HM_GEMM_DENSE, .m = m, .a = a};
  gt_reference(c, d, &args, m, ref);
  gt_device_run_with(engine, forced_run, f, &args, m, c->k, m, c->n, 1, out);
  const double err = gt_compare(out, ref, m * c->n, c->out, c->n, c->name);
  const bool ok = err <= gt_tolerance(c);
  printf("%-34s N=%-5lld K=%-5lld M=%-5lld rel_err %.2e %s\n", c->name, (long long)c->n, (long long)c->k,
         (long long)m, err, ok ? "ok" : "FAIL");
  free(a), free(out), free(ref);
  return ok;
}

#define DENSE_CASES ((int)HM_ARRAY_SIZE(dense_cases))

/* Returns how many of the cases' kernels stage their output tile in a ring slot. */
static int dense_check(const shape_set *set, const char *seed) {
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed(seed));
  gt_layer_data d[DENSE_CASES];
  hm_layer *l[DENSE_CASES];
  hm_gemm_config cfg[DENSE_CASES];
  for (int i = 0; i < DENSE_CASES; i++) {
    gt_layer_data_make(&rng, &dense_cases[i], &d[i]);
    l[i] = gt_layer_make(engine, &dense_cases[i], &d[i]);
    cfg[i] = forced_config(l[i], HM_GEMM_DENSE, &set->t[i % set->count]);
  }
  compile_all(cfg, DENSE_CASES);
  int failed = 0, in_ring = 0;
  for (int i = 0; i < DENSE_CASES; i++) {
    in_ring += hm_gemm_ws_c_in_ring(&cfg[i]);
    forced f;
    forced_make(l[i], &cfg[i], &f);
    printf("# %s\n", f.name);
    for (size_t j = 0; j < HM_ARRAY_SIZE(m_list); j++)
      failed += !run_dense(&rng, &dense_cases[i], &d[i], &f, m_list[j]);
    forced_free(&f);
    hm_layer_destroy(l[i]);
    gt_layer_data_free(&d[i]);
  }
  if (failed) fail_msg("%d dense wgmma cases out of bound", failed);
  return in_ring;
}

static void dense_formats_match_reference(void **state) {
  (void)state;
  dense_check(&plain, "wgmma_dense_formats_match_reference");
}

static void ws_dense_formats_match_reference(void **state) {
  (void)state;
  dense_check(&specialized, "wgmma_ws_dense_formats_match_reference");
}

static void few_unit_copies_match_reference(void **state) {
  (void)state;
  dense_check(&few_copies, "wgmma_few_unit_copies_match_reference");
}

#define MOE_CASES ((int)HM_ARRAY_SIZE(moe_cases))
static const hm_gemm_type moe_types[] = {HM_GEMM_INDEXED, HM_GEMM_GROUPED_CONTIGUOUS, HM_GEMM_GROUPED_MASKED};
#define MOE_TYPES ((int)HM_ARRAY_SIZE(moe_types))

static int moe_check(const shape_set *set, const char *seed) {
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed(seed));
  gt_layer_data d[MOE_CASES];
  hm_layer *l[MOE_CASES];
  hm_gemm_config cfg[MOE_CASES][MOE_TYPES];
  for (int i = 0; i < MOE_CASES; i++) {
    gt_layer_data_make(&rng, &moe_cases[i], &d[i]);
    l[i] = gt_layer_make(engine, &moe_cases[i], &d[i]);
    for (int t = 0; t < MOE_TYPES; t++)
      cfg[i][t] = forced_config(l[i], moe_types[t], &set->t[(i + t) % set->count]);
  }
  compile_all(&cfg[0][0], MOE_CASES * MOE_TYPES);
  int failed = 0, in_ring = 0;
  for (int i = 0; i < MOE_CASES; i++) {
    const gt_case *c = &moe_cases[i];
    forced f[MOE_TYPES];
    for (int t = 0; t < MOE_TYPES; t++) {
      in_ring += hm_gemm_ws_c_in_ring(&cfg[i][t]);
      forced_make(l[i], &cfg[i][t], &f[t]);
      printf("# %s\n", f[t].name);
    }
    const gt_moe_runner idx = {engine, forced_run, &f[0], forced_block_m};
    const gt_moe_runner cont = {engine, forced_run, &f[1], forced_block_m};
    const gt_moe_runner mask = {engine, forced_run, &f[2], forced_block_m};
    for (size_t j = 0; j < HM_ARRAY_SIZE(m_list); j++) {
      failed += !gt_moe_indexed(&idx, &rng, c, &d[i], m_list[j], false);
      failed += !gt_moe_indexed(&idx, &rng, c, &d[i], m_list[j], true);
      failed += !gt_moe_contiguous(&cont, &rng, c, &d[i], m_list[j]);
      failed += !gt_moe_masked(&mask, &rng, c, &d[i], m_list[j]);
    }
    for (int t = 0; t < MOE_TYPES; t++) forced_free(&f[t]);
    hm_layer_destroy(l[i]);
    gt_layer_data_free(&d[i]);
  }
  if (failed) fail_msg("%d MoE wgmma cases out of bound", failed);
  return in_ring;
}

static void moe_layouts_match_reference(void **state) {
  (void)state;
  moe_check(&plain, "wgmma_moe_layouts_match_reference");
}

static void ws_moe_layouts_match_reference(void **state) {
  (void)state;
  moe_check(&specialized, "wgmma_ws_moe_layouts_match_reference");
}

static void ring_staged_tile_matches_reference(void **state) {
  (void)state;
  const int dense = dense_check(&ring_staged, "wgmma_ring_staged_dense");
  const int moe = moe_check(&ring_staged, "wgmma_ring_staged_moe");
  printf("# output tile in a ring slot: %d dense, %d MoE kernels\n", dense, moe);
  assert_true(dense > 0 && moe > 0);
}

/* C 4 bytes past 16-byte alignment: the launch passes no tensor maps and the tile goes out
 * by the threads' copy from the swizzled staging tile. */
static void ws_unaligned_output_matches_reference(void **state) {
  (void)state;
  gt_c_skew = 4;
  dense_check(&first_specialized, "wgmma_ws_unaligned_dense");
  moe_check(&first_specialized, "wgmma_ws_unaligned_moe");
}

/* Stream-K sums partials in k order: two runs of a split tile give the same bits. */
static void stream_k_check(const hm_gemm_tuning *t, const char *seed) {
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed(seed));
  const gt_case *c = &dense_cases[0];
  gt_layer_data d;
  gt_layer_data_make(&rng, c, &d);
  hm_layer *l = gt_layer_make(engine, c, &d);
  forced f;
  const hm_gemm_config cfg = forced_config(l, HM_GEMM_DENSE, t);
  forced_make(l, &cfg, &f);
  const int64_t m = 333;
  void *a = gt_random(&rng, c->act, m * c->k, 1.0f);
  void *x = gt_alloc((size_t)(m * c->n) * 2), *y = gt_alloc((size_t)(m * c->n) * 2);
  const hm_gemm_args args = {.type = HM_GEMM_DENSE, .m = m, .a = a};
  gt_device_run_with(engine, forced_run, &f, &args, m, c->k, m, c->n, 1, x);
  gt_device_run_with(engine, forced_run, &f, &args, m, c->k, m, c->n, 1, y);
  assert_memory_equal(x, y, (size_t)(m * c->n) * 2);
  free(a), free(x), free(y);
  forced_free(&f);
  hm_layer_destroy(l);
  gt_layer_data_free(&d);
}

static void stream_k_is_deterministic(void **state) {
  (void)state;
  stream_k_check(&shapes[0], "wgmma_stream_k_is_deterministic");
  stream_k_check(&ws_shapes[1], "wgmma_ws_stream_k_is_deterministic");
}

int main(void) {
  engine = hm_test_cuda_engine_or_skip();
  if (engine == NULL) return HM_TEST_SKIP;
  if (engine->arch != 90) {
    printf("SKIP: the wgmma kernel needs sm_90, %s is sm_%d\n", hm_engine_device_name(engine), engine->arch);
    hm_engine_destroy(engine);
    return HM_TEST_SKIP;
  }
  printf("# device: %s\n", hm_engine_device_name(engine));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(dense_formats_match_reference),
      cmocka_unit_test(moe_layouts_match_reference),
      cmocka_unit_test(ws_dense_formats_match_reference),
      cmocka_unit_test(few_unit_copies_match_reference),
      cmocka_unit_test(ws_moe_layouts_match_reference),
      cmocka_unit_test(stream_k_is_deterministic),
      cmocka_unit_test(ring_staged_tile_matches_reference),
      cmocka_unit_test_teardown(ws_unaligned_output_matches_reference, gt_c_unskew),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_engine_destroy(engine);
  hm_shutdown();
  return rc;
}
