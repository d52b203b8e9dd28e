/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The layer's kernel tables come from the source HUMMING_GEMM_PLAN names: a tuning
 * table holding a distinctive legal tuning for one bucket of a layer is picked by that
 * layer under auto and tuned (its plan, block_m and the info log line say so), and is
 * not under default or heuristic, nor for another device; HUMMING_DEVICE_PROFILE makes
 * the layer plan for that GPU as the heuristics do; a bad value is refused. A tuning's
 * name there pins that kernel for every M.
 * Observed on the host backend through the plan the CUDA backend compiles.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "heuristics/choose_engine.h"
#include "heuristics/tune_table.h"
#include "hm_test.h"
#include "layer_internal.h"
#include "log.h"
#include "model_layers.h"
#include "params.h"

#define TOP_K 2

static char root[256];
static hm_engine *engine;

typedef struct log_capture {
  const char *key; /* the layer key whose table line to keep */
  int warnings;
  char table_line[512];
  char warning[512]; /* the last warning */
} log_capture;

static void capture(hm_log_level level, const char *line, void *user) {
  log_capture *c = user;
  char want[256];
  snprintf(want, sizeof(want), "kernel table of %s:", c->key);
  if (level == HM_LOG_WARN) {
    c->warnings++;
    snprintf(c->warning, sizeof(c->warning), "%s", line);
  }
  if (strstr(line, want) != NULL) snprintf(c->table_line, sizeof(c->table_line), "%s", line);
}

static void set_env(const char *name, const char *value) {
  if (value)
    setenv(name, value, 1);
  else
    unsetenv(name);
  hm_params_reload();
  hm_log_reset();
}

static int setup(void **state) {
  (void)state;
  snprintf(root, sizeof(root), "/tmp/hm-layer-plan-%d-XXXXXX", (int)getpid());
  if (mkdtemp(root) == NULL) return -1;
  set_env("HUMMING_CACHE_DIR", root);
  set_env("HUMMING_DEVICE_PROFILE", NULL);
  set_env("HUMMING_LOG", "info");
  engine = hm_test_host_engine();
  return 0;
}

static int teardown(void **state) {
  (void)state;
  hm_engine_destroy(engine);
  set_env("HUMMING_GEMM_PLAN", NULL);
  set_env("HUMMING_LOG", NULL);
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
  return system(cmd) == 0 ? 0 : -1;
}

static hm_gemm_type type_of(const hm_layer_config *lc) {
  return lc->experts == 1 ? HM_GEMM_DENSE : HM_GEMM_INDEXED;
}

/* A legal tuning whose bm neither the heuristic nor the default picks for bucket 0. */
static hm_gemm_tuning distinctive(const hm_layer_config *lc, const hm_gemm_config *base) {
  hm_device_profile p;
  hm_layer_plan heuristic;
  hm_gemm_plan dflt;
  HM_ASSERT_OK(hm_device_profile_for_engine(engine, &p));
  HM_ASSERT_OK(hm_heuristics_layer_plan(engine, lc, type_of(lc), base->arch, HM_PLAN_HEURISTIC, &heuristic));
  HM_ASSERT_OK(hm_gemm_plan_make(base, &dflt));
  const int avoid[] = {heuristic.plan.cfg[0].tuning.bm, dflt.cfg[0].tuning.bm};
  hm_gemm_tuning *cands = NULL, pick = {0};
  int count = 0;
  HM_ASSERT_OK(hm_choose_candidates(base, &p, &cands, &count));
  for (int i = 0; i < count && pick.bm == 0; i++)
    if (cands[i].bm != avoid[0] && cands[i].bm != avoid[1] && cands[i].bm >= 32) pick = cands[i];
  free(cands);
  assert_true(pick.bm >= 32);
  return pick;
}

/* Stores t for valid M in (m_lo, m_hi] of base's layer under this engine's identity, and under another
 * device. */
static void store_entry(const hm_gemm_config *base, const hm_gemm_tuning *t, int64_t m_lo, int64_t m_hi) {
  hm_tune_entry e[2];
  memset(e, 0, sizeof(e));
  HM_ASSERT_OK(hm_tune_identity_for_engine(engine, &e[0].id));
  hm_tune_layer_key(base, e[0].layer, sizeof(e[0].layer));
  e[0].m_lo = m_lo;
  e[0].m_hi = m_hi;
  e[0].tuning = *t;
  e[0].tuned_us = 1.0;
  e[0].heuristic_us = 2.0;
  e[1] = e[0];
  snprintf(e[1].id.device, sizeof(e[1].id.device), "another GPU");
  e[1].tuning.bm = 128;
  HM_ASSERT_OK(hm_tune_table_store(root, e, 2));
}

/* Stores t for lc's bucket holding valid M m; *m_hi receives its upper end. */
static void store_bucket_of(const hm_layer_config *lc, const hm_gemm_config *base, const hm_gemm_tuning *t,
                            int64_t m, int64_t *m_hi) {
  int64_t m_lo = 0;
  for (int b = 0; b == 0 || m > *m_hi; b++) hm_choose_bucket(lc, type_of(lc), b, &m_lo, m_hi);
  store_entry(base, t, m_lo, *m_hi);
}

/* The kernel config of lc's GEMM type on the arch this engine plans for. */
static hm_gemm_config base_of(const hm_layer_config *lc) {
  int arch = 0;
  hm_gemm_config base;
  HM_ASSERT_OK(hm_heuristics_arch(engine, &arch));
  HM_ASSERT_OK(hm_gemm_config_from_layer(lc, type_of(lc), arch, &base));
  return base;
}

/* A transformed layer with random weights under HUMMING_GEMM_PLAN=source, its log captured. */
static hm_layer *make_layer(const hm_layer_config *lc, const char *source, log_capture *log) {
  static char key[192];
  int arch = 0;
  hm_gemm_config base;
  HM_ASSERT_OK(hm_heuristics_arch(engine, &arch));
  HM_ASSERT_OK(
      hm_gemm_config_from_layer(lc, lc->experts == 1 ? HM_GEMM_DENSE : HM_GEMM_INDEXED, arch, &base));
  hm_tune_layer_key(&base, key, sizeof(key));
  set_env("HUMMING_GEMM_PLAN", source);
  memset(log, 0, sizeof(*log));
  log->key = key;
  hm_log_set(capture, log);
  hm_layer *l = NULL;
  HM_ASSERT_OK(hm_layer_create(engine, lc, &l));
  const size_t count = (size_t)(lc->experts * lc->n * lc->k);
  float *w = malloc(count * sizeof(float));
  assert_non_null(w);
  hm_rng rng;
  hm_rng_seed(&rng, 7);
  hm_rng_fill_normal(&rng, w, count, 0.05f);
  HM_ASSERT_OK(hm_layer_quantize(l, w, NULL));
  free(w);
  HM_ASSERT_OK(hm_layer_transform(l, NULL));
  hm_log_set(NULL, NULL);
  return l;
}

/* The config and source a forward of valid M rows runs (indexed metadata padded to the layer's block_m). */
static hm_gemm_config config_at(hm_layer *l, int64_t valid_m, hm_plan_source *source) {
  const bool moe = l->cfg.experts > 1;
  hm_gemm_args args = {.type = moe ? HM_GEMM_INDEXED : HM_GEMM_DENSE,
                       .m = moe ? valid_m / TOP_K : valid_m,
                       .top_k = TOP_K,
                       .block_m = moe ? hm_layer_block_m(l, valid_m) : 0};
  hm_gemm_config cfg;
  HM_ASSERT_OK(hm_layer_kernel_config(l, &args, &cfg, source));
  return cfg;
}

static void tuned_table_drives_the_layer(int64_t experts) {
  const hm_layer_config lc = hm_test_layer_config("w4a16", 256, 512, experts, 0);
  int arch = 0;
  hm_gemm_config base;
  HM_ASSERT_OK(hm_heuristics_arch(engine, &arch));
  HM_ASSERT_OK(hm_gemm_config_from_layer(&lc, type_of(&lc), arch, &base));
  const hm_gemm_tuning t = distinctive(&lc, &base);
  const int64_t m = experts == 1 ? 1 : 2 * TOP_K;
  int64_t m_hi = 0;
  store_bucket_of(&lc, &base, &t, m, &m_hi);
  hm_plan_source source;
  log_capture log;

  const char *picks_tuned[] = {NULL, "auto", "tuned"};
  for (size_t i = 0; i < HM_ARRAY_SIZE(picks_tuned); i++) {
    hm_layer *l = make_layer(&lc, picks_tuned[i], &log);
    hm_gemm_config cfg = config_at(l, m, &source);
    assert_true(hm_choose_tuning_equal(&cfg.tuning, &t));
    assert_int_equal(source, HM_PLAN_TUNED);
    if (experts > 1) assert_int_equal(hm_layer_block_m(l, m), t.bm);
    assert_int_equal(l->plans[type_of(&lc)].tuned_buckets, 1);
    assert_non_null(strstr(log.table_line, "1 buckets tuned"));
    /* Only an explicit tuned plan warns about the buckets the table lacks. */
    assert_int_equal(log.warnings > 0, picks_tuned[i] != NULL && strcmp(picks_tuned[i], "tuned") == 0);
    /* Past the tuned bucket the heuristic answers. */
    config_at(l, 64 * m_hi, &source);
    assert_int_equal(source, HM_PLAN_HEURISTIC);
    hm_layer_destroy(l);
  }

  hm_layer *l = make_layer(&lc, "default", &log);
  hm_gemm_config cfg = config_at(l, m, &source);
  hm_gemm_config dflt;
  HM_ASSERT_OK(hm_gemm_select(&base, m, &dflt));
  assert_int_equal(source, HM_PLAN_DEFAULT);
  assert_true(hm_choose_tuning_equal(&cfg.tuning, &dflt.tuning));
  assert_int_not_equal(cfg.tuning.bm, t.bm);
  assert_non_null(strstr(log.table_line, ": default,"));
  hm_layer_destroy(l);

  l = make_layer(&lc, "heuristic", &log);
  cfg = config_at(l, m, &source);
  assert_int_equal(source, HM_PLAN_HEURISTIC);
  assert_false(hm_choose_tuning_equal(&cfg.tuning, &t));
  assert_int_equal(l->plans[type_of(&lc)].tuned_buckets, 0);
  assert_non_null(strstr(log.table_line, "heuristic"));
  hm_layer_destroy(l);
}

/* A table tuned on buckets since replaced (a MoE layer's first used to end at a row an
 * expert) is still read; the entry no bucket asks for is reported, the heuristic serves. */
static void entries_of_replaced_buckets_are_reported(void **state) {
  (void)state;
  const hm_layer_config lc = hm_test_layer_config("w4a16", 256, 512, 8, 0);
  const hm_gemm_config base = base_of(&lc);
  const hm_gemm_tuning t = distinctive(&lc, &base);
  store_entry(&base, &t, 0, lc.experts);
  log_capture log;
  hm_layer *l = make_layer(&lc, "auto", &log);
  char key[192];
  hm_tune_layer_key(&base, key, sizeof(key));
  assert_non_null(strstr(log.warning, "no longer used"));
  assert_non_null(strstr(log.warning, key));
  hm_plan_source source;
  config_at(l, 3 * TOP_K, &source); /* 6 rows: in the replaced (0, 8], in no bucket stored */
  assert_int_equal(source, HM_PLAN_HEURISTIC);
  hm_layer_destroy(l);
}

static void moe_layer_picks_the_tuned_entry(void **state) {
  (void)state;
  tuned_table_drives_the_layer(8);
}

static void dense_layer_picks_the_tuned_entry(void **state) {
  (void)state;
  tuned_table_drives_the_layer(1);
}

/* Whatever the source, forward's kernel for an indexed M divides the block_m the MoE layer pads to. */
static void block_m_agrees_with_the_kernel_picked(void **state) {
  (void)state;
  const hm_layer_config lc = hm_test_layer_config("w4a16", 256, 512, 8, 0);
  const char *sources[] = {"auto", "heuristic", "default"};
  for (size_t s = 0; s < HM_ARRAY_SIZE(sources); s++) {
    log_capture log;
    hm_layer *l = make_layer(&lc, sources[s], &log);
    for (int64_t m = TOP_K; m <= 4096 * TOP_K; m *= 2) {
      hm_plan_source source;
      const hm_gemm_config cfg = config_at(l, m, &source);
      const int block_m = hm_layer_block_m(l, m);
      assert_int_equal(block_m % cfg.tuning.bm, 0);
      assert_int_equal(cfg.tuning.bm, l->plans[HM_GEMM_INDEXED]
                                          .plan.cfg[hm_gemm_plan_pick(&l->plans[HM_GEMM_INDEXED].plan, m)]
                                          .tuning.bm);
    }
    hm_layer_destroy(l);
  }
}

/* HUMMING_DEVICE_PROFILE names the GPU a host engine plans for: its arch, and the choice the heuristics make
 * there. */
static void named_profile_plans_like_the_heuristics(void **state) {
  (void)state;
  const char *const names[] = {"h20", "h200", "a100"};
  hm_quant_scheme scheme;
  hm_model_preset preset;
  hm_model_layer layers[HM_MODEL_MAX_LAYERS];
  int count = 0;
  HM_ASSERT_OK(hm_quant_scheme_parse("w4a16", &scheme));
  HM_ASSERT_OK(hm_model_preset_get("deepseek-v3", &preset));
  HM_ASSERT_OK(hm_model_layers(&preset, &scheme, 1, 1, layers, &count));
  for (size_t n = 0; n < HM_ARRAY_SIZE(names); n++) {
    set_env("HUMMING_DEVICE_PROFILE", names[n]);
    hm_device_profile p;
    int arch = 0;
    HM_ASSERT_OK(hm_device_profile_builtin(names[n], &p));
    HM_ASSERT_OK(hm_heuristics_arch(engine, &arch));
    assert_int_equal(arch, p.arch);
    for (int l = 0; l < count; l++) {
      const hm_gemm_type type = type_of(&layers[l].config);
      hm_layer_plan mine;
      hm_gemm_plan theirs;
      HM_ASSERT_OK(hm_heuristics_layer_plan(engine, &layers[l].config, type, arch, HM_PLAN_HEURISTIC, &mine));
      HM_ASSERT_OK(hm_choose_plan(&layers[l].config, type, &p, &theirs));
      assert_int_equal(mine.plan.count, theirs.count);
      for (int i = 0; i < theirs.count; i++) {
        assert_int_equal(mine.plan.m_hi[i], theirs.m_hi[i]);
        assert_int_equal(mine.plan.cfg[i].arch, p.arch);
        assert_int_equal(mine.source[i], HM_PLAN_HEURISTIC);
        assert_true(hm_choose_tuning_equal(&mine.plan.cfg[i].tuning, &theirs.cfg[i].tuning));
        assert_true(hm_choose_tuning_legal(&mine.plan.cfg[i], &mine.plan.cfg[i].tuning, &p));
      }
    }
  }
  set_env("HUMMING_DEVICE_PROFILE", NULL);
}

static void bad_plan_source_is_refused(void **state) {
  (void)state;
  const hm_layer_config lc = hm_test_layer_config("w4a16", 256, 512, 8, 0);
  set_env("HUMMING_GEMM_PLAN", "fastest");
  hm_layer *l = NULL;
  assert_int_equal(hm_layer_create(engine, &lc, &l), HM_INVALID_ARGUMENT);
  assert_null(l);
  assert_non_null(strstr(hm_last_error(), "HUMMING_GEMM_PLAN=fastest"));
  log_capture log;
  l = make_layer(&lc, NULL, &log);
  assert_int_equal(hm_layer_set_plan_source(l, HM_PLAN_DEFAULT), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_layer_set_plan_source(l, (hm_plan_source)9), HM_INVALID_ARGUMENT);
  hm_layer_destroy(l);
}

/* A tuning's name reads back as the same tuning; names that do not fit are refused. */
static void tuning_names_round_trip(void **state) {
  (void)state;
  const hm_gemm_tuning tunings[] = {
      {128, 256, 128, 1, 8, 1, 3, true, 4, 1, HM_MMA_WGMMA, true},
      {8, 256, 256, 1, 4, 2, 3, true, 2, 2, HM_MMA_SYNC, false},
      {64, 128, 64, 2, 2, 1, 4, false, 0, 1, HM_MMA_WGMMA, false},
  };
  for (size_t i = 0; i < HM_ARRAY_SIZE(tunings); i++) {
    char name[96];
    hm_gemm_tuning back;
    hm_gemm_tuning_name(&tunings[i], name, sizeof(name));
    HM_ASSERT_OK(hm_gemm_tuning_parse(name, &back));
    assert_true(hm_choose_tuning_equal(&back, &tunings[i]));
  }
  const char *bad[] = {"bm128_bn256", "bm128_bn256_bk128_w1x8x1_s3_sk_c1", "bm128_bn256_bk128_w1x8x1_s3_xx4_c1",
                       "bm128_bn256_bk128_w1x8x1_s3_sk4_c1_ws", "bm128_bn256_bk128_w1x8x1_s3_sk4_c1_wgmma_wsx"};
  for (size_t i = 0; i < HM_ARRAY_SIZE(bad); i++) {
    hm_gemm_tuning t;
    assert_int_equal(hm_gemm_tuning_parse(bad[i], &t), HM_INVALID_ARGUMENT);
    assert_non_null(strstr(hm_last_error(), bad[i]));
  }
}

/* HUMMING_GEMM_PLAN=<a tuning's name> pins that kernel for every M, with a warning; a
 * tuning the layer cannot run fails its transform naming it; "pinned" alone names none. */
static void pinned_tuning_serves_every_m(void **state) {
  (void)state;
  const hm_layer_config lc = hm_test_layer_config("w4a16", 256, 512, 8, 0);
  const hm_gemm_config base = base_of(&lc);
  const hm_gemm_tuning t = distinctive(&lc, &base);
  char name[96];
  hm_gemm_tuning_name(&t, name, sizeof(name));
  log_capture log;
  hm_layer *l = make_layer(&lc, name, &log);
  for (int64_t m = TOP_K; m <= 4096 * TOP_K; m *= 8) {
    hm_plan_source source;
    const hm_gemm_config cfg = config_at(l, m, &source);
    assert_int_equal(source, HM_PLAN_PINNED);
    assert_true(hm_choose_tuning_equal(&cfg.tuning, &t));
  }
  assert_non_null(strstr(log.table_line, "pinned to"));
  assert_true(log.warnings > 0);
  hm_layer_destroy(l);

  set_env("HUMMING_GEMM_PLAN", "bm128_bn256_bk128_w1x8x3_s3_sk4_c1_wgmma");
  l = NULL;
  HM_ASSERT_OK(hm_layer_create(engine, &lc, &l));
  const size_t count = (size_t)(lc.experts * lc.n * lc.k);
  float *w = calloc(count, sizeof(float));
  assert_non_null(w);
  HM_ASSERT_OK(hm_layer_quantize(l, w, NULL));
  free(w);
  assert_int_equal(hm_layer_transform(l, NULL), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "pinned GEMM kernel bm128_bn256_bk128_w1x8x3"));
  hm_layer_destroy(l);

  set_env("HUMMING_GEMM_PLAN", "pinned");
  l = NULL;
  assert_int_equal(hm_layer_create(engine, &lc, &l), HM_INVALID_ARGUMENT);
  assert_null(l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(moe_layer_picks_the_tuned_entry),
      cmocka_unit_test(entries_of_replaced_buckets_are_reported),
      cmocka_unit_test(dense_layer_picks_the_tuned_entry),
      cmocka_unit_test(block_m_agrees_with_the_kernel_picked),
      cmocka_unit_test(named_profile_plans_like_the_heuristics),
      cmocka_unit_test(bad_plan_source_is_refused),
      cmocka_unit_test(tuning_names_round_trip),
      cmocka_unit_test(pinned_tuning_serves_every_m),
  };
  int rc = cmocka_run_group_tests(tests, setup, teardown);
  hm_shutdown();
  return rc;
}
