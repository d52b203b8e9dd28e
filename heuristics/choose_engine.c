/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The choice a layer makes on an engine: the node's tuning table first (when
 * HUMMING_TUNING=1), the analytic choice on the engine's profile otherwise. Serving
 * only reads the table; tuning happens in `humming-moe tune` alone.
 */
#include <string.h>

#include "check.h"
#include "heuristics/choose.h"
#include "heuristics/tune_table.h"
#include "kernels/cache.h"
#include "log.h"
#include "params.h"

/* The node's table for engine, or an empty one when tuning is off or there is no cache dir. */
static hm_status load_table(hm_engine *engine, hm_tune_table *t, hm_tune_identity *id) {
  memset(t, 0, sizeof(*t));
  if (!hm_param_tuning()) return HM_OK;
  char root[1024];
  if (hm_cache_default_root(root, sizeof(root)) != HM_OK) return HM_OK;
  HM_CHECK(hm_tune_identity_for_engine(engine, id));
  return hm_tune_table_load(root, t);
}

/* The stored winner for (m_lo, m_hi] if there is one and the kernel still accepts it. */
static bool tuned_choice(const hm_tune_table *t, const hm_tune_identity *id, const hm_gemm_config *base,
                         int64_t m_lo, int64_t m_hi, hm_gemm_tuning *out) {
  char layer[192];
  hm_tune_layer_key(base, layer, sizeof(layer));
  const hm_tune_entry *e = hm_tune_table_lookup(t, id, layer, m_lo, m_hi);
  if (e == NULL) return false;
  hm_gemm_config cfg = *base;
  cfg.tuning = e->tuning;
  if (hm_gemm_config_check(&cfg) != HM_OK) {
    HM_WARN(TUNE, "tuned config for %s M in (%lld, %lld] is no longer legal: %s", layer, (long long)m_lo,
            (long long)m_hi, hm_last_error());
    return false;
  }
  *out = e->tuning;
  return true;
}

static hm_status choose_one(const hm_layer_config *lc, hm_gemm_type type, const hm_device_profile *p,
                            const hm_tune_table *t, const hm_tune_identity *id, int64_t m_lo, int64_t m_hi,
                            hm_gemm_tuning *out) {
  hm_gemm_config base, pick;
  HM_CHECK(hm_gemm_config_from_layer(lc, type, p->arch, &base));
  if (tuned_choice(t, id, &base, m_lo, m_hi, out)) return HM_OK;
  HM_CHECK(hm_choose_config(lc, type, p, m_lo, m_hi, &pick, NULL));
  *out = pick.tuning;
  return HM_OK;
}

hm_status hm_heuristics_choose_tuning(hm_engine *engine, const hm_layer_config *lc, hm_gemm_type type, int64_t m_lo,
                                      int64_t m_hi, hm_gemm_tuning *out) {
  HM_CHECK_NOT_NULL(engine);
  HM_CHECK_NOT_NULL(lc);
  HM_CHECK_NOT_NULL(out);
  hm_device_profile p;
  hm_tune_table t;
  hm_tune_identity id;
  HM_CHECK(hm_device_profile_for_engine(engine, &p));
  HM_CHECK(load_table(engine, &t, &id));
  hm_status ret = choose_one(lc, type, &p, &t, &id, m_lo, m_hi, out);
  hm_tune_table_free(&t);
  return ret;
}

hm_status hm_heuristics_plan(hm_engine *engine, const hm_layer_config *lc, hm_gemm_type type, hm_gemm_plan *out) {
  HM_CHECK_NOT_NULL(engine);
  HM_CHECK_NOT_NULL(lc);
  HM_CHECK_NOT_NULL(out);
  memset(out, 0, sizeof(*out));
  hm_device_profile p;
  hm_tune_table t;
  hm_tune_identity id;
  hm_gemm_config base;
  HM_CHECK(hm_device_profile_for_engine(engine, &p));
  HM_CHECK(hm_gemm_config_from_layer(lc, type, p.arch, &base));
  HM_CHECK(load_table(engine, &t, &id));
  hm_status ret = HM_OK;
  for (int b = 0; b < hm_choose_bucket_count(); b++) {
    int64_t lo, hi;
    hm_gemm_tuning tuning;
    hm_choose_bucket(lc, type, b, &lo, &hi);
    HM_CHECK_GOTO(choose_one(lc, type, &p, &t, &id, lo, hi, &tuning), done);
    const int last = out->count - 1;
    if (last >= 0 && hm_choose_tuning_equal(&out->cfg[last].tuning, &tuning)) {
      out->m_hi[last] = hi;
      continue;
    }
    out->cfg[out->count] = base;
    out->cfg[out->count].tuning = tuning;
    out->m_hi[out->count++] = hi;
  }
done:
  hm_tune_table_free(&t);
  return ret;
}
