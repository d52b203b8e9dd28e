/* SPDX-License-Identifier: Apache-2.0 */
/*
 * humming-moe-bench kernel --plan on the host backend: with a tuning table holding a
 * distinctive tuning for the first M bucket of the model's gate_up, --plan all times
 * the default, heuristic and tuned tables side by side; the tuned one runs the stored
 * kernel in that bucket and the heuristic's past it, and every row carries the ratio,
 * the prediction and its error. A bad --plan exits 2; a pinned kernel leaves the bf16
 * baseline its own plan.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "heuristics/choose_engine.h"
#include "heuristics/tune_table.h"
#include "hm_test.h"
#include "model_layers.h"
#include "test_bench_util.h"

#ifndef HM_BENCH_EXE
#error "tests/bench.cmake defines HM_BENCH_EXE, the path of humming-moe-bench"
#endif

static char dir[] = "/tmp/hm_bench_plan_XXXXXX";

static int run_bench(const char *args) {
  char cmd[2048];
  snprintf(cmd, sizeof(cmd), "HUMMING_CACHE_DIR='%s' '%s' %s > '%s/out.txt' 2> '%s/err.txt'", dir,
           HM_BENCH_EXE, args, dir, dir);
  return tb_system(cmd);
}

/* Runs the bench with args plus --json, and returns its report. */
static json_t *run_report(const char *args) {
  char cmd[1024], path[512];
  snprintf(cmd, sizeof(cmd), "%s --json %s/run.json", args, dir);
  if (run_bench(cmd) != 0) fail_msg("bench exited non-zero");
  snprintf(path, sizeof(path), "%s/run.json", dir);
  json_error_t err;
  json_t *doc = json_load_file(path, 0, &err);
  if (doc == NULL) fail_msg("run.json: %s", err.text);
  return doc;
}

static const char *text(json_t *row, const char *key) {
  const char *s = json_string_value(json_object_get(row, key));
  if (s == NULL) fail_msg("row lacks a text for '%s'", key);
  return s;
}

/* Stores, for the bucket of tiny's gate_up at M = 1 (2 rows) on this host, a legal tuning the heuristic does
 * not pick; returns its bm. */
static int store_tuned_entry(void) {
  hm_engine *engine = hm_test_host_engine();
  hm_model_preset preset;
  hm_quant_scheme scheme;
  hm_model_layer layers[HM_MODEL_MAX_LAYERS];
  int count = 0, arch = 0;
  HM_ASSERT_OK(hm_model_preset_get("tiny", &preset));
  HM_ASSERT_OK(hm_quant_scheme_parse("w4a16", &scheme));
  HM_ASSERT_OK(hm_model_layers(&preset, &scheme, 1, 1, layers, &count));
  const hm_layer_config *lc = &layers[0].config; /* experts.gate_up */
  HM_ASSERT_OK(hm_heuristics_arch(engine, &arch));
  hm_layer_plan heuristic;
  HM_ASSERT_OK(hm_heuristics_layer_plan(engine, lc, HM_GEMM_INDEXED, arch, HM_PLAN_HEURISTIC, &heuristic));
  hm_device_profile p;
  HM_ASSERT_OK(hm_device_profile_for_engine(engine, &p));
  p.arch = arch;
  hm_gemm_tuning ranked[64];
  int n = 0;
  HM_ASSERT_OK(hm_choose_ranked(lc, HM_GEMM_INDEXED, &p, 2, ranked, 64, &n));
  hm_tune_entry e;
  memset(&e, 0, sizeof(e));
  for (int i = 0; i < n && e.tuning.bm == 0; i++)
    if (ranked[i].bm >= 32 &&
        ranked[i].bm != heuristic.plan.cfg[hm_gemm_plan_pick(&heuristic.plan, 2)].tuning.bm)
      e.tuning = ranked[i];
  assert_true(e.tuning.bm >= 32);
  hm_gemm_config base;
  HM_ASSERT_OK(hm_gemm_config_from_layer(lc, HM_GEMM_INDEXED, arch, &base));
  HM_ASSERT_OK(hm_tune_identity_for_engine(engine, &e.id));
  hm_tune_layer_key(&base, e.layer, sizeof(e.layer));
  for (int b = 0; b == 0 || e.m_hi < 2; b++) hm_choose_bucket(lc, HM_GEMM_INDEXED, b, &e.m_lo, &e.m_hi);
  e.tuned_us = 1.0;
  e.heuristic_us = 2.0;
  HM_ASSERT_OK(hm_tune_table_store(dir, &e, 1));
  hm_engine_destroy(engine);
  return e.tuning.bm;
}

static void plan_all_shows_each_source(void **state) {
  (void)state;
  const int bm = store_tuned_entry();
  char args[512];
  snprintf(args, sizeof(args),
           "kernel --backend host --model tiny --plan all --m 1,64 --iters 2 --warmup 1 --csv %s/run.csv",
           dir);
  json_t *doc = run_report(args);
  char path[512], tag[32];
  assert_string_equal(json_string_value(json_object_get(json_object_get(doc, "config"), "plan")), "all");
  json_t *rows = json_object_get(doc, "rows");
  assert_int_equal(json_array_size(rows), 2);
  for (size_t i = 0; i < 2; i++) {
    json_t *row = json_array_get(rows, i);
    const double heur = tb_num(row, "heur_us"), tuned = tb_num(row, "tuned_us");
    assert_true(tb_num(row, "default_us") > 0 && heur > 0 && tuned > 0);
    assert_true(fabs(tb_num(row, "time_us") - tuned) < 1e-9);
    /* The JSON keeps six significant digits. */
    assert_true(fabs(tb_num(row, "tuned/heur") / (tuned / heur) - 1.0) < 1e-4);
    const double pred = tb_num(row, "pred_us");
    assert_true(isfinite(pred) && pred > 0);
    assert_true(fabs(tb_num(row, "pred_err%") - 100.0 * (pred - heur) / heur) < 1e-2);
    assert_int_equal((int64_t)tb_num(row, "#wrong"), 0);
  }
  /* M = 1: 2 rows over 8 experts, in the stored bucket; M = 64: 16 rows an expert, past it. */
  json_t *first = json_array_get(rows, 0), *second = json_array_get(rows, 1);
  snprintf(tag, sizeof(tag), "host:bm%d_", bm);
  assert_string_equal(text(first, "plan"), "tuned");
  assert_non_null(strstr(text(first, "kernel"), tag));
  assert_null(strstr(text(first, "heur_kernel"), tag));
  assert_string_equal(text(second, "plan"), "heuristic");
  assert_string_equal(text(second, "kernel"), text(second, "heur_kernel"));
  json_decref(doc);
  snprintf(path, sizeof(path), "%s/run.csv", dir);
  FILE *f = fopen(path, "r");
  char line[1024] = "";
  assert_non_null(f);
  assert_non_null(fgets(line, sizeof(line), f));
  fclose(f);
  assert_non_null(strstr(line, "default_us,heur_us,tuned_us,tuned/heur,pred_us,pred_err%"));
}

static void one_plan_keeps_the_prediction(void **state) {
  (void)state;
  json_t *doc = run_report("kernel --backend host --model tiny --plan default --m 4 --iters 2");
  json_t *row = json_array_get(json_object_get(doc, "rows"), 0);
  assert_string_equal(text(row, "plan"), "default");
  assert_true(tb_num(row, "pred_us") > 0);
  assert_true(json_is_null(json_object_get(row, "tuned_us")));
  json_decref(doc);
  assert_int_equal(run_bench("kernel --plan fastest"), 2);
}

/* A pinned kernel is the scheme's: the bf16 baseline plans its own, so a W8A8 tile whose
 * 16-bit twin does not fit shared memory still runs beside it. */
static void pinned_kernel_leaves_the_baseline_its_own(void **state) {
  (void)state;
  json_t *doc = run_report(
      "kernel --backend host --model tiny --quant w8a8-fp8 --plan "
      "bm256_bn128_bk128_w2x4x1_s3_sk4_c1_wgmma_ws --m 16 --iters 1 --warmup 0");
  json_t *row = json_array_get(json_object_get(doc, "rows"), 0);
  assert_string_equal(text(row, "plan"), "pinned");
  assert_true(tb_num(row, "bf16_us") > 0);
  json_decref(doc);
}

static int teardown(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

static int setup(void **state) {
  (void)state;
  return mkdtemp(dir) ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(plan_all_shows_each_source),
      cmocka_unit_test(one_plan_keeps_the_prediction),
      cmocka_unit_test(pinned_kernel_leaves_the_baseline_its_own),
  };
  int rc = cmocka_run_group_tests(tests, setup, teardown);
  hm_shutdown();
  return rc;
}
