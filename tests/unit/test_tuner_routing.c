/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tuner's routing on the host: every slot routed once, each token's slots on distinct
 * experts, segments padded to the block with sentinel ids, the expert of every block, load
 * spread evenly over the routed experts and every token on a fused shared one; and which
 * buckets the tuner times for each layout.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "heuristics/choose.h"
#include "heuristics/tuner.h"
#include "heuristics/tuner_routing.h"
#include "hm_test.h"

/* The expert whose segment holds padded row i. */
static int64_t segment_of(const hm_tuner_routing *r, int64_t i) {
  int64_t e = 0;
  while (r->starts[e + 1] <= i) e++;
  return e;
}

static void check_routing(int64_t tokens, int top_k, int64_t experts, int shared, int block) {
  hm_tuner_routing r;
  HM_ASSERT_OK(hm_tuner_routing_make(tokens, top_k, experts, shared, block, &r));
  assert_int_equal(r.slots, tokens * top_k);
  const int64_t routed = experts - shared;
  int64_t sum = 0, most = 0;
  for (int64_t e = 0; e < experts; e++) {
    sum += r.counts[e];
    if (e < routed) most = r.counts[e] > most ? r.counts[e] : most;
    if (e >= routed) assert_int_equal(r.counts[e], tokens);
    const int64_t width = r.starts[e + 1] - r.starts[e];
    assert_int_equal(width, (r.counts[e] + block - 1) / block * block);
    assert_int_equal(r.starts[e] % block, 0);
  }
  assert_int_equal(sum, r.slots);
  assert_int_equal(r.max_count, shared > 0 && tokens > most ? tokens : most);
  const int64_t padded = r.starts[experts];
  int64_t *expert_of_slot = malloc((size_t)(r.slots ? r.slots : 1) * sizeof(int64_t));
  assert_non_null(expert_of_slot);
  for (int64_t s = 0; s < r.slots; s++) expert_of_slot[s] = -1;
  for (int64_t i = 0; i < padded; i++) {
    const int64_t e = segment_of(&r, i), id = r.sorted_ids[i];
    assert_int_equal(r.block_experts[i / block], e);
    if (i - r.starts[e] >= r.counts[e]) {
      assert_int_equal(id, r.slots);
      continue;
    }
    assert_true(id >= 0 && id < r.slots);
    assert_int_equal(expert_of_slot[id], -1); /* each slot routed once */
    expert_of_slot[id] = e;
  }
  for (int64_t t = 0; t < tokens; t++)
    for (int a = 0; a < top_k; a++) {
      const int64_t e = expert_of_slot[t * top_k + a];
      assert_true(e >= 0);
      /* as the layer's alignment: a token's last slots are the shared experts, in order */
      assert_true(a < top_k - shared ? e < routed : e == routed + a - (top_k - shared));
      for (int b = 0; b < a; b++) assert_true(e != expert_of_slot[t * top_k + b]);
    }
  /* Uniform: once shares are large, no routed expert holds half as much again as its share. */
  const int64_t routed_slots = tokens * (top_k - shared);
  if (routed_slots >= 64 * routed) assert_true(2 * most * routed <= 3 * routed_slots);
  free(expert_of_slot);
  hm_tuner_routing_free(&r);
}

static void routes_every_slot_once_on_distinct_experts(void **state) {
  (void)state;
  check_routing(1, 8, 256, 0, 8);
  check_routing(7, 8, 257, 0, 16);
  check_routing(333, 6, 128, 0, 64);
  check_routing(4096, 8, 256, 0, 128);
  check_routing(1000, 2, 8, 0, 256);
  check_routing(64, 1, 1, 0, 1);
  check_routing(0, 8, 256, 0, 64);
}

/* DeepSeek-V3 on one rank: 256 routed experts and the shared one as expert 256, top_k 9.
 * Every token's ninth slot is the shared expert, so at prefill its segment is 32 routed
 * ones' (tokens against 8 x tokens / 256). */
static void a_fused_shared_expert_takes_every_token(void **state) {
  (void)state;
  check_routing(1, 9, 257, 1, 8);
  check_routing(7, 9, 257, 1, 1);
  check_routing(4096, 9, 257, 1, 128);
  check_routing(333, 3, 10, 2, 64);
  check_routing(0, 9, 257, 1, 64);
  hm_tuner_routing r;
  HM_ASSERT_OK(hm_tuner_routing_make(4096, 9, 257, 1, 128, &r));
  assert_int_equal(r.counts[256], 4096);
  assert_int_equal(r.max_count, 4096);
  assert_true(r.counts[0] >= 96 && r.counts[0] <= 160); /* 4096 x 8 / 256 = 128 */
  hm_tuner_routing_free(&r);
}

static void refuses_impossible_routing(void **state) {
  (void)state;
  hm_tuner_routing r;
  assert_int_equal(hm_tuner_routing_make(4, 9, 8, 0, 16, &r), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_tuner_routing_make(4, 2, 8, 0, 0, &r), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_tuner_routing_make(-1, 2, 8, 0, 16, &r), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_tuner_routing_make((int64_t)1 << 30, 8, 256, 0, 16, &r), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_tuner_routing_make(4, 2, 8, 2, 16, &r), HM_INVALID_ARGUMENT); /* no routed slot */
  assert_int_equal(hm_tuner_routing_make(4, 2, 8, -1, 16, &r), HM_INVALID_ARGUMENT);
  assert_null(r.counts);
}

/* DeepSeek-V3's gate_up: masked launches hold max_m = tokens rows for each of 257 experts,
 * so the tuner stops timing them where those rows outgrow its bench; the other layouts
 * are timed in every bucket below its largest valid M. */
static void masked_buckets_stop_where_their_rows_outgrow_the_bench(void **state) {
  (void)state;
  const hm_layer_config lc = hm_test_layer_config("w4a16", 4096, 7168, 257, 9);
  int timed[4] = {0};
  const hm_gemm_type types[4] = {HM_GEMM_DENSE, HM_GEMM_INDEXED, HM_GEMM_GROUPED_CONTIGUOUS,
                                 HM_GEMM_GROUPED_MASKED};
  for (int t = 0; t < 4; t++)
    for (int b = 0; b < hm_choose_bucket_count(); b++) {
      int64_t lo, hi;
      hm_choose_bucket(&lc, types[t], b, &lo, &hi);
      const bool on = hm_tuner_bucket_timed(&lc, types[t], lo, hi);
      if (b > 0 && on) assert_true(timed[t] == b); /* the timed buckets are the first ones */
      timed[t] += on;
    }
  assert_int_equal(timed[1], timed[2]);
  assert_true(timed[3] >= 4 && timed[3] < timed[1]);
  int64_t lo, hi;
  hm_choose_bucket(&lc, HM_GEMM_GROUPED_MASKED, 0, &lo, &hi);
  assert_true(hm_tuner_bucket_timed(&lc, HM_GEMM_GROUPED_MASKED, lo, hi));
}

/* DeepSeek-V3's dense gate_up (N 36864, K 7168): every bucket below the tuner's largest valid
 * M (65536 rows, 5.8 GB of activations and output) is timed. */
static void dense_buckets_are_timed_up_to_the_largest_valid_m(void **state) {
  (void)state;
  const hm_layer_config lc = hm_test_layer_config("w8a8-fp8", 36864, 7168, 1, 0);
  for (int b = 0; b < hm_choose_bucket_count(); b++) {
    int64_t lo, hi;
    hm_choose_bucket(&lc, HM_GEMM_DENSE, b, &lo, &hi);
    assert_int_equal(hm_tuner_bucket_timed(&lc, HM_GEMM_DENSE, lo, hi), lo < 65536);
  }
}

/* A request whose shared experts leave no routed slot, that names them on a dense launch,
 * or whose bucket bound is negative, is refused before anything is compiled or timed. */
static void impossible_tune_requests_are_refused(void **state) {
  (void)state;
  hm_engine *eng = hm_test_host_engine();
  const hm_layer_config lc = hm_test_layer_config("w4a16", 1024, 2048, 8, 2);
  hm_tune_result *r = malloc(sizeof(*r));
  assert_non_null(r);
  const hm_tune_request bad[] = {{&lc, HM_GEMM_GROUPED_MASKED, 0, 0, 0, 2, false, 0},
                                 {&lc, HM_GEMM_INDEXED, 0, 0, 0, -1, false, 0},
                                 {&lc, HM_GEMM_DENSE, 0, 0, 0, 1, false, 0},
                                 {&lc, HM_GEMM_GROUPED_MASKED, 0, 0, 0, 1, false, -1}};
  for (size_t i = 0; i < HM_ARRAY_SIZE(bad); i++)
    assert_int_equal(hm_tuner_run(eng, &bad[i], r), HM_INVALID_ARGUMENT);
  const hm_tune_request fine = {&lc, HM_GEMM_GROUPED_MASKED, 0, 0, 0, 1, false, 0};
  assert_int_equal(hm_tuner_run(eng, &fine, r), HM_UNSUPPORTED); /* a host engine times nothing */
  free(r);
  hm_engine_destroy(eng);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(routes_every_slot_once_on_distinct_experts),
      cmocka_unit_test(a_fused_shared_expert_takes_every_token),
      cmocka_unit_test(refuses_impossible_routing),
      cmocka_unit_test(masked_buckets_stop_where_their_rows_outgrow_the_bench),
      cmocka_unit_test(dense_buckets_are_timed_up_to_the_largest_valid_m),
      cmocka_unit_test(impossible_tune_requests_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
