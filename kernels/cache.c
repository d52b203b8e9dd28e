/* SPDX-License-Identifier: Apache-2.0 */
/* Layout, verification and writing of cache entries (see cache.h). */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/cache.h"
#include "kernels/cache_file.h"
#include "kernels/cache_key.h"
#include "params.h"

#define HM_CACHE_FORMAT "humming-cubin 1"
#define HM_CHECKSUM_MAX_BYTES 4096

hm_status hm_cache_default_root(char *buf, size_t len) {
  const char *dir = hm_param_cache_dir();
  int n;
  if (dir[0] != '\0')
    n = snprintf(buf, len, "%s", dir);
  else if (hm_param_xdg_cache_home()[0] != '\0')
    n = snprintf(buf, len, "%s/humming", hm_param_xdg_cache_home());
  else if (hm_param_home()[0] != '\0')
    n = snprintf(buf, len, "%s/.cache/humming", hm_param_home());
  else
    HM_FAIL(HM_INVALID_ARGUMENT, "no cache dir: HUMMING_CACHE_DIR, XDG_CACHE_HOME and HOME are all unset");
  if (n < 0 || (size_t)n >= len) HM_FAIL(HM_INVALID_ARGUMENT, "cache dir path too long");
  return HM_OK;
}

static hm_status check_key(const char *key) {
  HM_CHECK_NOT_NULL(key);
  size_t n = strspn(key, "0123456789abcdef");
  if (n != 64 || key[64] != '\0') HM_FAIL(HM_INVALID_ARGUMENT, "cache key '%.80s' is not 64 hex digits", key);
  return HM_OK;
}

static hm_status join(char *buf, size_t len, const char *root, const char *key, const char *suffix) {
  HM_CHECK(check_key(key));
  int n = snprintf(buf, len, "%s/kernels/%.2s/%s%s", root, key, key, suffix);
  if (n < 0 || (size_t)n >= len) HM_FAIL(HM_INVALID_ARGUMENT, "cache path too long under %s", root);
  return HM_OK;
}

hm_status hm_cache_entry_dir(const char *root, const char *key, char *buf, size_t len) {
  return join(buf, len, root, key, "");
}

hm_status hm_cache_prepare(const char *root) {
  char path[PATH_MAX];
  if (snprintf(path, sizeof(path), "%s/kernels", root) >= (int)sizeof(path))
    HM_FAIL(HM_INVALID_ARGUMENT, "cache path too long: %s", root);
  return hm_cache_file_mkdirs(path);
}

/* The checksum file's exact expected text for a cubin. */
static hm_status checksum_text(const char *library, const char *key, const void *cubin, size_t size,
                               char *buf, size_t len) {
  char sha[HM_SHA256_HEX];
  HM_CHECK(hm_sha256_hex(cubin, size, sha));
  int n = snprintf(buf, len, HM_CACHE_FORMAT "\nlibrary %s\nkey %s\nbytes %zu\nsha256 %s\n", library, key,
                   size, sha);
  if (n < 0 || (size_t)n >= len) HM_FAIL(HM_INVALID_ARGUMENT, "library identity too long: %s", library);
  return HM_OK;
}

/* Names the first line where the stored checksum and the expected one differ. */
static void describe_mismatch(const char *stored, const char *expected, char *why, size_t why_len) {
  const char *s = stored, *e = expected;
  while (*e) {
    size_t sl = strcspn(s, "\n"), el = strcspn(e, "\n");
    if (sl != el || strncmp(s, e, el) != 0) {
      snprintf(why, why_len, "the checksum file says '%.*s', the entry has '%.*s'", (int)(sl > 90 ? 90 : sl),
               s, (int)(el > 90 ? 90 : el), e);
      return;
    }
    s += sl + (s[sl] == '\n');
    e += el + (e[el] == '\n');
  }
  snprintf(why, why_len, "checksum file has trailing data");
}

static hm_status read_entry_file(const char *dir, const char *name, size_t max, void **data, size_t *size,
                                 bool *missing) {
  char path[PATH_MAX];
  if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
    HM_FAIL(HM_INVALID_ARGUMENT, "cache path too long: %s", dir);
  return hm_cache_file_read(path, max, data, size, missing);
}

static hm_cache_lookup verify(const char *dir, const char *key, const char *library, void **cubin,
                              size_t *size, char *why, size_t why_len) {
  void *stored = NULL;
  size_t stored_size = 0;
  bool no_sum = false, no_cubin = false;
  hm_cache_lookup result = HM_CACHE_BROKEN;
  char expected[HM_CHECKSUM_MAX_BYTES];
  if (read_entry_file(dir, "checksum", HM_CHECKSUM_MAX_BYTES, &stored, &stored_size, &no_sum) != HM_OK ||
      read_entry_file(dir, "kernel.cubin", HM_CACHE_MAX_CUBIN_BYTES, cubin, size, &no_cubin) != HM_OK) {
    snprintf(why, why_len, "unreadable: %s", hm_last_error());
  } else if (no_sum && no_cubin) {
    result = HM_CACHE_MISS;
  } else if (no_sum || no_cubin) {
    snprintf(why, why_len, "%s is missing", no_sum ? "checksum" : "kernel.cubin");
  } else if (checksum_text(library, key, *cubin, *size, expected, sizeof(expected)) != HM_OK) {
    snprintf(why, why_len, "%s", hm_last_error());
  } else if (strcmp(stored, expected) != 0) {
    describe_mismatch(stored, expected, why, why_len);
  } else {
    result = HM_CACHE_HIT;
  }
  free(stored);
  if (result != HM_CACHE_HIT) {
    free(*cubin);
    *cubin = NULL;
    *size = 0;
  }
  return result;
}

hm_status hm_cache_load(const char *root, const char *key, const char *library, void **cubin, size_t *size,
                        hm_cache_lookup *result, char *why, size_t why_len) {
  HM_CHECK_NOT_NULL(root);
  HM_CHECK_NOT_NULL(library);
  *cubin = NULL;
  *size = 0;
  char dir[PATH_MAX];
  HM_CHECK(hm_cache_entry_dir(root, key, dir, sizeof(dir)));
  why[0] = '\0';
  *result = verify(dir, key, library, cubin, size, why, why_len);
  return HM_OK;
}

hm_status hm_cache_lock(const char *root, const char *key, bool wait, int *fd, bool *busy) {
  char path[PATH_MAX];
  HM_CHECK(join(path, sizeof(path), root, key, ".lock"));
  char *slash = strrchr(path, '/');
  *slash = '\0';
  HM_CHECK(hm_cache_file_mkdirs(path));
  *slash = '/';
  return hm_cache_file_lock(path, wait, fd, busy);
}

void hm_cache_unlock(int fd) {
  hm_cache_file_unlock(fd);
}

/* Source, options and log only inform a reader; a crash that loses them breaks nothing. */
static hm_status write_text(const char *dir, const char *name, const char *text, bool sync) {
  const char *t = text ? text : "";
  return hm_cache_file_write(dir, name, t, strlen(t), sync);
}

hm_status hm_cache_store(const char *root, const char *key, const char *library, const hm_cache_entry *e) {
  HM_CHECK_NOT_NULL(e);
  char dir[PATH_MAX], sum[HM_CHECKSUM_MAX_BYTES];
  HM_CHECK(hm_cache_entry_dir(root, key, dir, sizeof(dir)));
  if (e->cubin) HM_CHECK(checksum_text(library, key, e->cubin, e->cubin_size, sum, sizeof(sum)));
  HM_CHECK(hm_cache_file_mkdirs(dir));
  /* Under the lock nobody else writes here: whatever is left is a broken entry or the
   * temporary files of a writer that was killed. */
  HM_CHECK(hm_cache_file_clear_dir(dir));
  HM_CHECK(write_text(dir, "source.cu", e->source, false));
  HM_CHECK(write_text(dir, "options.txt", e->options, false));
  HM_CHECK(write_text(dir, "log.txt", e->log, false));
  if (e->cubin) {
    HM_CHECK(hm_cache_file_write(dir, "kernel.cubin", e->cubin, e->cubin_size, true));
    HM_CHECK(write_text(dir, "checksum", sum, true));
  }
  return hm_cache_file_sync_dir(dir);
}
