/* SPDX-License-Identifier: Apache-2.0 */
/*
 * MoE weight-only GEMMs on the device against the host reference: indexed (gate-up
 * gather with top_k, down with a_rows_per_token = 1, top-k weights, a block with
 * expert -1), grouped-contiguous (padded segments) and grouped-masked, with experts
 * that get no tokens, at M = 1, 7, 64, 333 tokens. The metadata is uploaded before each
 * launch, so the down and grouped launches say routing_ready, as the MoE layer's down GEMM
 * does: their decode tiles read it before the grid dependency (gemm_pdl.cuh). A routing
 * count past the rows its buffers hold (max_padded) is held to them on the device.
 */
#include "gemm_moe_util.h"

static hm_engine *engine;

static const gt_case cases[] = {
    {"moe w4a16 u4z g128 bf16", {HM_U4, HM_BF16, HM_SCALE_GROUP, 128, 0, true, false}, HM_BF16, HM_BF16, false, 704, 1024, 16, false},
    {"moe i4 g64 f16 bias", {HM_I4, HM_F16, HM_SCALE_GROUP, 64, 0, false, false}, HM_F16, HM_F16, true, 576, 832, 8, false},
    {"moe u8 channel bf16", {HM_U8, HM_BF16, HM_SCALE_CHANNEL, 0, 0, false, false}, HM_BF16, HM_BF16, false, 640, 768, 8, false},
    {"moe bf16 unquantized", {HM_BF16, HM_BF16, HM_SCALE_NONE, 0, 0, false, false}, HM_BF16, HM_BF16, false, 512, 640, 4, false},
};

static const int64_t m_list[] = {1, 7, 64, 333};

static int layer_block_m(void *layer, int64_t valid_m) { return hm_layer_block_m(layer, valid_m); }

/* A layer of case c on the device, its host data and seeded generator, and its runner. */
typedef struct moe_layer {
  hm_rng rng;
  gt_layer_data d;
  gt_moe_runner r;
} moe_layer;

static void moe_layer_make(moe_layer *x, const gt_case *c, const char *seed) {
  hm_rng_seed(&x->rng, hm_test_seed(seed));
  gt_layer_data_make(&x->rng, c, &x->d);
  x->r = (gt_moe_runner){engine, gt_forward, gt_layer_make(engine, c, &x->d), layer_block_m};
}

static void moe_layer_free(moe_layer *x) {
  hm_layer_destroy(x->r.ctx);
  gt_layer_data_free(&x->d);
}

/* Every layout at every M for one format. A case a format, so that a device run can give
 * each its own process and cores (scripts/device-ab.sh CASES_JOBS): the kernels of the four
 * formats compiled in one process ran past 281 s on an H100 (thirty-second session). */
static void layouts_match_reference(const gt_case *c, const char *seed) {
  moe_layer x;
  moe_layer_make(&x, c, seed);
  int failed = 0;
  for (size_t j = 0; j < HM_ARRAY_SIZE(m_list); j++) {
    failed += !gt_moe_indexed(&x.r, &x.rng, c, &x.d, m_list[j], false);
    failed += !gt_moe_indexed(&x.r, &x.rng, c, &x.d, m_list[j], true);
    failed += !gt_moe_contiguous(&x.r, &x.rng, c, &x.d, m_list[j]);
    failed += !gt_moe_masked(&x.r, &x.rng, c, &x.d, m_list[j]);
  }
  moe_layer_free(&x);
  if (failed) fail_msg("%s: %d MoE cases out of bound", c->name, failed);
}

static void w4a16_layouts_match_reference(void **state) {
  (void)state;
  layouts_match_reference(&cases[0], __func__);
}

static void i4_bias_layouts_match_reference(void **state) {
  (void)state;
  layouts_match_reference(&cases[1], __func__);
}

static void u8_channel_layouts_match_reference(void **state) {
  (void)state;
  layouts_match_reference(&cases[2], __func__);
}

static void bf16_layouts_match_reference(void **state) {
  (void)state;
  layouts_match_reference(&cases[3], __func__);
}

/* Indexed launches whose *num_padded says INT32_MAX: the kernels read no row past
 * max_padded (sentinel rows of expert -1), so the output is the reference's for the true
 * count, at decode (the 8-row tiles) and past it. */
static void indexed_count_past_bound_is_clamped(void **state) {
  (void)state;
  const gt_case *c = &cases[0];
  moe_layer x;
  moe_layer_make(&x, c, __func__);
  int failed = 0;
  for (int64_t m = 1; m <= 64; m *= 8)
    for (int down = 0; down < 2; down++) failed += !gt_moe_indexed_with(&x.r, &x.rng, c, &x.d, m, down, true);
  moe_layer_free(&x);
  if (failed) fail_msg("%d indexed launches past their bound wrong", failed);
}

int main(void) {
  engine = hm_test_cuda_engine_or_skip();
  if (engine == NULL) return HM_TEST_SKIP;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(w4a16_layouts_match_reference),
      cmocka_unit_test(i4_bias_layouts_match_reference),
      cmocka_unit_test(u8_channel_layouts_match_reference),
      cmocka_unit_test(bf16_layouts_match_reference),
      cmocka_unit_test(indexed_count_past_bound_is_clamped),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_engine_destroy(engine);
  hm_shutdown();
  return rc;
}
