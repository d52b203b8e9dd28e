/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Bad configurations and bad inputs under mpirun -np 8: every rank fails, at once and
 * with a message naming the cause and the rank at fault, whether all ranks are wrong,
 * one rank's config differs, or one rank's input is bad; the communicator stays usable
 * after an input error.
 */
#include <stdio.h>
#include <string.h>

#include "hm_test.h"

static hm_comm_world world;
static hm_engine *engine;

static hm_comm_config good_config(void) {
  hm_comm_config cfg = HM_COMM_CONFIG_INIT;
  cfg.experts = 16;
  cfg.hidden = 128;
  cfg.intermediate = 32;
  cfg.top_k = 2;
  cfg.max_tokens = 4;
  return cfg;
}

static void expect_failure(const hm_comm_config *cfg, hm_status want, const char *text) {
  hm_comm *comm = NULL;
  hm_status st = hm_comm_create_mpi(engine, cfg, &comm);
  if (st != want)
    fail_msg("rank %d: status %s, expected %s (%s)", world.rank, hm_status_str(st), hm_status_str(want),
             hm_last_error());
  assert_null(comm);
  if (strstr(hm_last_error(), text) == NULL)
    fail_msg("rank %d: '%s' does not say '%s'", world.rank, hm_last_error(), text);
}

static void every_rank_wrong(void **state) {
  (void)state;
  hm_comm_config cfg = good_config();
  cfg.experts = 250;
  expect_failure(&cfg, HM_INVALID_ARGUMENT,
                 "rank 0 (and 7 more) failed the comm config check: experts 250 is not divisible by EP 8");
  cfg = good_config();
  cfg.ep = 4, cfg.tp = 4;
  expect_failure(&cfg, HM_INVALID_ARGUMENT, "EP 4 x TP 4 = 16, but the world has 8 ranks");
}

static void one_rank_differs(void **state) {
  (void)state;
  hm_comm_config cfg = good_config();
  if (world.rank == 5) cfg.hidden = 256;
  expect_failure(&cfg, HM_INVALID_ARGUMENT,
                 "comm config mismatch: rank 5 has hidden=256, rank 0 has hidden=128");
  cfg = good_config();
  cfg.tp = 2;
  if (world.rank == 3) cfg.intermediate = 33;
  expect_failure(
      &cfg, world.rank == 3 ? HM_INVALID_ARGUMENT : HM_REMOTE,
      "rank 3 (and 0 more) failed the comm config check: intermediate 33 is not divisible by TP 2");
}

static hm_status dispatch_once(hm_comm_batch *batch, const int32_t *ids, int64_t tokens) {
  static uint16_t x[4 * 128];
  static float w[4 * 2] = {1, 1, 1, 1, 1, 1, 1, 1};
  float y[4 * 128];
  hm_comm_tokens t = {tokens, x, ids, w};
  hm_comm_expert_batch eb;
  hm_status st = hm_comm_dispatch(batch, &t, NULL, &eb);
  if (st != HM_OK) return st;
  HM_ASSERT_OK(hm_comm_loopback(batch, NULL));
  HM_ASSERT_OK(hm_comm_combine(batch, y, NULL));
  return HM_OK;
}

static void bad_input_on_one_rank(void **state) {
  (void)state;
  hm_comm_config cfg = good_config();
  hm_comm *comm = NULL;
  HM_ASSERT_OK(hm_comm_create_mpi(engine, &cfg, &comm));
  char binding[64];
  snprintf(binding, sizeof(binding), "rank %d no GPU, not bound", world.rank);
  assert_string_equal(hm_comm_binding(comm), binding);
  hm_comm_batch *batch = NULL;
  HM_ASSERT_OK(hm_comm_batch_create(comm, &batch));
  float y[128];
  assert_int_equal(hm_comm_combine(batch, y, NULL), HM_NOT_READY);
  int32_t ids[8] = {0, 5, 9, 15, 1, -1, 3, 4};
  if (world.rank == 2) ids[3] = 99;
  hm_status st = dispatch_once(batch, ids, 4);
  assert_int_equal(st, world.rank == 2 ? HM_INVALID_ARGUMENT : HM_REMOTE);
  const char *want =
      world.rank == 2 ? "token 1 slot 1 has expert id 99" : "rank 2 reported a bad dispatch input";
  if (strstr(hm_last_error(), want) == NULL) fail_msg("rank %d: '%s'", world.rank, hm_last_error());
  ids[3] = 15;
  HM_ASSERT_OK(dispatch_once(batch, ids, 4));
  hm_comm_batch_destroy(batch);
  hm_comm_destroy(comm);
}

static void masked_overflow_on_every_rank(void **state) {
  (void)state;
  hm_comm_config cfg = good_config();
  cfg.layout = HM_COMM_LAYOUT_MASKED;
  cfg.max_m = 3;
  hm_comm *comm = NULL;
  HM_ASSERT_OK(hm_comm_create_mpi(engine, &cfg, &comm));
  hm_comm_batch *batch = NULL;
  HM_ASSERT_OK(hm_comm_batch_create(comm, &batch));
  int32_t ids[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  assert_int_equal(dispatch_once(batch, ids, 1), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "expert 0 receives 8 rows, more than max_m 3"));
  int32_t spread[2] = {2 * world.rank, 2 * world.rank + 1};
  HM_ASSERT_OK(dispatch_once(batch, spread, 1));
  hm_comm_batch_destroy(batch);
  hm_comm_destroy(comm);
}

int main(int argc, char **argv) {
  engine = hm_test_mpi_host_engine(&argc, &argv, &world);
  if (engine == NULL) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_rank_wrong),
      cmocka_unit_test(one_rank_differs),
      cmocka_unit_test(bad_input_on_one_rank),
      cmocka_unit_test(masked_overflow_on_every_rank),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  hm_engine_destroy(engine);
  if (failed) return 1;
  hm_shutdown();
  return 0;
}
