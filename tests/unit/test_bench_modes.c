/* SPDX-License-Identifier: Apache-2.0 */
/*
 * humming-moe-bench end to end on the host backend: every mode runs a tiny config,
 * exits 0, prints its table, and writes JSON (parsed here) holding every row with sane
 * numbers; no arguments runs the default job; bad flags exit 2 with a message.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "hm_test.h"
#include "test_bench_util.h"

#ifndef HM_BENCH_EXE
#error "tests/bench.cmake defines HM_BENCH_EXE, the path of humming-moe-bench"
#endif

static char dir[] = "/tmp/hm_bench_test_XXXXXX";

/* Runs the bench with args; stdout and stderr go to files in dir. Returns its exit status. */
static int run_bench(const char *args) {
  char cmd[2048];
  snprintf(cmd, sizeof(cmd), "'%s' %s > '%s/out.txt' 2> '%s/err.txt'", HM_BENCH_EXE, args, dir, dir);
  return tb_system(cmd);
}

static void expect_ok(const char *args) {
  int rc = run_bench(args);
  if (rc != 0)
    fail_msg("humming-moe-bench %s exited %d:\n%s%s", args, rc, tb_file_text(dir, "out.txt"), tb_file_text(dir, "err.txt"));
}

static json_t *load_rows(int expected) {
  char path[512];
  snprintf(path, sizeof(path), "%s/run.json", dir);
  json_error_t err;
  json_t *doc = json_load_file(path, 0, &err);
  if (doc == NULL) fail_msg("run.json: %s", err.text);
  json_t *rows = json_object_get(doc, "rows");
  assert_int_equal(json_array_size(rows), expected);
  assert_true(json_array_size(json_object_get(doc, "header")) >= 5);
  assert_non_null(json_object_get(json_object_get(doc, "config"), "model"));
  return doc;
}

/* Every printed row is a data line: it starts with a blank, comments with '#'. */
static int table_rows(void) {
  int rows = 0;
  const char *t = tb_file_text(dir, "out.txt");
  for (const char *line = t; *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : line + strlen(line))
    if (line[0] == ' ') rows++;
  return rows;
}

/* Sizes come back in order, timed, checked and with sane rates. */
static void check_sized_rows(json_t *doc, const int64_t *m, int count) {
  json_t *rows = json_object_get(doc, "rows");
  for (int i = 0; i < count; i++) {
    json_t *row = json_array_get(rows, (size_t)i);
    assert_int_equal((int64_t)tb_num(row, "M"), m[i]);
    assert_true(tb_num(row, "time_us") > 0 && isfinite(tb_num(row, "time_us")));
    assert_true(tb_num(row, "min_us") <= tb_num(row, "time_us") && tb_num(row, "time_us") <= tb_num(row, "max_us"));
    assert_true(tb_num(row, "GB/s") > 0);
    assert_true(tb_num(row, "TFLOP/s") > 0);
    assert_true(tb_num(row, "bytes") > 0 && tb_num(row, "flops") > 0);
    assert_true(tb_num(row, "vs_bf16") > 0);
    assert_int_equal((int64_t)tb_num(row, "#wrong"), 0);
    assert_true(json_is_null(json_object_get(row, "%roof"))); /* no roofline on the host */
  }
}

static void kernel_mode_every_layout(void **state) {
  (void)state;
  const char *layouts[] = {"indexed", "contiguous", "masked", "dense"};
  const char *gemms[] = {"gate_up", "down"};
  const int64_t m[] = {1, 4, 16};
  for (int l = 0; l < 4; l++) {
    for (int g = 0; g < 2; g++) {
      char args[512];
      snprintf(args, sizeof(args),
               "kernel --backend host --model tiny --layout %s --gemm %s --m 1:16:x4 --iters 2 --warmup 1 "
               "--json %s/run.json --csv %s/run.csv",
               layouts[l], gemms[g], dir, dir);
      expect_ok(args);
      json_t *doc = load_rows(3);
      check_sized_rows(doc, m, 3);
      json_decref(doc);
      assert_int_equal(table_rows(), 3);
      assert_non_null(strstr(tb_file_text(dir, "run.csv"), "M,time_us,"));
    }
  }
}

/* --chain: a dense chain over distinct layers, an MoE chain over distinct routings; all checked. */
static void kernel_mode_chains(void **state) {
  (void)state;
  const struct {
    const char *layout;
    int chain;
    const char *over;
  } runs[] = {{"dense", 3, "over 3 dense layers"}, {"contiguous", 2, "over 2 distinct routings"}};
  const int64_t m[] = {1, 16};
  for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
    char args[512], header[96];
    snprintf(args, sizeof(args),
             "kernel --backend host --model tiny --layout %s --chain %d --m 1,16 --iters 2 --warmup 1 "
             "--json %s/run.json",
             runs[i].layout, runs[i].chain, dir);
    expect_ok(args);
    json_t *doc = load_rows(2);
    check_sized_rows(doc, m, 2);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(doc, "config"), "chain")),
                     runs[i].chain);
    json_decref(doc);
    snprintf(header, sizeof(header), "# chain %d: %d forwards back to back per sample, %s", runs[i].chain,
             runs[i].chain, runs[i].over);
    const char *out = tb_file_text(dir, "out.txt");
    if (strstr(out, header) == NULL) fail_msg("no '%s' in:\n%s", header, out);
  }
}

/* A model whose layer fuses its shared expert: the GEMM has one expert more and every token
 * takes it in its last slot, so one token touches top_k + 1 distinct experts; checked.
 * --shared-experts 0 takes the shared expert out. */
static void kernel_mode_fused_shared_expert(void **state) {
  (void)state;
  char args[512];
  snprintf(args, sizeof(args),
           "kernel --backend host --model deepseek-mini --layout masked --gemm down --m 1,4 --iters 2 --warmup 1 "
           "--json %s/run.json",
           dir);
  expect_ok(args);
  json_t *doc = load_rows(2);
  check_sized_rows(doc, (const int64_t[]){1, 4}, 2);
  assert_int_equal((int64_t)tb_num(json_array_get(json_object_get(doc, "rows"), 0), "active_experts"), 5);
  json_decref(doc);
  const char *out = tb_file_text(dir, "out.txt");
  if (strstr(out, "experts=17 top_k=5 (the last expert the fused shared one") == NULL)
    fail_msg("no fused shared expert in:\n%s", out);
  /* --shared-experts 0 leaves the plain grouped GEMM, as issue #8's fp8 groups are set. */
  expect_ok(
      "kernel --backend host --model deepseek-mini --shared-experts 0 --layout masked --gemm down --m 1 "
      "--iters 2 --warmup 1");
  if (strstr(tb_file_text(dir, "out.txt"), "experts=16 top_k=4;") == NULL)
    fail_msg("--shared-experts 0 still fused:\n%s", tb_file_text(dir, "out.txt"));
}

static void layer_mode_schemes(void **state) {
  (void)state;
  const char *quants[] = {"w4a16", "w8a8-fp8", "w8a8-int8", "w4a8-mxfp4", "bf16"};
  const int64_t m[] = {1, 8, 32};
  for (int q = 0; q < 5; q++) {
    char args[512];
    snprintf(args, sizeof(args),
             "layer --backend host --model tiny --quant %s --m 1,8,32 --iters 2 --json %s/run.json",
             quants[q], dir);
    expect_ok(args);
    json_t *doc = load_rows(3);
    check_sized_rows(doc, m, 3);
    json_t *row = json_array_get(json_object_get(doc, "rows"), 2);
    assert_true(json_is_string(json_object_get(row, "layout")));
    assert_true(tb_num(row, "active_experts") >= 1 && tb_num(row, "active_experts") <= 8);
    json_decref(doc);
  }
}

static void e2e_mode_serves_both_schemes(void **state) {
  (void)state;
  char args[512];
  snprintf(args, sizeof(args),
           "e2e --backend host --model tiny --concurrency 1,4 --requests 4 --input-len 8:24 --output-len 4 "
           "--max-step-tokens 32 --json %s/run.json",
           dir);
  expect_ok(args);
  json_t *doc = load_rows(4);
  json_t *rows = json_object_get(doc, "rows");
  for (size_t i = 0; i < 4; i++) {
    json_t *row = json_array_get(rows, i);
    assert_string_equal(json_string_value(json_object_get(row, "quant")), i < 2 ? "bf16" : "w4a16");
    assert_int_equal((int64_t)tb_num(row, "conc"), i % 2 ? 4 : 1);
    assert_int_equal((int64_t)tb_num(row, "reqs"), 4);
    assert_int_equal((int64_t)tb_num(row, "output_tokens"), 16);
    assert_true(tb_num(row, "tok/s") > 0);
    assert_true(tb_num(row, "ttft_p50") > 0 && tb_num(row, "ttft_p50") <= tb_num(row, "ttft_p99"));
    assert_true(tb_num(row, "tpot_p50") > 0 && tb_num(row, "tpot_p50") <= tb_num(row, "tpot_p99"));
    assert_true(tb_num(row, "steps") >= 4);
    assert_true(tb_num(row, "vs_bf16") > 0);
    assert_int_equal((int64_t)tb_num(row, "#wrong"), 0);
  }
  json_decref(doc);
}

static void comm_mode_single_rank(void **state) {
  (void)state;
  char args[512];
  snprintf(args, sizeof(args), "comm --backend host --model tiny --m 1,8 --iters 2 --json %s/run.json", dir);
  expect_ok(args);
  json_t *doc = load_rows(2);
  json_t *rows = json_object_get(doc, "rows");
  for (size_t i = 0; i < 2; i++) {
    json_t *row = json_array_get(rows, i);
    /* Host timings are noisy: the round trip's median may even come out below the dispatch's. */
    assert_true(tb_num(row, "disp_us") > 0 && tb_num(row, "total_us") > 0 && tb_num(row, "comb_us") >= 0);
    assert_int_equal((int64_t)tb_num(row, "#wrong"), 0);
  }
  json_decref(doc);
}

/* The Quick start job: no arguments at all (the host backend here, by the environment). */
static void no_arguments_runs_the_default(void **state) {
  (void)state;
  setenv("HUMMING_BACKEND", "host", 1);
  expect_ok("");
  unsetenv("HUMMING_BACKEND");
  const char *out = tb_file_text(dir, "out.txt");
  assert_non_null(strstr(out, "model=deepseek-mini quant=w4a16"));
  assert_non_null(strstr(out, "# OK:"));
  assert_true(table_rows() >= 4);
}

static void bad_flags_exit_2(void **state) {
  (void)state;
  struct {
    const char *args, *message;
  } bad[] = {
      {"--bogus", "unknown option"},
      {"kernel --m 8:1", "backwards"},
      {"kernel --m x", "not a number"},
      {"--quant w3a5", "unknown quantization scheme"},
      {"--model nope", "unknown model"},
      {"nosuchmode", "unknown mode"},
      {"--iters 0", "not an integer"},
      {"--iters", "needs a value"},
      {"layer --layout dense", "kernel-mode layout"},
      {"kernel --layout auto", "--layout"},
      {"e2e --input-len 5:1", "--input-len"},
      {"kernel --gemm up", "--gemm"},
      {"--backend gpu", "--backend"},
      {"kernel --chain 0", "--chain"},
      {"kernel --chain 65", "--chain"},
      {"layer --chain 2", "kernel-mode option"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    int rc = run_bench(bad[i].args);
    if (rc != 2) fail_msg("'%s' exited %d, not 2", bad[i].args, rc);
    if (strstr(tb_file_text(dir, "err.txt"), bad[i].message) == NULL)
      fail_msg("'%s': stderr '%s' lacks '%s'", bad[i].args, tb_file_text(dir, "err.txt"), bad[i].message);
  }
  assert_int_equal(run_bench("--help"), 0);
  assert_non_null(strstr(tb_file_text(dir, "out.txt"), "--concurrency"));
  assert_int_equal(run_bench("--list-models"), 0);
  assert_non_null(strstr(tb_file_text(dir, "out.txt"), "deepseek-v3"));
}

static int make_dir(void **state) {
  (void)state;
  return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state) {
  (void)state;
  const char *files[] = {"out.txt", "err.txt", "run.json", "run.csv"};
  char path[512];
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
    snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
    unlink(path);
  }
  return rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bad_flags_exit_2),
      cmocka_unit_test(kernel_mode_every_layout),
      cmocka_unit_test(kernel_mode_chains),
      cmocka_unit_test(kernel_mode_fused_shared_expert),
      cmocka_unit_test(layer_mode_schemes),
      cmocka_unit_test(e2e_mode_serves_both_schemes),
      cmocka_unit_test(comm_mode_single_rank),
      cmocka_unit_test(no_arguments_runs_the_default),
  };
  return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
