/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The benchmark's building blocks: --m size lists and ranges, the option table parser,
 * the bench's own options (--chain), the report's JSON/CSV writers, the #wrong counter
 * and the model presets.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "bench/bench.h"
#include "bench/bench_check.h"
#include "common/options.h"
#include "common/report.h"
#include "hm_test.h"
#include "model_presets.h"

static void list_ok(const char *text, int count, const int64_t *want) {
  hm_int_list l;
  char err[160] = "";
  if (!hm_int_list_parse(text, 1, 1 << 24, &l, err, sizeof(err))) fail_msg("'%s' refused: %s", text, err);
  assert_int_equal(l.count, count);
  for (int i = 0; i < count; i++) assert_int_equal(l.v[i], want[i]);
}

static void size_lists_parse(void **state) {
  (void)state;
  hm_int_list l;
  char err[160];
  assert_true(hm_int_list_parse("1:8192:x2", 1, 1 << 24, &l, err, sizeof(err)));
  assert_int_equal(l.count, 14);
  assert_int_equal(l.v[0], 1);
  assert_int_equal(l.v[13], 8192);
  list_ok("16:64:+16", 4, (int64_t[]){16, 32, 48, 64});
  list_ok("1,8,64", 3, (int64_t[]){1, 8, 64});
  list_ok("1:4,16", 4, (int64_t[]){1, 2, 4, 16});
  list_ok("3:20:x3", 2, (int64_t[]){3, 9});
  list_ok("7", 1, (int64_t[]){7});
  char text[64];
  hm_int_list_parse("1:8:x2", 1, 100, &l, err, sizeof(err));
  hm_int_list_format(&l, text, sizeof(text));
  assert_string_equal(text, "1,2,4,8");
}

static void bad_size_lists_are_refused(void **state) {
  (void)state;
  const char *bad[] = {"",       "8:1", "1:8:x1",      "1:8:+0",    "a",      "1:b",
                       "1:8:y2", "0",   "1:100000000", "1:1000:+1", "1:2:3:4"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    hm_int_list l;
    char err[160] = "";
    if (hm_int_list_parse(bad[i], 1, 1 << 24, &l, err, sizeof(err))) fail_msg("'%s' was accepted", bad[i]);
    assert_true(err[0] != '\0');
  }
}

static void length_ranges_parse(void **state) {
  (void)state;
  int64_t lo, hi;
  char err[160];
  assert_true(hm_range_parse("128", 1, 1 << 20, &lo, &hi, err, sizeof(err)));
  assert_int_equal(lo, 128);
  assert_int_equal(hi, 128);
  assert_true(hm_range_parse("64:256", 1, 1 << 20, &lo, &hi, err, sizeof(err)));
  assert_int_equal(lo, 64);
  assert_int_equal(hi, 256);
  assert_false(hm_range_parse("256:64", 1, 1 << 20, &lo, &hi, err, sizeof(err)));
  assert_false(hm_range_parse("0", 1, 1 << 20, &lo, &hi, err, sizeof(err)));
  assert_false(hm_range_parse("x:4", 1, 1 << 20, &lo, &hi, err, sizeof(err)));
  assert_false(hm_range_parse("", 1, 1 << 20, &lo, &hi, err, sizeof(err)));
}

struct parsed {
  int64_t iters;
  double bw;
  char name[HM_OPT_STR_LEN];
  bool flag;
  hm_int_list m;
};

static int parse(struct parsed *p, int argc, char **argv, char *err) {
  memset(p, 0, sizeof(*p));
  const hm_opt opts[] = {
      {"--iters", HM_OPT_INT, &p->iters, 1, 100, "N", "iterations", NULL},
      {"--bw", HM_OPT_DOUBLE, &p->bw, 0, 10, "X", "bandwidth", NULL},
      {"--name", HM_OPT_STR, p->name, 0, 0, "S", "a name", NULL},
      {"--flag", HM_OPT_FLAG, &p->flag, 0, 0, NULL, "a flag", NULL},
      {"--m", HM_OPT_LIST, &p->m, 1, 4096, "LIST", "sizes", NULL},
  };
  return hm_opts_parse(opts, 5, argc, argv, 1, err, 256);
}

static void option_table_parses_and_refuses(void **state) {
  (void)state;
  struct parsed p;
  char err[256];
  char *good[] = {"x", "--iters=5", "--bw", "2.5", "--name", "abc", "--flag", "--m", "1:16"};
  assert_int_equal(parse(&p, 9, good, err), 8);
  assert_int_equal(p.iters, 5);
  assert_true(fabs(p.bw - 2.5) < 1e-12);
  assert_string_equal(p.name, "abc");
  assert_true(p.flag);
  assert_int_equal(p.m.count, 5);
  struct {
    int argc;
    char *argv[3];
    const char *message;
  } bad[] = {
      {2, {"x", "--bogus"}, "unknown option"},      {2, {"x", "--iters"}, "needs a value"},
      {3, {"x", "--iters", "0"}, "not an integer"}, {3, {"x", "--iters", "5x"}, "not an integer"},
      {2, {"x", "--flag=1"}, "takes no value"},     {2, {"x", "positional"}, "unexpected argument"},
      {3, {"x", "--bw", "11"}, "not a number"},     {3, {"x", "--m", "4:2"}, "backwards"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    err[0] = '\0';
    assert_int_equal(parse(&p, bad[i].argc, bad[i].argv, err), -1);
    if (strstr(err, bad[i].message) == NULL)
      fail_msg("'%s': message '%s' lacks '%s'", bad[i].argv[1], err, bad[i].message);
  }
}

/* hm_bench_parse of a command line; the refusals print to stderr, which the test leaves be. */
static int bench_parse(const char *line, hm_bench_opts *o) {
  char buf[256], *argv[16] = {"humming-moe-bench"};
  int argc = 1;
  snprintf(buf, sizeof(buf), "%s", line);
  for (char *tok = strtok(buf, " "); tok && argc < 16; tok = strtok(NULL, " ")) argv[argc++] = tok;
  return hm_bench_parse(argc, argv, o);
}

static void chain_is_a_kernel_option_of_1_to_64(void **state) {
  (void)state;
  hm_bench_opts o;
  assert_int_equal(bench_parse("kernel", &o), 0);
  assert_int_equal(o.chain, 1);
  assert_int_equal(bench_parse("kernel --layout dense --chain 64", &o), 0);
  assert_int_equal(o.chain, 64);
  assert_int_equal(bench_parse("layer --chain 1", &o), 0);
  const char *bad[] = {"kernel --chain 0", "kernel --chain 65", "kernel --chain x",
                       "layer --chain 2",  "comm --chain 2",    "e2e --chain 2"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    if (bench_parse(bad[i], &o) != HM_BENCH_EXIT_USAGE) fail_msg("'%s' was accepted", bad[i]);
}

static const hm_col cols[] = {
    {"M", 6, 0, HM_COL_INT},       {"time_us", 9, 2, HM_COL_REAL}, {"ratio", 6, 2, HM_COL_RATIO},
    {"kernel", 8, 0, HM_COL_TEXT}, {"hidden", 0, 0, HM_COL_INT},
};

static char *read_file(const char *path) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  static char buf[4096];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static void report_writes_json_and_csv(void **state) {
  (void)state;
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  hm_report *r = hm_report_create("t", cols, 5, out, true);
  assert_non_null(r);
  hm_report_header(r, "header %d", 1);
  hm_report_columns(r);
  hm_report_row(r, (hm_cell[]){HM_NUM(1), HM_NUM(18.21), HM_NUM(2.714), HM_TEXT("bm16"), HM_NUM(7)});
  hm_report_row(r, (hm_cell[]){HM_NUM(2), HM_NONE, HM_NONE, HM_TEXT("a,\"b\""), HM_NUM(8)});
  hm_report_footer(r, "done");
  fclose(out);
  assert_non_null(strstr(text, "# header 1\n"));
  assert_non_null(strstr(text, "     1      18.21   2.71x  bm16\n"));
  assert_non_null(strstr(text, "         -       -  a,\"b\"\n"));
  assert_null(strstr(text, "hidden"));
  free(text);
  char json_path[] = "/tmp/hm_report_XXXXXX";
  int fd = mkstemp(json_path);
  assert_true(fd >= 0);
  close(fd);
  assert_true(hm_report_write_json(r, json_path));
  json_error_t err;
  json_t *doc = json_load_file(json_path, 0, &err);
  assert_non_null(doc);
  json_t *rows = json_object_get(doc, "rows");
  assert_int_equal(json_array_size(rows), 2);
  assert_int_equal(json_integer_value(json_object_get(json_array_get(rows, 0), "hidden")), 7);
  assert_true(json_is_null(json_object_get(json_array_get(rows, 1), "time_us")));
  assert_string_equal(json_string_value(json_array_get(json_object_get(doc, "summary"), 0)), "done");
  json_decref(doc);
  assert_true(hm_report_write_csv(r, json_path));
  const char *csv = read_file(json_path);
  assert_string_equal(csv,
                      "M,time_us,ratio,kernel,hidden\n1,18.21,2.714,\"bm16\",7\n2,,,\"a,\"\"b\"\"\",8\n");
  unlink(json_path);
  hm_report_destroy(r);
}

static void wrong_counter_catches_bad_values(void **state) {
  (void)state;
  float ref[8] = {1, -2, 3, 0.5f, 0, 10, -7, 2};
  float out[8];
  memcpy(out, ref, sizeof(out));
  assert_int_equal(hm_bench_count_wrong(out, ref, 2, 4, 1.0 / 64), 0);
  out[1] = -2.01f; /* within 1/64 of |ref| + row rms */
  assert_int_equal(hm_bench_count_wrong(out, ref, 2, 4, 1.0 / 64), 0);
  out[2] = NAN;
  out[5] = 12;
  assert_int_equal(hm_bench_count_wrong(out, ref, 2, 4, 1.0 / 64), 2);
  assert_int_equal(hm_bench_sample_rows(100, 1e3, false), 100);
  assert_true(hm_bench_sample_rows(1 << 20, 1e9, false) >= 1);
  assert_true(hm_bench_sample_rows(1 << 20, 1e9, false) < (1 << 20));
}

static void presets_are_valid(void **state) {
  (void)state;
  assert_true(hm_model_preset_count() >= 7);
  for (int i = 0; i < hm_model_preset_count(); i++)
    HM_ASSERT_OK(hm_model_preset_check(hm_model_preset_at(i)));
  hm_model_preset p;
  HM_ASSERT_OK(hm_model_preset_get("deepseek-v3", &p));
  assert_int_equal(p.hidden, 7168);
  assert_int_equal(p.moe_intermediate, 2048);
  assert_int_equal(p.experts, 256);
  assert_int_equal(p.top_k, 8);
  assert_int_equal(p.n_group, 8);
  assert_int_equal(p.topk_group, 4);
  assert_int_equal(p.router, HM_MODEL_ROUTER_SIGMOID_GROUPED);
  const char *names[] = {"tiny",         "deepseek-mini", "qwen3-30b-a3b", "qwen3-235b-a22b",
                         "mixtral-8x7b", "gpt-oss-120b"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    HM_ASSERT_OK(hm_model_preset_get(names[i], &p));
  assert_int_equal(hm_model_preset_get("llama", &p), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "deepseek-v3"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(size_lists_parse),
      cmocka_unit_test(bad_size_lists_are_refused),
      cmocka_unit_test(length_ranges_parse),
      cmocka_unit_test(option_table_parses_and_refuses),
      cmocka_unit_test(chain_is_a_kernel_option_of_1_to_64),
      cmocka_unit_test(report_writes_json_and_csv),
      cmocka_unit_test(wrong_counter_catches_bad_values),
      cmocka_unit_test(presets_are_valid),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
