/* SPDX-License-Identifier: Apache-2.0 */
/* Loading, looking up and storing the tuning table (see tune_table.h). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda_driver.h"
#include "engine.h"
#include "heuristics/tune_table.h"
#include "kernels/cache_file.h"
#include "kernels/jit.h"
#include "log.h"

#define TABLE_MAX_BYTES ((size_t)64 << 20)
#define TABLE_LOCK "tuning.lock"

hm_status hm_tune_identity_for_engine(hm_engine *engine, hm_tune_identity *out) {
  HM_CHECK_NOT_NULL(engine);
  HM_CHECK_NOT_NULL(out);
  memset(out, 0, sizeof(*out));
  snprintf(out->device, sizeof(out->device), "%s", engine->device_name);
  snprintf(out->driver, sizeof(out->driver), "host");
  if (engine->kind == HM_BACKEND_CUDA) {
    int version = 0;
    HM_CU_CHECK(cuDriverGetVersion(&version));
    snprintf(out->driver, sizeof(out->driver), "cuda %d", version);
  }
  hm_jit_library_id(out->library, sizeof(out->library));
  return HM_OK;
}

void hm_tune_layer_key(const hm_gemm_config *cfg, char *buf, size_t len) {
  char layer[160];
  hm_gemm_layer_key(cfg, layer, sizeof(layer));
  snprintf(buf, len, "%s_sm%d", layer, cfg->arch);
}

static hm_status table_path(const char *root, const char *name, char *buf, size_t len) {
  if (snprintf(buf, len, "%s/%s", root, name) >= (int)len)
    HM_FAIL(HM_INVALID_ARGUMENT, "path too long: %s", root);
  return HM_OK;
}

hm_status hm_tune_table_load(const char *root, hm_tune_table *out) {
  HM_CHECK_NOT_NULL(root);
  HM_CHECK_NOT_NULL(out);
  memset(out, 0, sizeof(*out));
  char path[PATH_MAX];
  HM_CHECK(table_path(root, HM_TUNE_TABLE_FILE, path, sizeof(path)));
  void *text = NULL;
  size_t size = 0;
  bool missing = false;
  hm_status st = hm_cache_file_read(path, TABLE_MAX_BYTES, &text, &size, &missing);
  if (st == HM_OK && !missing) st = hm_tune_table_from_json(text, out);
  free(text);
  if (st != HM_OK) {
    /* A bad table costs only the tuned choices: the heuristics still answer. */
    HM_WARN(TUNE, "ignoring tuning table %s: %s", path, hm_last_error());
    memset(out, 0, sizeof(*out));
    out->corrupt = true;
  }
  return HM_OK;
}

static bool same_key(const hm_tune_entry *a, const hm_tune_identity *id, const char *layer, int64_t m_lo,
                     int64_t m_hi) {
  return strcmp(a->id.device, id->device) == 0 && strcmp(a->id.driver, id->driver) == 0 &&
         strcmp(a->id.library, id->library) == 0 && strcmp(a->layer, layer) == 0 && a->m_lo == m_lo &&
         a->m_hi == m_hi;
}

const hm_tune_entry *hm_tune_table_lookup(const hm_tune_table *t, const hm_tune_identity *id,
                                          const char *layer, int64_t m_lo, int64_t m_hi) {
  if (t == NULL || id == NULL || layer == NULL) return NULL;
  for (int i = 0; i < t->count; i++)
    if (same_key(&t->entries[i], id, layer, m_lo, m_hi)) return &t->entries[i];
  return NULL;
}

hm_status hm_tune_table_put(hm_tune_table *t, const hm_tune_entry *e) {
  HM_CHECK_NOT_NULL(t);
  HM_CHECK_NOT_NULL(e);
  for (int i = 0; i < t->count; i++)
    if (same_key(&t->entries[i], &e->id, e->layer, e->m_lo, e->m_hi)) {
      t->entries[i] = *e;
      return HM_OK;
    }
  hm_tune_entry *grown = realloc(t->entries, (size_t)(t->count + 1) * sizeof(*grown));
  if (grown == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "%d tuning entries", t->count + 1);
  t->entries = grown;
  t->entries[t->count++] = *e;
  return HM_OK;
}

static hm_status merge_and_write(const char *root, const hm_tune_entry *entries, int count) {
  hm_status ret = HM_OK;
  hm_tune_table t;
  char *text = NULL;
  HM_CHECK(hm_tune_table_load(root, &t));
  for (int i = 0; i < count; i++) HM_CHECK_GOTO(hm_tune_table_put(&t, &entries[i]), done);
  HM_CHECK_GOTO(hm_tune_table_to_json(&t, &text), done);
  HM_CHECK_GOTO(hm_cache_file_write(root, HM_TUNE_TABLE_FILE, text, strlen(text), true), done);
  ret = hm_cache_file_sync_dir(root);
done:
  free(text);
  hm_tune_table_free(&t);
  return ret;
}

hm_status hm_tune_table_store(const char *root, const hm_tune_entry *entries, int count) {
  HM_CHECK_NOT_NULL(root);
  if (count > 0) HM_CHECK_NOT_NULL(entries);
  HM_CHECK(hm_cache_file_mkdirs(root));
  char lock_path[PATH_MAX];
  HM_CHECK(table_path(root, TABLE_LOCK, lock_path, sizeof(lock_path)));
  int fd = -1;
  bool busy = false;
  HM_CHECK(hm_cache_file_lock(lock_path, true, &fd, &busy));
  hm_status ret = merge_and_write(root, entries, count);
  hm_cache_file_unlock(fd);
  return ret;
}

void hm_tune_table_free(hm_tune_table *t) {
  if (t == NULL) return;
  free(t->entries);
  memset(t, 0, sizeof(*t));
}
