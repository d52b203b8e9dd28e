/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Private to the JIT: the settings read once per process, and resolution of one
 * kernel source to a cubin (key, disk cache, compiler) without the process table.
 */
#ifndef HM_JIT_INTERNAL_H
#define HM_JIT_INTERNAL_H

#include <limits.h>
#include <stdbool.h>

#include "kernels/jit.h"

typedef enum hm_jit_compiler_kind { HM_JIT_NVRTC = 0, HM_JIT_NVCC } hm_jit_compiler_kind;

typedef enum hm_cache_mode {
  HM_CACHE_OFF = 0,   /* no usable cache dir: compile in memory */
  HM_CACHE_READ_ONLY, /* entries can be read but not written */
  HM_CACHE_READ_WRITE
} hm_cache_mode;

typedef struct hm_jit_config {
  hm_jit_compiler_kind compiler;
  char compiler_id[256];
  char cuda_home[PATH_MAX];
  bool cuda_home_has_cccl; /* CUDA 13 keeps libcu++ under include/cccl */
  char library_id[256];
  hm_cache_mode cache_mode;
  char cache_root[PATH_MAX];
} hm_jit_config;

/* How resolve may use the cache. */
typedef enum hm_jit_resolve_mode {
  HM_RESOLVE_WAIT = 0, /* wait while another process compiles the kernel */
  HM_RESOLVE_TRY,      /* report busy instead of waiting, to do other kernels first */
  HM_RESOLVE_UNCACHED  /* compile in memory; neither look up nor store */
} hm_jit_resolve_mode;

/* What resolving one source did, for the process's stats. */
typedef struct hm_jit_outcome {
  bool busy; /* HM_RESOLVE_TRY found another writer: nothing done, out untouched */
  bool compiled;
  bool failed;
  bool from_disk;
  bool broken;
  double compile_s;
  double compile_cpu_s;
} hm_jit_outcome;

/* The settings, read on first use (HUMMING_COMPILER, HUMMING_CUDA_HOME, the cache dir). */
hm_status hm_jit_config_get(hm_jit_config *out);
/* Warns once per process that the cache could not take an entry; the kernel stays in memory. */
void hm_jit_note_store_failure(const char *what);
/*
 * hm_jit_get_cubin, but with wait false a kernel another process is compiling is left
 * for later: *busy is set and *out stays NULL (a batch does other kernels meanwhile).
 */
hm_status hm_jit_find_cubin(const hm_kernel_source *src, bool wait, const hm_cubin **out, bool *busy);
/* Checks a source's fields (name, arch, options) before anything is hashed. */
hm_status hm_jit_check_source(const hm_kernel_source *src);
/*
 * Finds src in the cache dir or compiles it (then stores it), per the cache mode and
 * mode. out->data is malloc'd.
 */
hm_status hm_jit_resolve(const hm_jit_config *cfg, const hm_kernel_source *src, hm_jit_resolve_mode mode,
                         hm_cubin *out, hm_jit_outcome *outcome);

#endif
