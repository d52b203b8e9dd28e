/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kernel table a layer runs on an engine (see choose_engine.h). The heuristic plan
 * is made once for all buckets (one candidate enumeration); under auto and tuned each
 * bucket then takes the tuning table's entry when one is stored and still legal.
 */
#include <string.h>

#include "check.h"
#include "engine.h"
#include "heuristics/choose_engine.h"
#include "heuristics/tune_table.h"
#include "heuristics/tuner.h"
#include "kernels/cache.h"
#include "log.h"
#include "params.h"

static const char *const source_names[HM_PLAN_SOURCE_COUNT] = {"auto", "heuristic", "tuned", "default",
                                                                 "pinned"};

const char *hm_plan_source_name(hm_plan_source source) {
  return (unsigned)source < HM_PLAN_SOURCE_COUNT ? source_names[source] : "invalid";
}

hm_status hm_plan_source_parse(const char *name, hm_plan_source *out) {
  HM_CHECK_NOT_NULL(name);
  HM_CHECK_NOT_NULL(out);
  /* "pinned" alone names no kernel: only a tuning's name pins one. */
  for (int i = 0; i < HM_PLAN_PINNED; i++)
    if (strcmp(name, source_names[i]) == 0) {
      *out = (hm_plan_source)i;
      return HM_OK;
    }
  /* A tuning's name: a malformed one fails with what in it does not fit. */
  if (strncmp(name, "bm", 2) == 0) {
    hm_gemm_tuning t;
    HM_CHECK(hm_gemm_tuning_parse(name, &t));
    *out = HM_PLAN_PINNED;
    return HM_OK;
  }
  HM_FAIL(HM_INVALID_ARGUMENT,
          "GEMM plan source '%s': expected auto, heuristic, tuned, default or a kernel tuning such as "
          "bm128_bn256_bk128_w1x8x1_s4_sk4_c1_wgmma",
          name);
}

hm_status hm_plan_source_from_env(hm_plan_source *out) {
  HM_CHECK_NOT_NULL(out);
  const char *v = hm_param_gemm_plan();
  if (hm_plan_source_parse(v, out) != HM_OK)
    HM_FAIL(HM_INVALID_ARGUMENT, "HUMMING_GEMM_PLAN=%s: %s", v, hm_last_error());
  return HM_OK;
}

hm_status hm_heuristics_arch(hm_engine *engine, int *arch) {
  HM_CHECK_NOT_NULL(engine);
  HM_CHECK_NOT_NULL(arch);
  if (engine->kind == HM_BACKEND_CUDA) {
    *arch = engine->arch;
    return HM_OK;
  }
  hm_device_profile p;
  HM_CHECK(hm_device_profile_for_engine(engine, &p));
  *arch = p.arch;
  return HM_OK;
}

typedef struct plan_ctx {
  hm_gemm_config base;
  char key[192]; /* hm_tune_layer_key of base */
  hm_tune_table table;
  hm_tune_identity id;
} plan_ctx;

/* The node's table under this engine's identity; a missing cache dir is an empty table. */
static hm_status load_table(hm_engine *engine, hm_plan_source source, plan_ctx *c) {
  char root[1024];
  if (hm_cache_default_root(root, sizeof(root)) != HM_OK) {
    if (source == HM_PLAN_TUNED)
      HM_WARN(TUNE, "no tuning table (no cache dir): %s", hm_last_error());
    else
      HM_INFO(TUNE, "no tuning table (no cache dir): %s", hm_last_error());
    return HM_OK;
  }
  HM_CHECK(hm_tune_identity_for_engine(engine, &c->id));
  return hm_tune_table_load(root, &c->table);
}

/* The stored winner for (m_lo, m_hi] if there is one and the kernel still accepts it. */
static bool tuned_choice(const plan_ctx *c, int64_t m_lo, int64_t m_hi, hm_gemm_tuning *out) {
  const hm_tune_entry *e = hm_tune_table_lookup(&c->table, &c->id, c->key, m_lo, m_hi);
  if (e == NULL) return false;
  hm_gemm_config cfg = c->base;
  cfg.tuning = e->tuning;
  if (hm_gemm_config_check(&cfg) != HM_OK) {
    HM_WARN(TUNE, "tuned config for %s M in (%lld, %lld] is no longer legal, the heuristic's serves: %s",
            c->key, (long long)m_lo, (long long)m_hi, hm_last_error());
    return false;
  }
  *out = e->tuning;
  return true;
}

/* Entries of this layer under this identity whose M range no bucket has any more (the
 * buckets changed since they were measured) are never answered: a warning says so. */
static void warn_stale_entries(const plan_ctx *c, const hm_layer_config *lc) {
  int stale = 0;
  for (int i = 0; i < c->table.count; i++) {
    const hm_tune_entry *e = &c->table.entries[i];
    if (hm_tune_table_lookup(&c->table, &c->id, c->key, e->m_lo, e->m_hi) != e) continue;
    bool current = false;
    for (int b = 0; b < hm_choose_bucket_count() && !current; b++) {
      int64_t lo, hi;
      hm_choose_bucket(lc, c->base.compute.type, b, &lo, &hi);
      current = lo == e->m_lo && hi == e->m_hi;
    }
    stale += !current;
  }
  if (stale > 0)
    HM_WARN(TUNE,
            "%d tuning-table entries of %s are for M buckets no longer used, ignored (humming-moe tune)",
            stale, c->key);
}

/* Appends (m_hi, tuning, source), widening the last entry when it has the same tuning and source. */
static void push(hm_layer_plan *out, const hm_gemm_config *base, int64_t m_hi, const hm_gemm_tuning *t,
                 hm_plan_source source) {
  hm_gemm_plan *p = &out->plan;
  const int last = p->count - 1;
  if (last >= 0 && out->source[last] == source && hm_choose_tuning_equal(&p->cfg[last].tuning, t)) {
    p->m_hi[last] = m_hi;
    return;
  }
  p->cfg[p->count] = *base;
  p->cfg[p->count].tuning = *t;
  p->m_hi[p->count] = m_hi;
  out->source[p->count++] = source;
}

static hm_status bucketed_plan(hm_engine *engine, const hm_layer_config *lc, hm_plan_source source,
                               plan_ctx *c, hm_layer_plan *out) {
  hm_device_profile p;
  HM_CHECK(hm_device_profile_for_engine(engine, &p));
  if (p.arch != c->base.arch)
    HM_INFO(TUNE, "profile %s (sm_%d) ranks kernels for sm_%d, the arch the layer runs on", p.name, p.arch,
            c->base.arch);
  p.arch = c->base.arch;
  hm_gemm_plan heuristic;
  HM_CHECK(hm_choose_plan(lc, c->base.compute.type, &p, &heuristic));
  if (source != HM_PLAN_HEURISTIC) {
    HM_CHECK(load_table(engine, source, c));
    warn_stale_entries(c, lc);
  }
  int untuned = 0, timed = 0;
  for (int b = 0; b < hm_choose_bucket_count(); b++) {
    int64_t lo, hi;
    hm_choose_bucket(lc, c->base.compute.type, b, &lo, &hi);
    const bool tunable = hm_tuner_bucket_timed(lc, c->base.compute.type, lo, hi);
    timed += tunable;
    hm_gemm_tuning tuned;
    if (source != HM_PLAN_HEURISTIC && tuned_choice(c, lo, hi, &tuned)) {
      push(out, &c->base, hi, &tuned, HM_PLAN_TUNED);
      out->tuned_buckets++;
      continue;
    }
    push(out, &c->base, hi, &heuristic.cfg[hm_gemm_plan_pick(&heuristic, hi)].tuning, HM_PLAN_HEURISTIC);
    out->heuristic_buckets++;
    untuned += tunable;
  }
  if (source == HM_PLAN_TUNED && untuned > 0)
    HM_WARN(TUNE,
            "HUMMING_GEMM_PLAN=tuned: %d of the %d buckets of %s the tuner times have no tuning-table entry "
            "for %s (%s); the heuristic's choice serves them (run humming-moe tune)",
            untuned, timed, c->key, c->id.device, c->id.driver);
  return HM_OK;
}

/* The one kernel HUMMING_GEMM_PLAN names, for every M, if it is legal for the layer on
 * this device. */
static hm_status pinned_plan(hm_engine *engine, const plan_ctx *c, hm_layer_plan *out) {
  const char *name = hm_param_gemm_plan();
  hm_gemm_tuning t;
  if (hm_gemm_tuning_parse(name, &t) != HM_OK)
    HM_FAIL(HM_INVALID_ARGUMENT, "pinned GEMM plan: HUMMING_GEMM_PLAN=%s names no kernel: %s", name,
            hm_last_error());
  hm_device_profile p;
  HM_CHECK(hm_device_profile_for_engine(engine, &p));
  p.arch = c->base.arch;
  hm_gemm_config cfg = c->base;
  cfg.tuning = t;
  if (hm_gemm_config_check(&cfg) != HM_OK)
    HM_FAIL(HM_INVALID_ARGUMENT, "pinned GEMM kernel %s for %s: %s", name, c->key, hm_last_error());
  if (!hm_choose_tuning_legal(&c->base, &t, &p))
    HM_FAIL(HM_INVALID_ARGUMENT,
            "pinned GEMM kernel %s for %s: outside what the candidates admit on %s (warp tiles, registers, "
            "shared memory or threads an SM)",
            name, c->key, p.name);
  push(out, &c->base, INT64_MAX, &t, HM_PLAN_PINNED);
  HM_WARN(GEMM, "kernel table of %s: pinned to %s for every M (HUMMING_GEMM_PLAN)", c->key, name);
  return HM_OK;
}

hm_status hm_heuristics_layer_plan(hm_engine *engine, const hm_layer_config *lc, hm_gemm_type type, int arch,
                                   hm_plan_source source, hm_layer_plan *out) {
  HM_CHECK_NOT_NULL(engine);
  HM_CHECK_NOT_NULL(lc);
  HM_CHECK_NOT_NULL(out);
  memset(out, 0, sizeof(*out));
  if ((unsigned)source >= HM_PLAN_SOURCE_COUNT)
    HM_FAIL(HM_INVALID_ARGUMENT, "GEMM plan source %d", (int)source);
  plan_ctx c;
  memset(&c, 0, sizeof(c));
  HM_CHECK(hm_gemm_config_from_layer(lc, type, arch, &c.base));
  hm_tune_layer_key(&c.base, c.key, sizeof(c.key));
  if (source == HM_PLAN_DEFAULT) {
    HM_CHECK(hm_gemm_plan_make(&c.base, &out->plan));
    for (int i = 0; i < out->plan.count; i++) out->source[i] = HM_PLAN_DEFAULT;
    HM_INFO(GEMM, "kernel table of %s: default, %d kernels", c.key, out->plan.count);
    return HM_OK;
  }
  if (source == HM_PLAN_PINNED) return pinned_plan(engine, &c, out);
  hm_status ret = bucketed_plan(engine, lc, source, &c, out);
  hm_tune_table_free(&c.table);
  if (ret == HM_OK)
    HM_INFO(GEMM, "kernel table of %s: %s, %d kernels (%d buckets tuned, %d heuristic)", c.key,
            hm_plan_source_name(source), out->plan.count, out->tuned_buckets, out->heuristic_buckets);
  return ret;
}
