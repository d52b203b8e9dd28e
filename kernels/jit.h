/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Run-time compilation of generated kernels and the per-node cubin cache.
 * A kernel is generated as one CUDA source that includes component headers from
 * kernels/*.cuh (embedded in the library at build time); compiled with NVRTC (or nvcc
 * with HUMMING_COMPILER=nvcc) for one arch; cached on disk under HUMMING_CACHE_DIR,
 * keyed by SHA-256 over everything that affects the cubin; loaded into the engine's
 * context once per process.
 */
#ifndef HM_JIT_H
#define HM_JIT_H

#include "humming.h"

/* What to compile. Strings are copied by the callee where it keeps them. */
typedef struct hm_kernel_source {
  const char *name;          /* extern "C" __global__ entry point */
  const char *source;        /* the generated translation unit */
  int arch;                  /* 75, 80, 86, 89, 90, 100 */
  bool arch_specific;        /* compile for sm_XXa (wgmma, setmaxnreg, tcgen05) */
  const char *options;       /* extra compiler options, space separated, or NULL */
} hm_kernel_source;

/* A compiled kernel image (cubin bytes) and where it came from. */
typedef struct hm_cubin {
  void *data;
  size_t size;
  char key[65];        /* SHA-256 hex of the cache key */
  bool from_cache;     /* found on disk (or in the process table) rather than compiled */
} hm_cubin;

/* Compiles one kernel or finds it in the cache. The cubin stays owned by the JIT. */
hm_status hm_jit_get_cubin(const hm_kernel_source *src, const hm_cubin **out);
/*
 * Compiles many kernels on the thread pool (HUMMING_JIT_THREADS). outs[i] is NULL for a
 * failed one; the first failure's status is returned after all have finished.
 */
hm_status hm_jit_get_cubins(const hm_kernel_source *srcs, int count, const hm_cubin **outs);

/* A kernel loaded in an engine's context. */
typedef struct hm_kernel hm_kernel;

typedef struct hm_launch_dims {
  unsigned grid[3];
  unsigned block[3];
  size_t shared_bytes;  /* dynamic shared memory; raised above 48 KiB as needed */
  unsigned cluster[3];  /* 0s or 1s: no cluster */
} hm_launch_dims;

/* Compiles (or finds) and loads src for the engine's device; cached per engine context. */
hm_status hm_kernel_get(hm_engine *engine, const hm_kernel_source *src, hm_kernel **out);
/* Launches with kernel parameters args (array of pointers to each argument). */
hm_status hm_kernel_launch(hm_kernel *kernel, const hm_launch_dims *dims, void **args, hm_stream *stream);
/* Registers, static shared memory and max threads per block of a loaded kernel. */
hm_status hm_kernel_attributes(const hm_kernel *kernel, int *regs, int *static_shared, int *max_threads);

#endif
