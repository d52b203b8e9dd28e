/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Entries of the per-node cubin cache. One entry a key, in <root>/kernels/<k0k1>/<key>/:
 *   source.cu     the generated source
 *   options.txt   the compiler command or option list
 *   log.txt       the compiler's output
 *   kernel.cubin  the image
 *   checksum      format, library identity, key, size and SHA-256 of kernel.cubin
 * Writers hold the flock on <key>.lock beside the entry and write every file through a
 * temporary name (cubin, then checksum, last); readers need no lock because an entry
 * only counts when its checksum matches, so a torn or stale entry reads as broken.
 */
#ifndef HM_CACHE_H
#define HM_CACHE_H

#include <stddef.h>

#include "humming.h"

/* Largest cubin the cache will read back; anything bigger is corrupt. */
#define HM_CACHE_MAX_CUBIN_BYTES ((size_t)1 << 30)

typedef enum hm_cache_lookup {
  HM_CACHE_MISS = 0, /* no entry */
  HM_CACHE_HIT,      /* a verified cubin */
  HM_CACHE_BROKEN    /* an entry that failed verification; recompile it */
} hm_cache_lookup;

typedef struct hm_cache_entry {
  const char *source;
  const char *options;
  const char *log;
  const void *cubin; /* NULL: a failed compile, kept for its log */
  size_t cubin_size;
} hm_cache_entry;

/* HUMMING_CACHE_DIR, else $XDG_CACHE_HOME/humming, else $HOME/.cache/humming. */
hm_status hm_cache_default_root(char *buf, size_t len);
/* The entry's directory for a key. */
hm_status hm_cache_entry_dir(const char *root, const char *key, char *buf, size_t len);
/* Creates the directories under root that entries and locks need. */
hm_status hm_cache_prepare(const char *root);
/*
 * Reads and verifies the entry of key. *cubin (malloc'd) is set only on HIT; why
 * receives the reason for BROKEN. A read error counts as BROKEN, not as a failure.
 */
hm_status hm_cache_load(const char *root, const char *key, const char *library, void **cubin, size_t *size,
                        hm_cache_lookup *result, char *why, size_t why_len);
/* Takes the entry's writer lock; wait false: *busy instead of waiting for another writer. */
hm_status hm_cache_lock(const char *root, const char *key, bool wait, int *fd, bool *busy);
void hm_cache_unlock(int fd);
/* Replaces the entry of key with e; the caller holds the lock. */
hm_status hm_cache_store(const char *root, const char *key, const char *library, const hm_cache_entry *e);

#endif
