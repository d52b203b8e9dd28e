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
 * again with its warp-specialized form (gemm_w8a8_ws.cuh), on two consumer warpgroups
 * and on three, and on its first tile with C 4 bytes past 16-byte alignment (no tensor
 * stores: the threads' copy from the swizzled tile). f16 accumulation
 * (hm_layer_config.fp16_accumulate): fp8 per-channel, mxfp4 and nvfp4 weights with per-token
 * scales, dense and the MoE layouts, and every code at its largest, within a looser bound. The
 * swapped 8-row tile forced on every case and GEMM type (gemm_w8a8_util.h w8_swap8_test),
 * with f32 and f16 accumulation.
 */
#include "gemm_w8a8_util.h"

/* gs: a per-expert global scale on top of the blocks. */
#define FP8_BLOCK(gs) \
  { HM_F8E4M3, HM_F32, HM_SCALE_BLOCK, 128, 128, false, gs }
#define CHANNEL(t, s) \
  { t, s, HM_SCALE_CHANNEL, 0, 0, false, false }

/* N and K are not powers of two: multiples of 128 for blocks, of 16 (K) and 2 (N) otherwise;
 * one N not a multiple of 8, whose rows the warp-specialized kernel copies out by its loop
 * instead of bulk stores. */
static const w8_case dense_cases[] = {
    {"dense fp8 block128 ag128 bf16 bias", FP8_BLOCK(false), HM_F8E4M3, HM_ACT_SCALE_GROUP128, HM_BF16, true,
     false, 640, 896, 1},
    {"dense fp8 channel tok f16", CHANNEL(HM_F8E4M3, HM_F32), HM_F8E4M3, HM_ACT_SCALE_TOKEN, HM_F16, false,
     false, 712, 720, 1},
    {"dense fp8 channel ag128 bf16", CHANNEL(HM_F8E4M3, HM_BF16), HM_F8E4M3, HM_ACT_SCALE_GROUP128, HM_BF16,
     false, false, 520, 784, 1},
    {"dense int8 channel tok bf16 bias", CHANNEL(HM_I8, HM_F32), HM_I8, HM_ACT_SCALE_TOKEN, HM_BF16, true,
     false, 456, 1040, 1},
    {"dense int8 channel ag128 f16", CHANNEL(HM_I8, HM_F16), HM_I8, HM_ACT_SCALE_GROUP128, HM_F16, false,
     false, 202, 592, 1},
};

static const w8_case moe_cases[] = {
    {"moe fp8 block128 ag128 bf16 gscale", FP8_BLOCK(true), HM_F8E4M3, HM_ACT_SCALE_GROUP128, HM_BF16, false,
     false, 384, 640, 8},
    {"moe fp8 channel tok f16 bias", CHANNEL(HM_F8E4M3, HM_F32), HM_F8E4M3, HM_ACT_SCALE_TOKEN, HM_F16, true,
     false, 456, 528, 8},
    {"moe int8 channel tok bf16", CHANNEL(HM_I8, HM_F32), HM_I8, HM_ACT_SCALE_TOKEN, HM_BF16, false, false,
     328, 400, 6},
};

/* f16 accumulation: per-channel fp8 (f32 and bf16 scales), mxfp4 or nvfp4 weights, per-token
 * scales. */
#define MXFP4 \
  { HM_F4E2M1, HM_E8M0, HM_SCALE_GROUP, 32, 0, false, false }
#define NVFP4 \
  { HM_F4E2M1, HM_F8E4M3, HM_SCALE_GROUP, 16, 0, false, true }
static const w8_case acc16_dense_cases[] = {
    {"dense fp8 channel tok bf16 bias acc16", CHANNEL(HM_F8E4M3, HM_F32), HM_F8E4M3, HM_ACT_SCALE_TOKEN,
     HM_BF16, true, false, 712, 720, 1},
    {"dense fp8 channel tok f16 acc16", CHANNEL(HM_F8E4M3, HM_BF16), HM_F8E4M3, HM_ACT_SCALE_TOKEN, HM_F16,
     false, false, 520, 1040, 1},
    {"dense mxfp4 tok bf16 acc16", MXFP4, HM_F8E4M3, HM_ACT_SCALE_TOKEN, HM_BF16, false, false, 456, 736, 1},
    {"dense nvfp4 tok bf16 acc16", NVFP4, HM_F8E4M3, HM_ACT_SCALE_TOKEN, HM_BF16, false, false, 456, 720, 1},
};
static const w8_case acc16_moe_cases[] = {
    {"moe fp8 channel tok f16 bias acc16", CHANNEL(HM_F8E4M3, HM_F32), HM_F8E4M3, HM_ACT_SCALE_TOKEN, HM_F16,
     true, false, 456, 528, 8},
    {"moe nvfp4 tok f16 bias acc16", NVFP4, HM_F8E4M3, HM_ACT_SCALE_TOKEN, HM_F16, true, false, 328, 656,
     8},
};
/* Every code of A and W at its largest: 32 products of 448 x 448 a k32 MMA, the most f16 must
 * hold, and for nvfp4 16 of 448 x 6 (widened: 6 x 2^-6) a K half. */
static const w8_case acc16_saturated_cases[] = {
    {"dense fp8 channel tok bf16 acc16 all 448", CHANNEL(HM_F8E4M3, HM_F32), HM_F8E4M3, HM_ACT_SCALE_TOKEN,
     HM_BF16, false, false, 264, 1024, 1},
    {"dense nvfp4 tok bf16 acc16 all largest", NVFP4, HM_F8E4M3, HM_ACT_SCALE_TOKEN, HM_BF16, false, false,
     264, 1040, 1},
};

static const int64_t wgmma_m_list[] = {7, 333, 1027};

/* bm bn bk warps_m warps_n warps_k stages stream_k min_iters ctas_per_sm mma ws */
static const hm_gemm_tuning wgmma_shapes[] = {
    {128, 128, 128, 1, 8, 1, 6, true, 4, 1, HM_MMA_WGMMA, false}, /* the large-M default */
    {64, 128, 128, 1, 8, 1, 6, true, 4, 1, HM_MMA_WGMMA, false},  /* the 33..64-row default */
    {128, 64, 128, 2, 4, 1, 4, false, 0, 1, HM_MMA_WGMMA, false}, /* 2 token warpgroups, data-parallel */
    {96, 128, 128, 1, 8, 1, 5, true, 2, 1, HM_MMA_WGMMA, false},  /* N = 96, short Stream-K pieces */
    {64, 64, 128, 1, 4, 1, 4, true, 4, 2, HM_MMA_WGMMA, false},   /* one warpgroup, 2 CTAs an SM */
};

/* Warp-specialized: two consumer warpgroups and a producer, one CTA an SM; a warpgroup's
 * tokens are whole m64 blocks (the wgmma M), its columns the wgmma N. */
static const hm_gemm_tuning ws_shapes[] = {
    {128, 128, 128, 2, 4, 1, 5, true, 4, 1, HM_MMA_WGMMA, true}, /* the large-M default */
    {128, 128, 128, 1, 8, 1, 4, true, 4, 1, HM_MMA_WGMMA, true}, /* two m64 blocks a warpgroup, N = 64 */
    {256, 128, 128, 2, 4, 1, 3, true, 4, 1, HM_MMA_WGMMA, true}, /* two m64 blocks a warpgroup, N = 128 */
    {64, 256, 128, 1, 8, 1, 4, true, 4, 1, HM_MMA_WGMMA, true},  /* 64 tokens, N = 128 a warpgroup */
    {128, 64, 128, 2, 4, 1, 4, false, 0, 1, HM_MMA_WGMMA, true}, /* 2 token warpgroups, data-parallel */
    {128, 128, 128, 2, 4, 1, 3, true, 1, 1, HM_MMA_WGMMA, true}, /* one-iteration Stream-K pieces, 3 stages */
};

/* Three consumer warpgroups of one m64 block each (512 threads, 152 registers a consumer),
 * forced on every case and layout after ws_shapes: their rotation reaches only the first
 * shapes. */
static const hm_gemm_tuning ws3_shape[] = {
    {192, 128, 128, 3, 4, 1, 4, true, 4, 1, HM_MMA_WGMMA, true},
};

static void dense_matches_reference(void **state) {
  (void)state;
  w8_cases_test("w8a8_dense_matches_reference", dense_cases, HM_ARRAY_SIZE(dense_cases), W8_DENSE, false,
                "dense W8A8");
}

static void moe_layouts_match_reference(void **state) {
  (void)state;
  w8_cases_test("w8a8_moe_layouts_match_reference", moe_cases, HM_ARRAY_SIZE(moe_cases), W8_MOE, false,
                "MoE W8A8");
}

static bool wgmma_or_skip(void) {
  if (engine->arch == 90) return true;
  printf("SKIP: the W8A8 wgmma kernel needs sm_90a, device is sm_%d\n", engine->arch);
  return false;
}

/* The dense cases or the MoE ones, forced to the wgmma shapes at wgmma_m_list. */
static int forced_cases(const char *seed, w8_layouts layouts, const hm_gemm_tuning *shapes,
                        size_t shape_count) {
  const w8_case *cases = layouts == W8_DENSE ? dense_cases : moe_cases;
  const size_t count = layouts == W8_DENSE ? HM_ARRAY_SIZE(dense_cases) : HM_ARRAY_SIZE(moe_cases);
  const w8_forced_plan plan = {shapes, shape_count, wgmma_m_list, HM_ARRAY_SIZE(wgmma_m_list)};
  return w8_plan_run(seed, cases, count, layouts, false, &plan);
}

/* A test of forced_cases on sm_90: fails naming how many runs of what ("dense W8A8 wgmma") were out of
 * bound. */
static void forced_test(const char *seed, w8_layouts layouts, const hm_gemm_tuning *shapes,
                        size_t shape_count, const char *what) {
  if (!wgmma_or_skip()) skip();
  const int failed = forced_cases(seed, layouts, shapes, shape_count);
  if (failed) fail_msg("%d %s cases out of bound", failed, what);
}

static void wgmma_dense_matches_reference(void **state) {
  (void)state;
  forced_test("w8a8_wgmma_dense_matches_reference", W8_DENSE, wgmma_shapes, HM_ARRAY_SIZE(wgmma_shapes),
              "dense W8A8 wgmma");
}

static void wgmma_moe_layouts_match_reference(void **state) {
  (void)state;
  forced_test("w8a8_wgmma_moe_layouts_match_reference", W8_MOE, wgmma_shapes, HM_ARRAY_SIZE(wgmma_shapes),
              "MoE W8A8 wgmma");
}

static void ws_dense_matches_reference(void **state) {
  (void)state;
  forced_test("w8a8_ws_dense_matches_reference", W8_DENSE, ws_shapes, HM_ARRAY_SIZE(ws_shapes),
              "dense W8A8 warp-specialized");
  forced_test("w8a8_ws3_dense_matches_reference", W8_DENSE, ws3_shape, HM_ARRAY_SIZE(ws3_shape),
              "dense W8A8 on three consumer warpgroups");
}

static void ws_moe_layouts_match_reference(void **state) {
  (void)state;
  forced_test("w8a8_ws_moe_layouts_match_reference", W8_MOE, ws_shapes, HM_ARRAY_SIZE(ws_shapes),
              "MoE W8A8 warp-specialized");
  forced_test("w8a8_ws3_moe_layouts_match_reference", W8_MOE, ws3_shape, HM_ARRAY_SIZE(ws3_shape),
              "MoE W8A8 on three consumer warpgroups");
}

static void ws_unaligned_output_matches_reference(void **state) {
  (void)state;
  gt_c_skew = 4;
  forced_test("w8a8_ws_unaligned_dense", W8_DENSE, ws_shapes, 1, "dense W8A8 warp-specialized, C unaligned");
  forced_test("w8a8_ws_unaligned_moe", W8_MOE, ws_shapes, 1, "MoE W8A8 warp-specialized, C unaligned");
}

static bool f16_acc_or_skip(void) {
  if (engine->arch >= 89) return true;
  printf("SKIP: f16 accumulation of fp8 MMAs needs sm_89, device is sm_%d\n", engine->arch);
  return false;
}

/* Weights of +-1/20 by column and activations of 1: every code at its largest (448; nvfp4: 6
 * under e4m3 scales of 448), so that each k32 MMA sums 32 x 448 x 448 (f16 would overflow
 * without the kernel's 2^-7 on A). */
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

/* f16_acc_or_skip asks sm_89 first, so w8_cases_run skips none of these fp8 cases. */
static void f16_acc_dense_matches_reference(void **state) {
  (void)state;
  if (!f16_acc_or_skip()) skip();
  int failed = w8_cases_run("w8a8_f16_acc_dense_matches_reference", acc16_dense_cases,
                            HM_ARRAY_SIZE(acc16_dense_cases), W8_DENSE, true);
  for (size_t i = 0; i < HM_ARRAY_SIZE(acc16_saturated_cases); i++)
    for (size_t j = 0; j < HM_ARRAY_SIZE(m_list); j++)
      failed += !f16_acc_saturated(&acc16_saturated_cases[i], m_list[j]);
  if (failed) fail_msg("%d dense W8A8 f16-accumulation cases out of bound", failed);
}

static void f16_acc_moe_layouts_match_reference(void **state) {
  (void)state;
  if (!f16_acc_or_skip()) skip();
  w8_cases_test("w8a8_f16_acc_moe_layouts_match_reference", acc16_moe_cases, HM_ARRAY_SIZE(acc16_moe_cases),
                W8_MOE, true, "MoE W8A8 f16-accumulation");
}

static void swap8_dense_matches_reference(void **state) {
  (void)state;
  w8_swap8_test("w8a8_swap8_dense_matches_reference", dense_cases, HM_ARRAY_SIZE(dense_cases), W8_DENSE,
                false, "dense W8A8 swapped 8-row");
}

static void swap8_moe_layouts_match_reference(void **state) {
  (void)state;
  w8_swap8_test("w8a8_swap8_moe_layouts_match_reference", moe_cases, HM_ARRAY_SIZE(moe_cases), W8_MOE, false,
                "MoE W8A8 swapped 8-row");
}

static void swap8_f16_acc_matches_reference(void **state) {
  (void)state;
  if (!f16_acc_or_skip()) skip();
  w8_swap8_test("w8a8_swap8_f16_acc_dense_matches_reference", acc16_dense_cases,
                HM_ARRAY_SIZE(acc16_dense_cases), W8_DENSE, true,
                "dense W8A8 swapped 8-row f16-accumulation");
  w8_swap8_test("w8a8_swap8_f16_acc_moe_layouts_match_reference", acc16_moe_cases,
                HM_ARRAY_SIZE(acc16_moe_cases), W8_MOE, true, "MoE W8A8 swapped 8-row f16-accumulation");
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
      cmocka_unit_test_teardown(ws_unaligned_output_matches_reference, gt_c_unskew),
      cmocka_unit_test(f16_acc_dense_matches_reference),
      cmocka_unit_test(f16_acc_moe_layouts_match_reference),
      cmocka_unit_test(swap8_dense_matches_reference),
      cmocka_unit_test(swap8_moe_layouts_match_reference),
      cmocka_unit_test(swap8_f16_acc_matches_reference),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_engine_destroy(engine);
  hm_shutdown();
  return rc;
}
