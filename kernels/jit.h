/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Run-time compilation of generated kernels and the per-node cubin cache.
 * A kernel is generated as one CUDA source that includes component headers from
 * kernels/ (the .cuh files, embedded in the library at build time); compiled with NVRTC (or nvcc
 * with HUMMING_COMPILER=nvcc) for one arch; cached on disk under HUMMING_CACHE_DIR,
 * keyed by SHA-256 over everything that affects the cubin; loaded into the engine's
 * context once per process.
 */
#ifndef HM_JIT_H
#define HM_JIT_H

#include "humming.h"

/* A header given with the source (generated, or a test's), beside the embedded kernels/ headers. */
typedef struct hm_kernel_header {
  const char *name;   /* what the source's #include names, a plain file name */
  const char *source; /* contents, NUL-terminated */
} hm_kernel_header;

/* What to compile. Strings are copied by the callee where it keeps them. */
typedef struct hm_kernel_source {
  const char *name;                /* extern "C" __global__ entry point */
  const char *source;              /* the generated translation unit */
  int arch;                        /* 75, 80, 86, 89, 90, 100, ...; 0 in hm_kernel_get: the device's */
  bool arch_specific;              /* compile for sm_XXa (wgmma, setmaxnreg, tcgen05) */
  const char *options;             /* extra options, space separated, or NULL; hashed as text */
  const hm_kernel_header *headers; /* extra headers, or NULL; hashed into the key like the rest */
  int header_count;
} hm_kernel_source;

/* A compiled kernel image (cubin bytes) and where it came from. */
typedef struct hm_cubin {
  void *data;
  size_t size;
  char key[65];       /* SHA-256 hex of the cache key */
  bool from_cache;    /* loaded from the cache dir rather than compiled by this process */
  double seconds;     /* what getting it cost the first time: the compile or the disk load */
  double cpu_seconds; /* CPU time of the compile; 0 when loaded */
} hm_cubin;

/* Compiles one kernel or finds it in the cache. The cubin stays owned by the JIT. */
hm_status hm_jit_get_cubin(const hm_kernel_source *src, const hm_cubin **out);
/*
 * Compiles many kernels on the thread pool (HUMMING_JIT_THREADS). outs[i] is NULL for a
 * failed one; the first failure's status is returned after all have finished.
 */
hm_status hm_jit_get_cubins(const hm_kernel_source *srcs, int count, const hm_cubin **outs);

/* Called after each kernel of a batch, from the compile threads but one call at a time. */
typedef void (*hm_jit_progress_fn)(int done, int total, void *user);

typedef struct hm_jit_batch {
  int threads;                 /* 0: HUMMING_JIT_THREADS (0 there: the cores) */
  hm_jit_progress_fn progress; /* or NULL */
  void *user;
} hm_jit_batch;

/* hm_jit_get_cubins with a thread count and a progress callback. */
hm_status hm_jit_get_cubins_ex(const hm_kernel_source *srcs, int count, const hm_jit_batch *batch,
                               const hm_cubin **outs);

/*
 * Compiles without the cache or the process table (benchmarks of the compiler itself);
 * out is the caller's, freed with hm_jit_cubin_free.
 */
hm_status hm_jit_compile_uncached(const hm_kernel_source *src, hm_cubin *out);
void hm_jit_cubin_free(hm_cubin *cubin);

/* What this process's JIT did since start (or the last hm_shutdown). */
typedef struct hm_jit_stats {
  uint64_t compiled;    /* compiler runs that produced a cubin */
  uint64_t failed;      /* compiler runs that did not */
  uint64_t disk_hits;   /* verified entries loaded from the cache dir */
  uint64_t memory_hits; /* requests answered by the process table */
  uint64_t broken;      /* cache entries that failed verification and were recompiled */
  double compile_s;     /* wall seconds in the compiler, all threads summed */
  double compile_cpu_s; /* CPU seconds of those compiles */
} hm_jit_stats;

void hm_jit_get_stats(hm_jit_stats *out);

/* The compiler in use ("nvrtc 13.0") and the cache dir ("" when kernels stay in memory). */
hm_status hm_jit_describe(char *compiler, size_t compiler_len, char *cache_dir, size_t cache_len);

/* "humming 0.1.0 build <commit> cache 1": what keeps library builds apart in the cache. */
void hm_jit_library_id(char *buf, size_t len);

/*
 * Reads a symbol's initial bytes from a cubin's ELF image (a __constant__ or __device__
 * variable with an initializer), on the host: no device needed. HM_INVALID_ARGUMENT if
 * the symbol is not there.
 */
hm_status hm_cubin_read_symbol(const hm_cubin *cubin, const char *symbol, void *buf, size_t size);

/* A kernel loaded in an engine's context. */
typedef struct hm_kernel hm_kernel;

typedef struct hm_launch_dims {
  unsigned grid[3];
  unsigned block[3];
  size_t shared_bytes; /* dynamic shared memory; raised above 48 KiB as needed */
  unsigned cluster[3]; /* 0s or 1s: no cluster */
} hm_launch_dims;

/* Compiles (or finds) and loads src for the engine's device; cached per engine context. */
hm_status hm_kernel_get(hm_engine *engine, const hm_kernel_source *src, hm_kernel **out);
/* Launches with kernel parameters args (array of pointers to each argument). */
hm_status hm_kernel_launch(hm_kernel *kernel, const hm_launch_dims *dims, void **args, hm_stream *stream);
/* Copies the module global `name` of a loaded kernel (exactly bytes long) to dst through
 * the calling thread's current context, once the caller has waited for the kernels that
 * write it; HM_UNSUPPORTED when the module has none. */
hm_status hm_kernel_read_global(const hm_kernel *kernel, const char *name, void *dst, size_t bytes);
/* Registers, static shared memory and max threads per block of a loaded kernel. */
hm_status hm_kernel_attributes(const hm_kernel *kernel, int *regs, int *static_shared, int *max_threads);

/*
 * Launch metadata a kernel may carry in its cubin, as a constant named after it:
 *   extern "C" __constant__ unsigned <name>_meta[8] =
 *       {HM_KERNEL_META_MAGIC, threads, shared_bytes, cluster_x, cluster_y, cluster_z, flags, 0};
 * hm_kernel_get reads it from the image: the dynamic shared memory limit is raised to
 * shared_bytes at load, a launch must use that many threads, and a launch with no
 * cluster of its own uses the kernel's. A kernel flagged HM_KERNEL_META_PDL executes
 * griddepcontrol.wait before it reads anything an earlier kernel may write, so it may be
 * launched with programmatic dependent launch (HUMMING_PDL).
 */
#define HM_KERNEL_META_MAGIC 0x686d6b6du /* "hmkm" */
#define HM_KERNEL_META_WORDS 8
#define HM_KERNEL_META_PDL 1u

typedef struct hm_kernel_meta {
  bool present;
  unsigned threads;
  unsigned shared_bytes;
  unsigned cluster[3];
  bool pdl; /* HM_KERNEL_META_PDL */
} hm_kernel_meta;

/* Reads <name>_meta from a cubin; present = false when the kernel has none. */
hm_status hm_cubin_kernel_meta(const hm_cubin *cubin, const char *name, hm_kernel_meta *out);
/* The metadata of a loaded kernel. */
hm_status hm_kernel_get_meta(const hm_kernel *kernel, hm_kernel_meta *out);

/* What ptxas gave a kernel, as its cubin records it. */
typedef struct hm_kernel_resources {
  unsigned registers;   /* a thread */
  unsigned local_bytes; /* stack frame a thread: register spills or local arrays, both slow */
} hm_kernel_resources;

/* Reads them from the cubin's .nv.info section, on the host: no device needed.
 * HM_INVALID_ARGUMENT if the cubin has no kernel of that name. */
hm_status hm_cubin_kernel_resources(const hm_cubin *cubin, const char *name, hm_kernel_resources *out);

#endif
