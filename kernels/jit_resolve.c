/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One kernel source to one cubin: options, headers and key; then the cache entry (a
 * lock-free read first, then under the entry's lock so only one process on the node
 * compiles it) or the compiler.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/cache.h"
#include "kernels/cache_file.h"
#include "kernels/cache_key.h"
#include "kernels/jit_compiler.h"
#include "kernels/jit_internal.h"
#include "log.h"

#define HM_MAX_OPTIONS 64

/* Everything derived from a source before the cache or compiler is asked. */
struct request {
  char arch[16];
  char *options[HM_MAX_OPTIONS];
  int option_count;
  hm_embed_file *extras;
  hm_header_set headers;
  char key[HM_SHA256_HEX];
  char entry_dir[PATH_MAX];
};

static const int known_arches[] = {75, 80, 86, 87, 89, 90, 100, 103, 110, 120, 121};

hm_status hm_jit_check_source(const hm_kernel_source *src) {
  HM_CHECK_NOT_NULL(src);
  HM_CHECK_NOT_NULL(src->name);
  HM_CHECK_NOT_NULL(src->source);
  size_t len = strlen(src->name);
  if (len == 0 || len > 200 ||
      strspn(src->name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != len)
    HM_FAIL(HM_INVALID_ARGUMENT, "kernel name '%.200s' is not a C identifier of at most 200 characters",
            src->name);
  bool known = false;
  for (size_t i = 0; i < HM_ARRAY_SIZE(known_arches); i++) known |= known_arches[i] == src->arch;
  if (!known)
    HM_FAIL(HM_INVALID_ARGUMENT, "kernel %s: arch %d is not one of sm_75..sm_121", src->name, src->arch);
  if (src->arch_specific && src->arch < 90)
    HM_FAIL(HM_INVALID_ARGUMENT, "kernel %s: sm_%da does not exist (arch-specific targets start at sm_90a)",
            src->name, src->arch);
  if (src->header_count < 0 || (src->header_count > 0 && src->headers == NULL))
    HM_FAIL(HM_INVALID_ARGUMENT, "kernel %s: header_count %d without headers", src->name, src->header_count);
  if (src->options && strstr(src->options, "-arch"))
    HM_FAIL(HM_INVALID_ARGUMENT, "kernel %s: options '%s' set the arch; use arch and arch_specific",
            src->name, src->options);
  return HM_OK;
}

static hm_status add_option(struct request *r, const char *text, size_t len) {
  if (r->option_count == HM_MAX_OPTIONS)
    HM_FAIL(HM_INVALID_ARGUMENT, "more than %d compiler options", HM_MAX_OPTIONS);
  char *copy = strndup(text, len);
  if (copy == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "compiler option");
  r->options[r->option_count++] = copy;
  return HM_OK;
}

static hm_status add_optionf(struct request *r, const char *fmt, const char *value) {
  char buf[PATH_MAX + 32];
  int n = snprintf(buf, sizeof(buf), fmt, value);
  if (n < 0 || (size_t)n >= sizeof(buf)) HM_FAIL(HM_INVALID_ARGUMENT, "compiler option too long: %s", value);
  return add_option(r, buf, (size_t)n);
}

/* The options both compilers share, then the compiler's own, then the caller's. */
static hm_status build_options(const hm_jit_config *cfg, const hm_kernel_source *src, struct request *r) {
  snprintf(r->arch, sizeof(r->arch), "sm_%d%s", src->arch, src->arch_specific ? "a" : "");
  HM_CHECK(add_optionf(r, "-arch=%s", r->arch));
  HM_CHECK(add_optionf(r, "%s", "-std=c++17"));
  HM_CHECK(add_optionf(r, "%s", "-lineinfo"));
  if (cfg->compiler == HM_JIT_NVRTC) {
    /* NVRTC has no toolkit include path of its own (cuda_bf16.h, cuda/std). */
    HM_CHECK(add_optionf(r, "%s", "-default-device"));
    HM_CHECK(add_optionf(r, "-I%s/include", cfg->cuda_home));
    if (cfg->cuda_home_has_cccl) HM_CHECK(add_optionf(r, "-I%s/include/cccl", cfg->cuda_home));
  }
  const char *p = src->options ? src->options : "";
  while (*p) {
    p += strspn(p, " \t\n");
    size_t len = strcspn(p, " \t\n");
    if (len) HM_CHECK(add_option(r, p, len));
    p += len;
  }
  return HM_OK;
}

static hm_status build_headers(const hm_kernel_source *src, struct request *r) {
  if (src->header_count > 0) {
    r->extras = calloc((size_t)src->header_count, sizeof(*r->extras));
    if (r->extras == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "%d extra headers", src->header_count);
    for (int i = 0; i < src->header_count; i++) {
      const hm_kernel_header *h = &src->headers[i];
      if (h->name == NULL || h->source == NULL || strchr(h->name, '/') || h->name[0] == '.')
        HM_FAIL(HM_INVALID_ARGUMENT, "kernel %s: extra header %d needs a plain file name and contents",
                src->name, i);
      r->extras[i] = (hm_embed_file){h->name, h->source, strlen(h->source)};
    }
  }
  return hm_header_set_resolve(src->source, r->extras, src->header_count, &r->headers);
}

static void request_free(struct request *r) {
  for (int i = 0; i < r->option_count; i++) free(r->options[i]);
  free(r->extras);
  hm_header_set_free(&r->headers);
  memset(r, 0, sizeof(*r));
}

static hm_status request_build(const hm_jit_config *cfg, const hm_kernel_source *src, struct request *r) {
  memset(r, 0, sizeof(*r));
  hm_status ret = HM_OK;
  HM_CHECK_GOTO(build_options(cfg, src, r), fail);
  HM_CHECK_GOTO(build_headers(src, r), fail);
  hm_cache_key_input in = {cfg->library_id, cfg->compiler_id, (const char *const *)r->options,
                           r->option_count, r->arch,          src->name,
                           src->source,     &r->headers};
  HM_CHECK_GOTO(hm_cache_key(&in, r->key), fail);
  if (cfg->cache_mode != HM_CACHE_OFF)
    HM_CHECK_GOTO(hm_cache_entry_dir(cfg->cache_root, r->key, r->entry_dir, sizeof(r->entry_dir)), fail);
  return HM_OK;
fail:
  request_free(r);
  return ret;
}

/* The line of a log that best says what went wrong: the first error, else the first line. */
static void first_error_line(const char *log, char *buf, size_t len) {
  const char *line = strstr(log, "error");
  if (line == NULL) line = log;
  while (line > log && line[-1] != '\n') line--;
  line += strspn(line, " \t\n");
  snprintf(buf, len, "%.*s", (int)strcspn(line, "\n"), line);
}

/*
 * A compile that succeeded but whose assembler reports a performance loss (ptxas's
 * "Potential Performance Loss", e.g. C7513: wgmma serialized because a register it reads
 * is written inside its pipeline stage) is a kernel several times slower than its tiling
 * promises: say so rather than run it silently, in every process that gets it (the one that
 * compiled it and those that load it from the cache), as for register spills.
 */
static void warn_performance_loss(const char *log, const char *kernel, const char *arch) {
  const char *line = strstr(log, "Performance Loss");
  if (line == NULL) return;
  while (line > log && line[-1] != '\n' && line[-1] != '(') line--;  /* from ptxas's "(C75..)" */
  if (line > log && line[-1] == '(') line--;
  HM_WARN(JIT, "kernel %s for %s compiled slow: %.*s", kernel, arch, (int)strcspn(line, "\n"), line);
}

/* The warning above for a kernel loaded from the cache, from its entry's compile log. */
static void warn_cached_performance_loss(const struct request *r, const char *kernel) {
  char path[PATH_MAX + 16];
  snprintf(path, sizeof(path), "%s/log.txt", r->entry_dir);
  void *log = NULL;
  size_t size = 0;
  bool missing = false;
  if (hm_cache_file_read(path, 1 << 20, &log, &size, &missing) == HM_OK && !missing)
    warn_performance_loss(log, kernel, r->arch);
  free(log);
}

/* Keeps a failed compile's log where the error message can point to it. */
static void keep_failure_log(const hm_jit_config *cfg, const hm_kernel_source *src, const struct request *r,
                             const hm_compile_output *co, bool store, char *path, size_t len) {
  hm_cache_entry entry = {src->source, co->command, co->log, NULL, 0};
  if (store && hm_cache_store(cfg->cache_root, r->key, cfg->library_id, &entry) == HM_OK) {
    snprintf(path, len, "%s/log.txt", r->entry_dir);
    return;
  }
  char name[96];
  snprintf(name, sizeof(name), "humming-%.16s.log", r->key);
  if (hm_cache_file_write(P_tmpdir, name, co->log, strlen(co->log), false) == HM_OK)
    snprintf(path, len, "%s/%s", P_tmpdir, name);
  else
    snprintf(path, len, "(not written: %s)", hm_last_error());
}

static hm_status run_compiler(const hm_jit_config *cfg, const hm_kernel_source *src, const struct request *r,
                              hm_compile_output *co) {
  hm_compile_job job = {src->name, src->source, &r->headers, (const char *const *)r->options,
                        r->option_count};
  if (cfg->compiler == HM_JIT_NVCC) return hm_nvcc_compile(cfg->cuda_home, &job, co);
  return hm_nvrtc_compile(&job, co);
}

static hm_status compile_to(const hm_jit_config *cfg, const hm_kernel_source *src, const struct request *r,
                            bool store, hm_cubin *out, hm_jit_outcome *outcome) {
  hm_compile_output co;
  HM_CHECK(run_compiler(cfg, src, r, &co));
  outcome->compile_s = co.seconds;
  outcome->compile_cpu_s = co.cpu_seconds;
  if (!co.ok) {
    outcome->failed = true;
    char path[PATH_MAX + 64], line[240];
    keep_failure_log(cfg, src, r, &co, store, path, sizeof(path));
    first_error_line(co.log, line, sizeof(line));
    hm_compile_output_free(&co);
    HM_FAIL(HM_NVRTC, "kernel %s failed to compile for %s with %s: %s; log: %s", src->name, r->arch,
            cfg->compiler_id, line, path);
  }
  outcome->compiled = true;
  warn_performance_loss(co.log, src->name, r->arch);
  HM_INFO(JIT, "compiled %s for %s in %.3f s (%.3f s CPU, %zu bytes, key %.16s)", src->name, r->arch,
          co.seconds, co.cpu_seconds, co.cubin_size, r->key);
  if (store) {
    hm_cache_entry entry = {src->source, co.command, co.log, co.cubin, co.cubin_size};
    if (hm_cache_store(cfg->cache_root, r->key, cfg->library_id, &entry) != HM_OK)
      hm_jit_note_store_failure(hm_last_error());
  }
  *out = (hm_cubin){
      .data = co.cubin, .size = co.cubin_size, .seconds = co.seconds, .cpu_seconds = co.cpu_seconds};
  memcpy(out->key, r->key, sizeof(out->key));
  co.cubin = NULL;
  hm_compile_output_free(&co);
  return HM_OK;
}

/* True on a verified hit (out filled, the entry's performance note said); *broken says an
 * entry was there but bad. */
static bool try_load(const hm_jit_config *cfg, const struct request *r, const char *kernel, hm_cubin *out,
                     bool *broken, char *why, size_t why_len) {
  hm_cache_lookup result = HM_CACHE_MISS;
  void *data = NULL;
  size_t size = 0;
  *broken = false;
  if (hm_cache_load(cfg->cache_root, r->key, cfg->library_id, &data, &size, &result, why, why_len) != HM_OK)
    return false;
  *broken = result == HM_CACHE_BROKEN;
  if (result != HM_CACHE_HIT) return false;
  *out = (hm_cubin){.data = data, .size = size, .from_cache = true};
  memcpy(out->key, r->key, sizeof(out->key));
  warn_cached_performance_loss(r, kernel);
  return true;
}

static hm_status resolve_cached(const hm_jit_config *cfg, const hm_kernel_source *src,
                                const struct request *r, bool wait, hm_cubin *out, hm_jit_outcome *outcome) {
  char why[512];
  bool broken = false;
  double start = hm_jit_now_s();
  if (try_load(cfg, r, src->name, out, &broken, why, sizeof(why))) {
    out->seconds = hm_jit_now_s() - start;
    outcome->from_disk = true;
    return HM_OK;
  }
  if (cfg->cache_mode == HM_CACHE_READ_ONLY) return compile_to(cfg, src, r, false, out, outcome);
  int fd = -1;
  if (hm_cache_lock(cfg->cache_root, r->key, wait, &fd, &outcome->busy) != HM_OK) {
    hm_jit_note_store_failure(hm_last_error());
    return compile_to(cfg, src, r, false, out, outcome);
  }
  if (outcome->busy) return HM_OK;
  /* Whoever held the lock may have just written the entry: look again under it. */
  start = hm_jit_now_s();
  hm_status ret = HM_OK;
  if (try_load(cfg, r, src->name, out, &broken, why, sizeof(why))) {
    out->seconds = hm_jit_now_s() - start;
    outcome->from_disk = true;
  } else {
    if (broken) HM_WARN(CACHE, "cache entry %s is broken (%s); recompiling %s", r->entry_dir, why, src->name);
    outcome->broken = broken;
    ret = compile_to(cfg, src, r, true, out, outcome);
  }
  hm_cache_unlock(fd);
  return ret;
}

hm_status hm_jit_resolve(const hm_jit_config *cfg, const hm_kernel_source *src, hm_jit_resolve_mode mode,
                         hm_cubin *out, hm_jit_outcome *outcome) {
  HM_CHECK(hm_jit_check_source(src));
  memset(outcome, 0, sizeof(*outcome));
  struct request r;
  HM_CHECK(request_build(cfg, src, &r));
  hm_status ret;
  if (mode != HM_RESOLVE_UNCACHED && cfg->cache_mode != HM_CACHE_OFF)
    ret = resolve_cached(cfg, src, &r, mode == HM_RESOLVE_WAIT, out, outcome);
  else
    ret = compile_to(cfg, src, &r, false, out, outcome);
  request_free(&r);
  return ret;
}
