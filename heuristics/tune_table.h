/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tuning table: the tuner's winners for this node, one JSON file next to the
 * compile cache (<root>/tuning.json). An entry is keyed by device name, driver version,
 * library identity, layer (the kernel config's layer and compute parts), GEMM type and
 * M bucket; entries under another key stay in the file but are never answered.
 * Writers take the flock on <root>/tuning.lock, re-read the file, merge and replace it
 * by an atomic rename (the compile cache's file layer), so concurrent tuners never lose
 * each other's entries and readers need no lock. A corrupt file is reported and read
 * as empty; it is not an error.
 */
#ifndef HM_TUNE_TABLE_H
#define HM_TUNE_TABLE_H

#include "kernels/gemm_config.h"

#define HM_TUNE_TABLE_FILE "tuning.json"
#define HM_TUNE_TABLE_FORMAT "humming-tuning 1"

/* Who measured: entries of another device, driver or library build do not apply. */
typedef struct hm_tune_identity {
  char device[160];
  char driver[32];
  char library[128];
} hm_tune_identity;

typedef struct hm_tune_entry {
  hm_tune_identity id;
  char layer[192]; /* hm_tune_layer_key */
  int64_t m_lo, m_hi; /* valid M in (m_lo, m_hi]; m_hi INT64_MAX: open */
  hm_gemm_tuning tuning;
  double tuned_us, heuristic_us; /* measured at hm_choose_bucket_m */
  int chain;                     /* launches a timed sample: 1 (or 0) one cold launch, R back to back */
} hm_tune_entry;

typedef struct hm_tune_table {
  int count;
  hm_tune_entry *entries;
  bool corrupt; /* the file could not be parsed; read as empty */
} hm_tune_table;

/* Device name, driver version and library identity of engine ("host" driver on the host backend). */
hm_status hm_tune_identity_for_engine(hm_engine *engine, hm_tune_identity *out);
/* The layer and compute parts of a kernel config as text ("idx_u4z_g128_abf16_obf16_n4096_k7168_e256"). */
void hm_tune_layer_key(const hm_gemm_config *cfg, char *buf, size_t len);

/* Reads root's table; a missing file is an empty table, a corrupt one is empty with corrupt set. */
hm_status hm_tune_table_load(const char *root, hm_tune_table *out);
/* The entry for exactly this key, or NULL. */
const hm_tune_entry *hm_tune_table_lookup(const hm_tune_table *t, const hm_tune_identity *id, const char *layer,
                                          int64_t m_lo, int64_t m_hi);
/* Adds e to t in memory, replacing an entry of the same key. */
hm_status hm_tune_table_put(hm_tune_table *t, const hm_tune_entry *e);
/* Under the lock: re-reads root's file, merges entries (theirs replace the file's), writes it back atomically. */
hm_status hm_tune_table_store(const char *root, const hm_tune_entry *entries, int count);
void hm_tune_table_free(hm_tune_table *t);

/* JSON text of a table (malloc'd) and back; parse fails with HM_INVALID_ARGUMENT on anything malformed. */
hm_status hm_tune_table_to_json(const hm_tune_table *t, char **text);
hm_status hm_tune_table_from_json(const char *text, hm_tune_table *out);

#endif
