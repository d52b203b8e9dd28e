/* SPDX-License-Identifier: Apache-2.0 */
/*
 * MoE weight-only GEMMs on the device against the host reference: indexed (gate-up
 * gather with top_k, down with a_rows_per_token = 1, top-k weights, a block with
 * expert -1), grouped-contiguous (padded segments) and grouped-masked, with experts
 * that get no tokens, at M = 1, 7, 64, 333 tokens. The metadata is uploaded before each
 * launch, so the down and grouped launches say routing_ready, as the MoE layer's down GEMM
 * does: their decode tiles read it before the grid dependency (gemm_pdl.cuh).
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

static void moe_layouts_match_reference(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_layouts_match_reference"));
  int failed = 0;
  for (size_t i = 0; i < HM_ARRAY_SIZE(cases); i++) {
    const gt_case *c = &cases[i];
    gt_layer_data d;
    gt_layer_data_make(&rng, c, &d);
    hm_layer *l = gt_layer_make(engine, c, &d);
    const gt_moe_runner r = {engine, gt_forward, l, layer_block_m};
    for (size_t j = 0; j < HM_ARRAY_SIZE(m_list); j++) {
      failed += !gt_moe_indexed(&r, &rng, c, &d, m_list[j], false);
      failed += !gt_moe_indexed(&r, &rng, c, &d, m_list[j], true);
      failed += !gt_moe_contiguous(&r, &rng, c, &d, m_list[j]);
      failed += !gt_moe_masked(&r, &rng, c, &d, m_list[j]);
    }
    hm_layer_destroy(l);
    gt_layer_data_free(&d);
  }
  if (failed) fail_msg("%d MoE cases out of bound", failed);
}

int main(void) {
  engine = hm_test_cuda_engine_or_skip();
  if (engine == NULL) return HM_TEST_SKIP;
  const struct CMUnitTest tests[] = {cmocka_unit_test(moe_layouts_match_reference)};
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_engine_destroy(engine);
  hm_shutdown();
  return rc;
}
