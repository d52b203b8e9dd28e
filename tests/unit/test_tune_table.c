/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tuning table: a store/load round trip, entries of another device, driver or
 * library build never answered, forked writers that never lose or tear each other's
 * entries, and a corrupt file reported and read as empty.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "heuristics/choose.h"
#include "heuristics/tune_table.h"
#include "hm_test.h"

#define WRITERS 6
#define PER_WRITER 8

static char root[256];

static int make_root(void **state) {
  (void)state;
  snprintf(root, sizeof(root), "/tmp/hm-tune-table-%d-XXXXXX", (int)getpid());
  return mkdtemp(root) ? 0 : -1;
}

static int remove_root(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
  return system(cmd) == 0 ? 0 : -1;
}

static hm_tune_identity identity(const char *device, const char *driver, const char *library) {
  hm_tune_identity id;
  memset(&id, 0, sizeof(id));
  snprintf(id.device, sizeof(id.device), "%s", device);
  snprintf(id.driver, sizeof(id.driver), "%s", driver);
  snprintf(id.library, sizeof(id.library), "%s", library);
  return id;
}

static hm_tune_entry entry(hm_tune_identity id, const char *layer, int64_t lo, int64_t hi, int bm) {
  hm_tune_entry e;
  memset(&e, 0, sizeof(e));
  e.id = id;
  snprintf(e.layer, sizeof(e.layer), "%s", layer);
  e.m_lo = lo;
  e.m_hi = hi;
  e.tuning = (hm_gemm_tuning){.bm = bm, .bn = 256, .bk = 128, .warps_m = 1, .warps_n = 4, .warps_k = 2, .stages = 4,
                              .stream_k = true, .sk_min_iters = 4, .ctas_per_sm = 1};
  e.tuned_us = 10.5;
  e.heuristic_us = 12.25;
  e.chain = 1;
  return e;
}

static void round_trip(void **state) {
  (void)state;
  const hm_tune_identity id = identity("NVIDIA H200", "cuda 12080", "humming 0.1.0");
  hm_tune_entry in[2] = {entry(id, "idx_u4z_g128_n4096_k7168_e256", 0, 256, 16),
                         entry(id, "idx_u4z_g128_n4096_k7168_e256", 131072, INT64_MAX, 128)};
  in[1].tuning.stream_k = false;
  in[1].tuning.sk_min_iters = 0;
  in[1].tuning.mma = HM_MMA_WGMMA;
  in[1].tuning.ws = true;
  in[1].chain = 8;
  HM_ASSERT_OK(hm_tune_table_store(root, in, 2));
  hm_tune_table t;
  HM_ASSERT_OK(hm_tune_table_load(root, &t));
  assert_false(t.corrupt);
  assert_int_equal(t.count, 2);
  for (int i = 0; i < 2; i++) {
    const hm_tune_entry *e = hm_tune_table_lookup(&t, &id, in[i].layer, in[i].m_lo, in[i].m_hi);
    assert_non_null(e);
    assert_int_equal(e->tuning.bm, in[i].tuning.bm);
    assert_int_equal(e->tuning.stream_k, in[i].tuning.stream_k);
    assert_int_equal(e->tuning.ctas_per_sm, 1);
    assert_true(hm_choose_tuning_equal(&e->tuning, &in[i].tuning));
    assert_true(e->m_hi == in[i].m_hi);
    assert_true(e->tuned_us == 10.5 && e->heuristic_us == 12.25);
    assert_int_equal(e->chain, in[i].chain);
  }
  /* Storing the same key again replaces the entry rather than adding one. */
  in[0].tuning.bm = 32;
  HM_ASSERT_OK(hm_tune_table_store(root, in, 1));
  hm_tune_table_free(&t);
  HM_ASSERT_OK(hm_tune_table_load(root, &t));
  assert_int_equal(t.count, 2);
  assert_int_equal(hm_tune_table_lookup(&t, &id, in[0].layer, 0, 256)->tuning.bm, 32);
  hm_tune_table_free(&t);
}

static void other_keys_are_ignored(void **state) {
  (void)state;
  const hm_tune_identity id = identity("NVIDIA H200", "cuda 12080", "humming 0.1.0");
  const hm_tune_entry e = entry(id, "dense_u4z_g128_n7168_k2048_e1", 0, 1, 16);
  HM_ASSERT_OK(hm_tune_table_store(root, &e, 1));
  hm_tune_table t;
  HM_ASSERT_OK(hm_tune_table_load(root, &t));
  assert_non_null(hm_tune_table_lookup(&t, &id, e.layer, 0, 1));
  const hm_tune_identity others[] = {identity("NVIDIA H20", "cuda 12080", "humming 0.1.0"),
                                     identity("NVIDIA H200", "cuda 12090", "humming 0.1.0"),
                                     identity("NVIDIA H200", "cuda 12080", "humming 0.2.0")};
  for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++)
    assert_null(hm_tune_table_lookup(&t, &others[i], e.layer, 0, 1));
  assert_null(hm_tune_table_lookup(&t, &id, "dense_u4z_g128_n7168_k2048_e2", 0, 1));
  assert_null(hm_tune_table_lookup(&t, &id, e.layer, 0, 2));
  hm_tune_table_free(&t);
}

static void concurrent_writers_lose_nothing(void **state) {
  (void)state;
  pid_t pids[WRITERS];
  for (int w = 0; w < WRITERS; w++) {
    pids[w] = fork();
    assert_true(pids[w] >= 0);
    if (pids[w] != 0) continue;
    char device[32];
    snprintf(device, sizeof(device), "writer %d", w);
    for (int i = 0; i < PER_WRITER; i++) {
      const hm_tune_entry e = entry(identity(device, "cuda 1", "lib"), "dense_layer", i, i + 1, 16 * (1 + i % 4));
      if (hm_tune_table_store(root, &e, 1) != HM_OK) _exit(1);
    }
    _exit(0);
  }
  for (int w = 0; w < WRITERS; w++) {
    int status = 0;
    assert_int_equal(waitpid(pids[w], &status, 0), pids[w]);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  hm_tune_table t;
  HM_ASSERT_OK(hm_tune_table_load(root, &t));
  assert_false(t.corrupt);
  for (int w = 0; w < WRITERS; w++) {
    char device[32];
    snprintf(device, sizeof(device), "writer %d", w);
    const hm_tune_identity id = identity(device, "cuda 1", "lib");
    for (int i = 0; i < PER_WRITER; i++) {
      const hm_tune_entry *e = hm_tune_table_lookup(&t, &id, "dense_layer", i, i + 1);
      assert_non_null(e);
      assert_int_equal(e->tuning.bm, 16 * (1 + i % 4));
    }
  }
  hm_tune_table_free(&t);
}

static void write_file(const char *text) {
  char path[300];
  snprintf(path, sizeof(path), "%s/%s", root, HM_TUNE_TABLE_FILE);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void corrupt_file_is_reported_and_ignored(void **state) {
  (void)state;
  const char *bad[] = {"{\"format\": \"humming-tuning 1\", \"entries\": [", "not json at all",
                       "{\"format\": \"other 9\", \"entries\": []}",
                       "{\"format\": \"humming-tuning 1\", \"entries\": [{\"device\": 3}]}"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    write_file(bad[i]);
    hm_tune_table t;
    HM_ASSERT_OK(hm_tune_table_load(root, &t));
    assert_true(t.corrupt);
    assert_int_equal(t.count, 0);
    hm_tune_table_free(&t);
  }
  /* A store over a corrupt file starts a fresh table. */
  const hm_tune_identity id = identity("NVIDIA H200", "cuda 12080", "humming 0.1.0");
  const hm_tune_entry e = entry(id, "dense", 0, 1, 16);
  HM_ASSERT_OK(hm_tune_table_store(root, &e, 1));
  hm_tune_table t;
  HM_ASSERT_OK(hm_tune_table_load(root, &t));
  assert_false(t.corrupt);
  assert_int_equal(t.count, 1);
  hm_tune_table_free(&t);
}

/* Entries written before chained timing name no chain: they were single launches. */
static void entries_without_chain_are_single_launches(void **state) {
  (void)state;
  write_file(
      "{\"format\": \"humming-tuning 1\", \"entries\": [{\"device\": \"d\", \"driver\": \"v\", "
      "\"library\": \"l\", \"layer\": \"dense\", \"m_lo\": 0, \"m_hi\": 16, \"tuned_us\": 1.5, "
      "\"heuristic_us\": 2.0, \"tuning\": {\"bm\": 16, \"bn\": 256, \"bk\": 128, \"warps_m\": 1, "
      "\"warps_n\": 4, \"warps_k\": 2, \"stages\": 4, \"stream_k\": true, \"sk_min_iters\": 4, "
      "\"ctas_per_sm\": 1}}]}");
  hm_tune_table t;
  HM_ASSERT_OK(hm_tune_table_load(root, &t));
  assert_false(t.corrupt);
  assert_int_equal(t.count, 1);
  assert_int_equal(t.entries[0].chain, 1);
  hm_tune_table_free(&t);
}

static void missing_file_is_an_empty_table(void **state) {
  (void)state;
  char dir[300];
  snprintf(dir, sizeof(dir), "%s/nothing-here", root);
  hm_tune_table t;
  HM_ASSERT_OK(hm_tune_table_load(dir, &t));
  assert_false(t.corrupt);
  assert_int_equal(t.count, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(round_trip, make_root, remove_root),
      cmocka_unit_test_setup_teardown(other_keys_are_ignored, make_root, remove_root),
      cmocka_unit_test_setup_teardown(concurrent_writers_lose_nothing, make_root, remove_root),
      cmocka_unit_test_setup_teardown(corrupt_file_is_reported_and_ignored, make_root, remove_root),
      cmocka_unit_test_setup_teardown(entries_without_chain_are_single_launches, make_root, remove_root),
      cmocka_unit_test_setup_teardown(missing_file_is_an_empty_table, make_root, remove_root),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_shutdown();
  return rc;
}
