/* SPDX-License-Identifier: Apache-2.0 */
/*
 * W4A8 GEMMs (4-bit weights widened to 8 bits in the W8A8 mma.sync kernel) on the device
 * against the host reference (hm_ref_gemm on the same quantized weights and activations):
 * mxfp4 (e2m1 with e8m0 scales per 32) and nvfp4 (e2m1 with e4m3 scales per 16, with and
 * without a per-expert global scale) x fp8 e4m3, and int4 (per-channel scales) x int8,
 * per-token or 1x128 activation scales; dense at M = 1, 7, 64, 333 and the three MoE
 * layouts (indexed gate-up gather and down with top-k weights, grouped-contiguous,
 * grouped-masked) with an expert that gets no tokens. N and K are not powers of two (K
 * an odd multiple of 16 for int4 and nvfp4, whose last k32 step is half padding).
 * Adversarial cases draw each e8m0 scale (or int4 channel scale) from 2^-20..2^20, so one
 * column's K groups span 2^40, and each nvfp4 e4m3 scale from all its positive codes
 * (2^-9..448) with global scales 2^-10..2^10 apart. C is poisoned first: every element the
 * reference writes must be written, no other. The same cases again with the swapped 8-row
 * tile forced on every GEMM type (gemm_w8a8_util.h w8_swap8_test), and with standard tiles
 * forced at M = 1, 3, 8, 64, 333 (one and two units a warp, bk 64 and 128, Stream-K and
 * data-parallel).
 */
#include "gemm_w8a8_util.h"

#define MXFP4 \
  { HM_F4E2M1, HM_E8M0, HM_SCALE_GROUP, 32, 0, false, false }
/* gs: the per-expert f32 global scale of nvfp4 checkpoints. */
#define NVFP4(gs) \
  { HM_F4E2M1, HM_F8E4M3, HM_SCALE_GROUP, 16, 0, false, gs }
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
    {"dense nvfp4 tok bf16 bias gscale", NVFP4(true), FP8, HM_BF16, true, false, 712, 1040, 1},
    {"dense nvfp4 ag128 f16", NVFP4(false), FP8_G, HM_F16, false, false, 520, 896, 1},
    {"dense nvfp4 tok bf16 gscale adversarial", NVFP4(true), FP8, HM_BF16, false, true, 456, 720, 1},
    {"dense int4 tok bf16 bias", INT4(HM_F32), I8, HM_BF16, true, false, 456, 1040, 1},
    {"dense int4 ag128 f16", INT4(HM_F16), I8_G, HM_F16, false, false, 200, 592, 1},
    {"dense int4 tok bf16 adversarial", INT4(HM_F32), I8, HM_BF16, false, true, 328, 720, 1},
};

static const w8_case moe_cases[] = {
    {"moe mxfp4 tok bf16", MXFP4, FP8, HM_BF16, false, false, 456, 640, 8},
    {"moe mxfp4 tok bf16 bias adversarial", MXFP4, FP8, HM_BF16, true, true, 384, 544, 8},
    {"moe nvfp4 tok bf16 gscale", NVFP4(true), FP8, HM_BF16, false, false, 456, 656, 8},
    {"moe nvfp4 ag128 f16 bias", NVFP4(false), FP8_G, HM_F16, true, false, 328, 640, 6},
    {"moe nvfp4 tok bf16 bias gscale adversarial", NVFP4(true), FP8, HM_BF16, true, true, 384, 528, 8},
    {"moe int4 tok f16 bias", INT4(HM_BF16), I8, HM_F16, true, false, 328, 400, 6},
    {"moe int4 ag128 bf16 adversarial", INT4(HM_F32), I8_G, HM_BF16, false, true, 264, 784, 6},
};

static void dense_matches_reference(void **state) {
  (void)state;
  w8_cases_test("w4a8_dense_matches_reference", dense_cases, HM_ARRAY_SIZE(dense_cases), W8_DENSE, false,
                "dense W4A8");
}

static void moe_layouts_match_reference(void **state) {
  (void)state;
  w8_cases_test("w4a8_moe_layouts_match_reference", moe_cases, HM_ARRAY_SIZE(moe_cases), W8_MOE, false,
                "MoE W4A8");
}

static void swap8_dense_matches_reference(void **state) {
  (void)state;
  w8_swap8_test("w4a8_swap8_dense_matches_reference", dense_cases, HM_ARRAY_SIZE(dense_cases), W8_DENSE,
                false, "dense W4A8 swapped 8-row");
}

static void swap8_moe_layouts_match_reference(void **state) {
  (void)state;
  w8_swap8_test("w4a8_swap8_moe_layouts_match_reference", moe_cases, HM_ARRAY_SIZE(moe_cases), W8_MOE, false,
                "MoE W4A8 swapped 8-row");
}

/* Standard (16-row and up) tiles where the plans pick the swapped one, and beyond: each bk
 * 128 or less divides 128 for 1x128 activation scales, and each fits sm_89's shared memory. */
/* bm bn bk warps_m warps_n warps_k stages stream_k min_iters ctas_per_sm mma ws */
static const hm_gemm_tuning std_tunings[] = {
    {16, 128, 128, 1, 2, 2, 4, true, 4, 1, HM_MMA_SYNC, false}, /* one m16 block, two k-warps */
    {64, 256, 128, 2, 4, 1, 3, false, 0, 1, HM_MMA_SYNC, false}, /* two units a warp, data-parallel */
    {32, 128, 64, 2, 2, 1, 4, true, 1, 1, HM_MMA_SYNC, false},  /* bk 64, one-iteration Stream-K */
};

static void std_tiles_dense_match_reference(void **state) {
  (void)state;
  w8_forced_test("w4a8_std_tiles_dense_matches_reference", dense_cases, HM_ARRAY_SIZE(dense_cases), W8_DENSE,
                 false, std_tunings, HM_ARRAY_SIZE(std_tunings), "dense W4A8 standard-tile");
}

static void std_tiles_moe_layouts_match_reference(void **state) {
  (void)state;
  w8_forced_test("w4a8_std_tiles_moe_layouts_match_reference", moe_cases, HM_ARRAY_SIZE(moe_cases), W8_MOE,
                 false, std_tunings, HM_ARRAY_SIZE(std_tunings), "MoE W4A8 standard-tile");
}

int main(void) {
  engine = hm_test_cuda_engine_or_skip();
  if (engine == NULL) return HM_TEST_SKIP;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(dense_matches_reference),
      cmocka_unit_test(moe_layouts_match_reference),
      cmocka_unit_test(swap8_dense_matches_reference),
      cmocka_unit_test(swap8_moe_layouts_match_reference),
      cmocka_unit_test(std_tiles_dense_match_reference),
      cmocka_unit_test(std_tiles_moe_layouts_match_reference),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_engine_destroy(engine);
  hm_shutdown();
  return rc;
}
