/* SPDX-License-Identifier: Apache-2.0 */
/* The tuning table's JSON form: {"format": ..., "entries": [{key fields, "tuning": {...}, times}]}. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "heuristics/tune_table.h"

static json_t *tuning_to_json(const hm_gemm_tuning *t) {
  return json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:i, s:i, s:i, s:b}", "bm", t->bm, "bn", t->bn,
                   "bk", t->bk, "warps_m", t->warps_m, "warps_n", t->warps_n, "warps_k", t->warps_k, "stages",
                   t->stages, "stream_k", t->stream_k, "sk_min_iters", t->sk_min_iters, "ctas_per_sm",
                   t->ctas_per_sm, "mma", (int)t->mma, "ws", t->ws);
}

/* An entry whose chain is unset (0) was timed as single launches. */
static json_t *entry_to_json(const hm_tune_entry *e) {
  json_t *tuning = tuning_to_json(&e->tuning);
  if (tuning == NULL) return NULL;
  return json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:o, s:f, s:f, s:i}", "device", e->id.device, "driver",
                   e->id.driver, "library", e->id.library, "layer", e->layer, "m_lo", (json_int_t)e->m_lo,
                   "m_hi", (json_int_t)e->m_hi, "tuning", tuning, "tuned_us", e->tuned_us, "heuristic_us",
                   e->heuristic_us, "chain", e->chain > 1 ? e->chain : 1);
}

hm_status hm_tune_table_to_json(const hm_tune_table *t, char **text) {
  HM_CHECK_NOT_NULL(t);
  HM_CHECK_NOT_NULL(text);
  *text = NULL;
  hm_status ret = HM_OK;
  json_t *entries = json_array();
  json_t *root = NULL;
  if (entries == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "tuning table JSON");
  for (int i = 0; i < t->count; i++)
    if (json_array_append_new(entries, entry_to_json(&t->entries[i])) != 0)
      HM_FAIL_GOTO(HM_OUT_OF_MEMORY, done, "tuning table JSON entry %d", i);
  root = json_pack("{s:s, s:O}", "format", HM_TUNE_TABLE_FORMAT, "entries", entries);
  if (root) *text = json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS);
  if (*text == NULL) HM_FAIL_GOTO(HM_OUT_OF_MEMORY, done, "tuning table JSON text");
done:
  json_decref(root);
  json_decref(entries);
  return ret;
}

static bool copy_str(json_t *obj, const char *key, char *dst, size_t len) {
  const char *s = json_string_value(json_object_get(obj, key));
  if (s == NULL || strlen(s) >= len) return false;
  memcpy(dst, s, strlen(s) + 1);
  return true;
}

/* "mma" and "ws" are optional: tables written before the wgmma kernels and warp
 * specialization existed hold mma.sync and unspecialized tunings. */
static bool tuning_from_json(json_t *o, hm_gemm_tuning *t) {
  int sk = 0, mma = HM_MMA_SYNC, ws = 0;
  memset(t, 0, sizeof(*t));
  if (json_unpack(o, "{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:i, s:i, s?i, s?b}", "bm", &t->bm, "bn", &t->bn,
                  "bk", &t->bk, "warps_m", &t->warps_m, "warps_n", &t->warps_n, "warps_k", &t->warps_k,
                  "stages", &t->stages, "stream_k", &sk, "sk_min_iters", &t->sk_min_iters, "ctas_per_sm",
                  &t->ctas_per_sm, "mma", &mma, "ws", &ws) != 0)
    return false;
  if (mma != HM_MMA_SYNC && mma != HM_MMA_WGMMA) return false;
  t->stream_k = sk != 0;
  t->ws = ws != 0;
  t->mma = (hm_gemm_mma)mma;
  return true;
}

/* "chain" is optional: tables written before chained timing hold single launches. */
static bool entry_from_json(json_t *o, hm_tune_entry *e) {
  memset(e, 0, sizeof(*e));
  json_int_t lo = 0, hi = 0;
  json_t *tuning = NULL;
  e->chain = 1;
  if (!copy_str(o, "device", e->id.device, sizeof(e->id.device)) ||
      !copy_str(o, "driver", e->id.driver, sizeof(e->id.driver)) ||
      !copy_str(o, "library", e->id.library, sizeof(e->id.library)) ||
      !copy_str(o, "layer", e->layer, sizeof(e->layer)))
    return false;
  if (json_unpack(o, "{s:I, s:I, s:o, s:F, s:F, s?i}", "m_lo", &lo, "m_hi", &hi, "tuning", &tuning,
                  "tuned_us", &e->tuned_us, "heuristic_us", &e->heuristic_us, "chain", &e->chain) != 0)
    return false;
  e->m_lo = lo;
  e->m_hi = hi;
  return lo >= 0 && hi > lo && e->chain >= 1 && tuning_from_json(tuning, &e->tuning);
}

hm_status hm_tune_table_from_json(const char *text, hm_tune_table *out) {
  HM_CHECK_NOT_NULL(text);
  HM_CHECK_NOT_NULL(out);
  memset(out, 0, sizeof(*out));
  hm_status ret = HM_OK;
  json_error_t err;
  json_t *root = json_loads(text, 0, &err);
  if (root == NULL) HM_FAIL(HM_INVALID_ARGUMENT, "tuning table: %s (line %d)", err.text, err.line);
  const char *format = json_string_value(json_object_get(root, "format"));
  json_t *entries = json_object_get(root, "entries");
  if (format == NULL || strcmp(format, HM_TUNE_TABLE_FORMAT) != 0 || !json_is_array(entries))
    HM_FAIL_GOTO(HM_INVALID_ARGUMENT, fail, "tuning table: not a '%s' file", HM_TUNE_TABLE_FORMAT);
  const size_t n = json_array_size(entries);
  out->entries = calloc(n ? n : 1, sizeof(*out->entries));
  if (out->entries == NULL) HM_FAIL_GOTO(HM_OUT_OF_MEMORY, fail, "%zu tuning entries", n);
  for (size_t i = 0; i < n; i++) {
    if (!entry_from_json(json_array_get(entries, i), &out->entries[i]))
      HM_FAIL_GOTO(HM_INVALID_ARGUMENT, fail, "tuning table: entry %zu is malformed", i);
    out->count++;
  }
  json_decref(root);
  return HM_OK;
fail:
  json_decref(root);
  hm_tune_table_free(out);
  return ret;
}
