/* SPDX-License-Identifier: Apache-2.0 */
/*
 * humming-moe-bench's layer and e2e modes sharded over 8 host ranks (the driver runs
 * mpirun --oversubscribe -np 8 on the bench, tests/comm.cmake labels it mpi): EP8 and
 * EP4xTP2 on the tiny model exit 0, print the plan and one line per rank, and write
 * JSON rows that were checked against the whole layer on the host; a job whose ranks
 * do not make ep x tp, or whose scheme cannot be split at that TP, is refused clearly.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "hm_test.h"
#include "test_bench_util.h"

#if !defined(HM_BENCH_EXE) || !defined(HM_MPIEXEC)
#error "tests/comm.cmake defines HM_BENCH_EXE and HM_MPIEXEC"
#endif

static char dir[] = "/tmp/hm_bench_dist_XXXXXX";

static int run_bench(int ranks, const char *args) {
  char cmd[2048];
  snprintf(cmd, sizeof(cmd),
           "'%s' --oversubscribe -np %d '%s' %s --backend host --json '%s/run.json' > '%s/out.txt' 2> "
           "'%s/err.txt'",
           HM_MPIEXEC, ranks, HM_BENCH_EXE, args, dir, dir, dir);
  return tb_system(cmd);
}

static void expect_ok(const char *args) {
  int rc = run_bench(8, args);
  if (rc != 0)
    fail_msg("mpirun -np 8 humming-moe-bench %s exited %d:\n%s%s", args, rc, tb_file_text(dir, "out.txt"),
             tb_file_text(dir, "err.txt"));
}

/* The report: its rows, the sharding in the config, the plan and every rank in the header. */
static json_t *load_report(int rows, int ep, int tp) {
  char path[512];
  snprintf(path, sizeof(path), "%s/run.json", dir);
  json_error_t err;
  json_t *doc = json_load_file(path, 0, &err);
  if (doc == NULL) fail_msg("run.json: %s", err.text);
  assert_int_equal(json_array_size(json_object_get(doc, "rows")), rows);
  json_t *config = json_object_get(doc, "config");
  assert_int_equal(json_integer_value(json_object_get(config, "ranks")), 8);
  assert_int_equal(json_integer_value(json_object_get(config, "ep")), ep);
  assert_int_equal(json_integer_value(json_object_get(config, "tp")), tp);
  char plan[64];
  snprintf(plan, sizeof(plan), "sharded: 8 ranks, EP %d x TP %d", ep, tp);
  const char *out = tb_file_text(dir, "out.txt");
  assert_non_null(strstr(out, plan));
  for (int r = 0; r < 8; r++) {
    char line[64];
    snprintf(line, sizeof(line), "# rank %d: EP rank %d TP rank %d, experts [", r, r / tp, r % tp);
    if (strstr(out, line) == NULL) fail_msg("no plan line '%s' in:\n%s", line, out);
  }
  return doc;
}

static void check_layer_rows(json_t *doc, const int64_t *m, int count, const char *layout) {
  json_t *rows = json_object_get(doc, "rows");
  for (int i = 0; i < count; i++) {
    json_t *row = json_array_get(rows, (size_t)i);
    assert_int_equal((int64_t)tb_num(row, "M"), m[i]);
    assert_true(tb_num(row, "time_us") > 0 && isfinite(tb_num(row, "time_us")));
    assert_true(tb_num(row, "min_us") <= tb_num(row, "time_us") && tb_num(row, "time_us") <= tb_num(row, "max_us"));
    assert_true(tb_num(row, "GB/s") > 0 && tb_num(row, "TFLOP/s") > 0);
    assert_true(tb_num(row, "active_experts") >= 1 && tb_num(row, "active_experts") <= 8);
    assert_int_equal((int64_t)tb_num(row, "#wrong"), 0);
    assert_string_equal(json_string_value(json_object_get(row, "layout")), layout);
  }
}

static void layer_ep8(void **state) {
  (void)state;
  expect_ok("layer --model tiny --ep 8 --m 1,8 --iters 2");
  json_t *doc = load_report(2, 8, 1);
  const int64_t m[] = {1, 8};
  check_layer_rows(doc, m, 2, "contiguous");
  /* w4a16 against the bf16 layer, both sharded. */
  assert_true(tb_num(json_array_get(json_object_get(doc, "rows"), 0), "vs_bf16") > 0);
  json_decref(doc);
}

static void layer_ep4_tp2_masked(void **state) {
  (void)state;
  expect_ok("layer --model tiny --ep 4 --tp 2 --quant bf16 --layout masked --m 1,4,16 --iters 2");
  json_t *doc = load_report(3, 4, 2);
  const int64_t m[] = {1, 4, 16};
  check_layer_rows(doc, m, 3, "masked");
  json_decref(doc);
}

static void check_e2e_rows(json_t *doc, int count, const char *const *quants) {
  json_t *rows = json_object_get(doc, "rows");
  for (int i = 0; i < count; i++) {
    json_t *row = json_array_get(rows, (size_t)i);
    assert_string_equal(json_string_value(json_object_get(row, "quant")), quants[i]);
    assert_int_equal((int64_t)tb_num(row, "conc"), i % 2 ? 4 : 1);
    assert_int_equal((int64_t)tb_num(row, "output_tokens"), 16);
    assert_true(tb_num(row, "tok/s") > 0);
    assert_true(tb_num(row, "tpot_p50") > 0 && tb_num(row, "tpot_p50") <= tb_num(row, "tpot_p99"));
    assert_int_equal((int64_t)tb_num(row, "#wrong"), 0);
  }
}

static void e2e_ep8_and_ep4_tp2(void **state) {
  (void)state;
  const char *common =
      "--model tiny --concurrency 1,4 --requests 4 --input-len 8:24 --output-len 4 "
      "--max-step-tokens 32";
  char args[512];
  snprintf(args, sizeof(args), "e2e %s --ep 8", common);
  expect_ok(args);
  json_t *doc = load_report(4, 8, 1);
  const char *both[] = {"bf16", "bf16", "w4a16", "w4a16"};
  check_e2e_rows(doc, 4, both);
  json_decref(doc);
  snprintf(args, sizeof(args), "e2e %s --ep 4 --tp 2 --quant bf16", common);
  expect_ok(args);
  doc = load_report(2, 4, 2);
  check_e2e_rows(doc, 2, both);
  json_decref(doc);
}

static void bad_shardings_are_refused(void **state) {
  (void)state;
  assert_int_equal(run_bench(8, "layer --model tiny --ep 4 --m 1"), 2);
  assert_non_null(strstr(tb_file_text(dir, "err.txt"), "--ep 4 x --tp 1 needs 4 ranks, the job has 8"));
  /* w4a16 groups 128 columns of down; I = 128 split in two leaves 64. */
  assert_int_equal(run_bench(8, "layer --model tiny --ep 4 --tp 2 --m 1"), 1);
  assert_non_null(strstr(tb_file_text(dir, "err.txt"), "cannot be split at TP 2"));
  assert_int_equal(run_bench(1, "kernel --model tiny --ep 2 --m 1"), 2);
  assert_non_null(strstr(tb_file_text(dir, "err.txt"), "kernel mode times one GPU a rank"));
}

static int make_dir(void **state) {
  (void)state;
  return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state) {
  (void)state;
  const char *files[] = {"out.txt", "err.txt", "run.json"};
  char path[512];
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
    snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
    unlink(path);
  }
  return rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(layer_ep8),
      cmocka_unit_test(layer_ep4_tp2_masked),
      cmocka_unit_test(e2e_ep8_and_ep4_tp2),
      cmocka_unit_test(bad_shardings_are_refused),
  };
  return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
