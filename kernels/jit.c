/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The process table in front of the cache: each distinct request is resolved once
 * per process (threads asking for one that is being resolved wait for it), so a
 * kernel is looked up on disk at most once, and a repeat costs a hash and a compare.
 * The table, the settings and the stats are freed by hm_shutdown.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "kernels/cache.h"
#include "kernels/jit_compiler.h"
#include "kernels/jit_internal.h"
#include "log.h"
#include "params.h"
#include "registry.h"

#define HM_JIT_BUCKETS 1024

/* IDLE: nobody resolves it now (new, or left busy by a batch's first pass). */
enum item_state { ITEM_IDLE, ITEM_PENDING, ITEM_DONE, ITEM_FAILED };

/* One distinct request: its identity (copied) and what it resolved to. */
struct item {
  struct item *next;
  uint64_t hash;
  int arch;
  bool arch_specific;
  char *name, *source, *options;
  char *headers; /* extra headers as "name\0contents\0..." */
  size_t headers_len;
  enum item_state state;
  hm_status status;
  char *error;
  hm_cubin cubin;
};

static struct {
  pthread_mutex_t lock;
  pthread_cond_t changed;
  struct item *buckets[HM_JIT_BUCKETS];
  bool config_ready;
  hm_jit_config config;
  bool warned_store;
  hm_jit_stats stats;
} jit = {.lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER};

double hm_jit_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double hm_jit_thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* 64-bit multiply-xor hash over words: the in-process hit must stay in microseconds. */
static uint64_t hash_bytes(uint64_t h, const void *data, size_t len) {
  const unsigned char *p = data;
  for (; len >= 8; p += 8, len -= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  memcpy(&tail, p, len);
  h = (h ^ tail ^ ((uint64_t)len << 56)) * 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 31);
}

static uint64_t hash_string(uint64_t h, const char *s) {
  return s ? hash_bytes(h, s, strlen(s) + 1) : h * 31 + 7;
}

static uint64_t request_hash(const hm_kernel_source *src) {
  uint64_t h = hash_bytes(0x68756d6d696e67ull, &src->arch, sizeof(src->arch)) + src->arch_specific;
  h = hash_string(h, src->name);
  h = hash_string(h, src->source);
  h = hash_string(h, src->options);
  for (int i = 0; i < src->header_count; i++) {
    h = hash_string(h, src->headers[i].name);
    h = hash_string(h, src->headers[i].source);
  }
  return h;
}

static bool same_string(const char *a, const char *b) {
  if (a == NULL || b == NULL) return a == b;
  return strcmp(a, b) == 0;
}

static bool same_headers(const struct item *it, const hm_kernel_source *src) {
  const char *p = it->headers, *end = it->headers + it->headers_len;
  for (int i = 0; i < src->header_count; i++) {
    for (int part = 0; part < 2; part++) {
      const char *want = part ? src->headers[i].source : src->headers[i].name;
      size_t n = strlen(want) + 1;
      if ((size_t)(end - p) < n || memcmp(p, want, n) != 0) return false;
      p += n;
    }
  }
  return p == end;
}

static bool item_matches(const struct item *it, uint64_t hash, const hm_kernel_source *src) {
  return it->hash == hash && it->arch == src->arch && it->arch_specific == src->arch_specific &&
         same_string(it->name, src->name) && same_string(it->options, src->options) &&
         same_string(it->source, src->source) && same_headers(it, src);
}

static char *pack_headers(const hm_kernel_source *src, size_t *len) {
  size_t total = 0;
  for (int i = 0; i < src->header_count; i++)
    total += strlen(src->headers[i].name) + strlen(src->headers[i].source) + 2;
  char *blob = malloc(total + 1);
  if (blob == NULL) return NULL;
  char *p = blob;
  for (int i = 0; i < src->header_count; i++) {
    p = stpcpy(p, src->headers[i].name) + 1;
    p = stpcpy(p, src->headers[i].source) + 1;
  }
  *len = total;
  return blob;
}

static void item_free(struct item *it) {
  if (it == NULL) return;
  free(it->name);
  free(it->source);
  free(it->options);
  free(it->headers);
  free(it->error);
  free(it->cubin.data);
  free(it);
}

static struct item *item_new(uint64_t hash, const hm_kernel_source *src) {
  struct item *it = calloc(1, sizeof(*it));
  if (it == NULL) return NULL;
  it->hash = hash;
  it->arch = src->arch;
  it->arch_specific = src->arch_specific;
  it->name = strdup(src->name);
  it->source = strdup(src->source);
  it->options = src->options ? strdup(src->options) : NULL;
  it->headers = pack_headers(src, &it->headers_len);
  it->state = ITEM_IDLE;
  if (!it->name || !it->source || (src->options && !it->options) || !it->headers) {
    item_free(it);
    return NULL;
  }
  return it;
}

static void jit_cleanup(void) {
  pthread_mutex_lock(&jit.lock);
  for (int b = 0; b < HM_JIT_BUCKETS; b++) {
    while (jit.buckets[b]) {
      struct item *it = jit.buckets[b];
      jit.buckets[b] = it->next;
      item_free(it);
    }
  }
  jit.config_ready = false;
  jit.warned_store = false;
  memset(&jit.stats, 0, sizeof(jit.stats));
  pthread_mutex_unlock(&jit.lock);
}

static hm_status pick_compiler(hm_jit_config *c) {
  const char *name = hm_param_compiler();
  snprintf(c->cuda_home, sizeof(c->cuda_home), "%s", hm_param_cuda_home());
  char cccl[PATH_MAX + 16];
  struct stat st;
  snprintf(cccl, sizeof(cccl), "%s/include/cccl", c->cuda_home);
  c->cuda_home_has_cccl = stat(cccl, &st) == 0 && S_ISDIR(st.st_mode);
  if (strcmp(name, "nvrtc") == 0) {
    c->compiler = HM_JIT_NVRTC;
    return hm_nvrtc_identity(c->compiler_id, sizeof(c->compiler_id));
  }
  if (strcmp(name, "nvcc") == 0) {
    c->compiler = HM_JIT_NVCC;
    return hm_nvcc_identity(c->cuda_home, c->compiler_id, sizeof(c->compiler_id));
  }
  HM_FAIL(HM_INVALID_ARGUMENT, "HUMMING_COMPILER=%s: expected nvrtc or nvcc", name);
}

/* Read-write if the entry tree can be made, read-only if it is there, else off. */
static void pick_cache(hm_jit_config *c) {
  c->cache_mode = HM_CACHE_OFF;
  if (hm_cache_default_root(c->cache_root, sizeof(c->cache_root)) != HM_OK) {
    HM_WARN(CACHE, "no compile cache (%s); kernels are compiled in memory", hm_last_error());
    return;
  }
  char tree[PATH_MAX + 16];
  snprintf(tree, sizeof(tree), "%s/kernels", c->cache_root);
  if (hm_cache_prepare(c->cache_root) == HM_OK && access(tree, W_OK | X_OK) == 0) {
    c->cache_mode = HM_CACHE_READ_WRITE;
    HM_INFO(CACHE, "compile cache at %s", c->cache_root);
    return;
  }
  const char *why = hm_last_error();
  if (access(tree, R_OK | X_OK) == 0) c->cache_mode = HM_CACHE_READ_ONLY;
  HM_WARN(CACHE, "compile cache %s cannot be written (%s); %s, new kernels compiled in memory", c->cache_root,
          why[0] ? why : "no write permission", c->cache_mode ? "reading existing entries" : "not using it");
}

hm_status hm_jit_config_get(hm_jit_config *out) {
  pthread_mutex_lock(&jit.lock);
  hm_status ret = HM_OK;
  if (!jit.config_ready) {
    hm_jit_config c;
    memset(&c, 0, sizeof(c));
    HM_CHECK_GOTO(hm_registry_on_shutdown(jit_cleanup), done);
    HM_CHECK_GOTO(pick_compiler(&c), done);
    hm_jit_library_id(c.library_id, sizeof(c.library_id));
    hm_error_clear();
    pick_cache(&c);
    jit.config = c;
    jit.config_ready = true;
  }
  *out = jit.config;
done:
  pthread_mutex_unlock(&jit.lock);
  return ret;
}

void hm_jit_note_store_failure(const char *what) {
  pthread_mutex_lock(&jit.lock);
  bool first = !jit.warned_store;
  jit.warned_store = true;
  pthread_mutex_unlock(&jit.lock);
  if (first)
    HM_WARN(CACHE, "cannot write to the compile cache (%s); keeping kernels in memory", what);
  else
    HM_DEBUG(CACHE, "cannot write to the compile cache (%s)", what);
}

static void count_outcome(const hm_jit_outcome *o) {
  jit.stats.compiled += o->compiled;
  jit.stats.failed += o->failed;
  jit.stats.disk_hits += o->from_disk;
  jit.stats.broken += o->broken;
  jit.stats.compile_s += o->compile_s;
  jit.stats.compile_cpu_s += o->compile_cpu_s;
}

/* Resolves a pending item outside the lock, then publishes the result to waiters. */
static hm_status resolve_item(struct item *it, const hm_kernel_source *src, bool wait, bool *busy) {
  hm_jit_config cfg;
  hm_jit_outcome outcome = {0};
  hm_cubin cubin = {0};
  hm_status ret = hm_jit_config_get(&cfg);
  if (ret == HM_OK)
    ret = hm_jit_resolve(&cfg, src, wait ? HM_RESOLVE_WAIT : HM_RESOLVE_TRY, &cubin, &outcome);
  char *error = ret == HM_OK ? NULL : strdup(hm_last_error());
  pthread_mutex_lock(&jit.lock);
  count_outcome(&outcome);
  *busy = ret == HM_OK && outcome.busy;
  it->state = *busy ? ITEM_IDLE : ret == HM_OK ? ITEM_DONE : ITEM_FAILED;
  it->status = ret;
  free(it->error);
  it->error = error;
  if (ret == HM_OK && !*busy) it->cubin = cubin;
  pthread_cond_broadcast(&jit.changed);
  pthread_mutex_unlock(&jit.lock);
  return ret;
}

/* Repeats the resolver's failure to a thread that waited for it; called with the lock held. */
static hm_status fail_as_resolver(const struct item *it) {
  char error[1024];
  const char *prefix = hm_status_str(it->status);
  const char *msg = it->error ? it->error : "";
  if (strncmp(msg, prefix, strlen(prefix)) == 0 && strncmp(msg + strlen(prefix), ": ", 2) == 0)
    msg += strlen(prefix) + 2;
  snprintf(error, sizeof(error), "%s", msg);
  hm_status status = it->status;
  pthread_mutex_unlock(&jit.lock);
  HM_FAIL(status, "%s", error);
}

hm_status hm_jit_get_cubin(const hm_kernel_source *src, const hm_cubin **out) {
  bool busy = false;
  return hm_jit_find_cubin(src, true, out, &busy);
}

hm_status hm_jit_find_cubin(const hm_kernel_source *src, bool wait, const hm_cubin **out, bool *busy) {
  HM_CHECK_NOT_NULL(out);
  *out = NULL;
  *busy = false;
  HM_CHECK(hm_jit_check_source(src));
  uint64_t hash = request_hash(src);
  struct item **bucket = &jit.buckets[hash % HM_JIT_BUCKETS];
  pthread_mutex_lock(&jit.lock);
  struct item *it = *bucket;
  while (it && !item_matches(it, hash, src)) it = it->next;
  bool waited = false;
  while (it && it->state == ITEM_PENDING) {
    waited = true;
    pthread_cond_wait(&jit.changed, &jit.lock);
  }
  if (it && it->state == ITEM_DONE) {
    jit.stats.memory_hits++;
    *out = &it->cubin;
    pthread_mutex_unlock(&jit.lock);
    return HM_OK;
  }
  if (it && waited) return fail_as_resolver(it);
  /* New, idle, or failed on an earlier call: this thread resolves it, others wait. */
  if (it == NULL && (it = item_new(hash, src)) != NULL) {
    it->next = *bucket;
    *bucket = it;
  }
  if (it) it->state = ITEM_PENDING;
  pthread_mutex_unlock(&jit.lock);
  if (it == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "process table entry for kernel %s", src->name);
  HM_CHECK(resolve_item(it, src, wait, busy));
  if (!*busy) *out = &it->cubin;
  return HM_OK;
}

hm_status hm_jit_compile_uncached(const hm_kernel_source *src, hm_cubin *out) {
  HM_CHECK_NOT_NULL(out);
  memset(out, 0, sizeof(*out));
  hm_jit_config cfg;
  HM_CHECK(hm_jit_config_get(&cfg));
  hm_jit_outcome outcome;
  return hm_jit_resolve(&cfg, src, HM_RESOLVE_UNCACHED, out, &outcome);
}

void hm_jit_cubin_free(hm_cubin *cubin) {
  if (cubin == NULL) return;
  free(cubin->data);
  memset(cubin, 0, sizeof(*cubin));
}

hm_status hm_jit_describe(char *compiler, size_t compiler_len, char *cache_dir, size_t cache_len) {
  HM_CHECK_NOT_NULL(compiler);
  HM_CHECK_NOT_NULL(cache_dir);
  hm_jit_config cfg;
  HM_CHECK(hm_jit_config_get(&cfg));
  snprintf(compiler, compiler_len, "%s", cfg.compiler_id);
  snprintf(cache_dir, cache_len, "%s", cfg.cache_mode == HM_CACHE_OFF ? "" : cfg.cache_root);
  return HM_OK;
}

void hm_jit_get_stats(hm_jit_stats *out) {
  if (out == NULL) return;
  pthread_mutex_lock(&jit.lock);
  *out = jit.stats;
  pthread_mutex_unlock(&jit.lock);
}
