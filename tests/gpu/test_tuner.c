/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tuner on a GPU: one small MoE layer is tuned in each layout (indexed, contiguous,
 * masked, the last as chains of launches back to back with its last expert a fused shared
 * one that every token takes), its entries land in the table under this device's
 * key, every tuned time is at most the analytic choice's, and the layer's plan on this engine (auto and tuned
 * sources) then answers with the tuned configs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "heuristics/choose_engine.h"
#include "heuristics/tuner.h"
#include "hm_test.h"
#include "kernels/cache.h"

static hm_engine *engine;

static void tune_one_small_layer(hm_gemm_type type, int chain, int shared) {
  const hm_layer_config lc = hm_test_layer_config("w4a16", 1024, 2048, 8, 2);
  const hm_tune_request req = {&lc, type, 3, 9, chain, shared, false, 0};
  hm_tune_result r;
  HM_ASSERT_OK(hm_tuner_run(engine, &req, &r));
  assert_true(r.count > 0);
  char root[1024];
  HM_ASSERT_OK(hm_cache_default_root(root, sizeof(root)));
  HM_ASSERT_OK(hm_tune_table_store(root, r.entries, r.count));
  hm_tune_table t;
  hm_tune_identity id;
  hm_layer_plan plans[2];
  HM_ASSERT_OK(hm_tune_table_load(root, &t));
  HM_ASSERT_OK(hm_tune_identity_for_engine(engine, &id));
  HM_ASSERT_OK(hm_heuristics_layer_plan(engine, &lc, type, hm_engine_arch(engine), HM_PLAN_AUTO, &plans[0]));
  HM_ASSERT_OK(hm_heuristics_layer_plan(engine, &lc, type, hm_engine_arch(engine), HM_PLAN_TUNED, &plans[1]));
  for (int i = 0; i < r.count; i++) {
    const hm_tune_bucket *b = &r.buckets[i];
    printf("# %s M %6lld  heuristic %8.2f us  default %8.2f us  tuned %8.2f us  predicted %8.2f us\n",
           hm_gemm_type_name(type), (long long)b->m, b->heuristic_us, b->default_us, b->tuned_us,
           b->predicted_us);
    assert_true(b->tuned_us > 0 && b->tuned_us <= b->heuristic_us);
    const hm_tune_entry *e = hm_tune_table_lookup(&t, &id, r.entries[i].layer, b->m_lo, b->m_hi);
    assert_non_null(e);
    assert_true(hm_choose_tuning_equal(&e->tuning, &b->tuned));
    for (int p = 0; p < 2; p++) {
      const int at = hm_gemm_plan_pick(&plans[p].plan, b->m);
      assert_true(hm_choose_tuning_equal(&plans[p].plan.cfg[at].tuning, &b->tuned));
      assert_int_equal(plans[p].source[at], HM_PLAN_TUNED);
    }
  }
  hm_tune_table_free(&t);
}

static void tune_indexed(void **state) {
  (void)state;
  tune_one_small_layer(HM_GEMM_INDEXED, 1, 0);
}

static void tune_contiguous(void **state) {
  (void)state;
  tune_one_small_layer(HM_GEMM_GROUPED_CONTIGUOUS, 1, 0);
}

/* Decode launches run back to back in serving: timed as chains of four; a token's second
 * row goes to the shared expert 7. */
static void tune_masked_chained_shared(void **state) {
  (void)state;
  tune_one_small_layer(HM_GEMM_GROUPED_MASKED, 4, 1);
}

int main(void) {
  engine = hm_test_cuda_engine_or_skip();
  if (engine == NULL) return HM_TEST_SKIP;
  const struct CMUnitTest tests[] = {cmocka_unit_test(tune_indexed), cmocka_unit_test(tune_contiguous),
                                     cmocka_unit_test(tune_masked_chained_shared)};
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_engine_destroy(engine);
  hm_shutdown();
  return rc;
}
