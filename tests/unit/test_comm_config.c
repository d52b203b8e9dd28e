/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Comm configuration on one rank: EP/TP derived from the world, every bad value refused
 * with a message naming it, the sharding plan of each rank, and the weight shards.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "hm_test.h"

static hm_comm_config base_config(void) {
  hm_comm_config cfg = HM_COMM_CONFIG_INIT;
  cfg.experts = 16;
  cfg.hidden = 256;
  cfg.intermediate = 64;
  cfg.top_k = 4;
  cfg.max_tokens = 32;
  return cfg;
}

static hm_status resolve(const hm_comm_config *cfg, int world, int rank, hm_comm *c) {
  memset(c, 0, sizeof(*c));
  return hm_comm_config_resolve(c, cfg, world, rank);
}

static void expect_refused(const hm_comm_config *cfg, int world, const char *text) {
  hm_comm c;
  assert_int_equal(resolve(cfg, world, 0, &c), HM_INVALID_ARGUMENT);
  if (strstr(hm_last_error(), text) == NULL) fail_msg("'%s' does not say '%s'", hm_last_error(), text);
}

static void sizes_follow_the_world(void **state) {
  (void)state;
  hm_comm c;
  hm_comm_config cfg = base_config();
  HM_ASSERT_OK(resolve(&cfg, 8, 3, &c));
  assert_int_equal(c.plan.ep, 8);
  assert_int_equal(c.plan.tp, 1);
  assert_int_equal(c.cfg.block_m, 1);
  assert_int_equal(c.cfg.max_m, 8 * 32);
  assert_true(c.cfg.timeout_s > 0);
  cfg.tp = 2;
  HM_ASSERT_OK(resolve(&cfg, 8, 5, &c));
  assert_int_equal(c.plan.ep, 4);
  assert_int_equal(c.plan.ep_rank, 2);
  assert_int_equal(c.plan.tp_rank, 1);
  assert_int_equal(c.plan.local_experts, 4);
  assert_int_equal(c.plan.first_expert, 8);
  assert_int_equal(c.plan.local_intermediate, 32);
  assert_int_equal(c.plan.first_intermediate, 32);
  cfg.tp = 0;
  cfg.ep = 1;
  HM_ASSERT_OK(resolve(&cfg, 8, 7, &c));
  assert_int_equal(c.plan.tp, 8);
  assert_int_equal(c.plan.tp_rank, 7);
  assert_int_equal(c.plan.local_experts, 16);
  assert_int_equal(c.plan.first_intermediate, 56);
}

static void bad_values_are_named(void **state) {
  (void)state;
  hm_comm_config cfg = base_config();
  cfg.magic = 0;
  expect_refused(&cfg, 8, "HM_COMM_CONFIG_INIT");
  cfg = base_config();
  cfg.ep = 4, cfg.tp = 4;
  expect_refused(&cfg, 8, "EP 4 x TP 4 = 16, but the world has 8 ranks");
  cfg = base_config();
  cfg.ep = 3;
  expect_refused(&cfg, 8, "world size 8 is not divisible by EP 3");
  cfg = base_config();
  cfg.experts = 250;
  expect_refused(&cfg, 8, "experts 250 is not divisible by EP 8");
  cfg = base_config();
  cfg.hidden = 200;
  expect_refused(&cfg, 8, "hidden 200");
  cfg = base_config();
  cfg.tp = 8, cfg.intermediate = 36;
  expect_refused(&cfg, 8, "intermediate 36 is not divisible by TP 8");
  cfg = base_config();
  cfg.top_k = 0;
  expect_refused(&cfg, 8, "top_k 0");
  cfg = base_config();
  cfg.combine_dtype = HM_F16;
  expect_refused(&cfg, 8, "combine_dtype f16");
  cfg = base_config();
  cfg.max_tokens = 1 << 28;
  expect_refused(&cfg, 8, "overflow 32-bit row indices");
}

/* Element (e, row, col) of a full tensor holds its own coordinates. */
static float coord(int64_t e, int64_t row, int64_t col) {
  return (float)(e * 1000000 + row * 1000 + col);
}

static void shards_take_the_tp_slice(void **state) {
  (void)state;
  const int64_t experts = 4, hidden = 3, inter = 8;
  hm_comm_plan plan = {.rank = 3,
                       .world = 4,
                       .ep = 2,
                       .tp = 2,
                       .ep_rank = 1,
                       .tp_rank = 1,
                       .experts = experts,
                       .local_experts = 2,
                       .first_expert = 2,
                       .intermediate = inter,
                       .local_intermediate = 4,
                       .first_intermediate = 4};
  float *gate_up = malloc(sizeof(float) * experts * 2 * inter * hidden);
  float *down = malloc(sizeof(float) * experts * hidden * inter);
  float gu_local[2 * 8 * 3], down_local[2 * 3 * 4];
  for (int64_t e = 0; e < experts; e++) {
    for (int64_t r = 0; r < 2 * inter; r++)
      for (int64_t h = 0; h < hidden; h++) gate_up[(e * 2 * inter + r) * hidden + h] = coord(e, r, h);
    for (int64_t h = 0; h < hidden; h++)
      for (int64_t i = 0; i < inter; i++) down[(e * hidden + h) * inter + i] = coord(e, h, i);
  }
  HM_ASSERT_OK(hm_comm_shard_gate_up(&plan, hidden, gate_up, gu_local));
  HM_ASSERT_OK(hm_comm_shard_down(&plan, hidden, down, down_local));
  for (int64_t j = 0; j < 2; j++) {
    for (int64_t r = 0; r < 8; r++)
      for (int64_t h = 0; h < hidden; h++) {
        int64_t full_row = r < 4 ? 4 + r : inter + 4 + (r - 4); /* gate slice, then up slice */
        assert_true(gu_local[(j * 8 + r) * hidden + h] == coord(2 + j, full_row, h));
      }
    for (int64_t h = 0; h < hidden; h++)
      for (int64_t i = 0; i < 4; i++)
        assert_true(down_local[(j * hidden + h) * 4 + i] == coord(2 + j, h, 4 + i));
  }
  plan.local_intermediate = 3;
  assert_int_equal(hm_comm_shard_down(&plan, hidden, down, down_local), HM_INVALID_ARGUMENT);
  free(gate_up);
  free(down);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sizes_follow_the_world),
      cmocka_unit_test(bad_values_are_named),
      cmocka_unit_test(shards_take_the_tp_slice),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
