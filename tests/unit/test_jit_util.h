/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers of the JIT and cache tests: a family of small real kernels and private cache dirs. */
#ifndef TEST_JIT_UTIL_H
#define TEST_JIT_UTIL_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hm_test.h"
#include "kernels/jit.h"

/* A test-only component: a vectorized bf16 axpy, y = a*x + y, VEC elements a thread. */
static const char tj_axpy_header[] =
    "#pragma once\n"
    "#include <cuda_bf16.h>\n"
    "template <int VEC>\n"
    "__device__ void hm_axpy(const __nv_bfloat16 *x, __nv_bfloat16 *y, float a, long long n) {\n"
    "  long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * VEC;\n"
    "#pragma unroll\n"
    "  for (int v = 0; v < VEC; v++)\n"
    "    if (i + v < n) y[i + v] = __float2bfloat16(a * __bfloat162float(x[i + v]) + __bfloat162float(y[i + "
    "v]));\n"
    "}\n";

static const hm_kernel_header tj_axpy_headers[] = {{"hm_test_axpy.cuh", tj_axpy_header}};

typedef struct tj_axpy {
  char name[64];
  char text[1024];
  hm_kernel_source src;
} tj_axpy;

/* Variant `variant` of the family: its own name and vector width, for one arch. */
static inline void tj_axpy_make(tj_axpy *k, int variant, int arch, bool arch_specific) {
  int vec = 1 << (variant % 4);
  snprintf(k->name, sizeof(k->name), "hm_axpy_%d_v%d", variant, vec);
  snprintf(
      k->text, sizeof(k->text),
      "#include \"hm_test_axpy.cuh\"\n"
      "extern \"C\" __constant__ unsigned %.63s_meta[8] = {0x%xu, 256, 0, 1, 1, 1, 0, 0};\n"
      "extern \"C\" __constant__ int hm_axpy_vec = %d;\n"
      "extern \"C\" __global__ void __launch_bounds__(256) %.63s(const __nv_bfloat16 *x, __nv_bfloat16 *y,\n"
      "                                                   float a, long long n) {\n"
      "  hm_axpy<%d>(x, y, a, n);\n"
      "}\n",
      k->name, HM_KERNEL_META_MAGIC, vec, k->name, vec);
  k->src = (hm_kernel_source){.name = k->name,
                              .source = k->text,
                              .arch = arch,
                              .arch_specific = arch_specific,
                              .headers = tj_axpy_headers,
                              .header_count = 1};
}

/* Two kernels of one source: hm_spill, held to 32 registers (1024 threads, two blocks an
 * SM) with 40 values live, which ptxas must spill, and hm_fits, which needs no stack. */
static const char tj_spill_source[] =
    "extern \"C\" __global__ void __launch_bounds__(1024, 2) hm_spill(const float *x, float *y) {\n"
    "  float v[40];\n"
    "#pragma unroll\n"
    "  for (int i = 0; i < 40; i++) v[i] = x[threadIdx.x + 1024 * i];\n"
    "  float s = 0;\n"
    "#pragma unroll\n"
    "  for (int j = 0; j < 40; j++)\n"
    "#pragma unroll\n"
    "    for (int i = 0; i < 40; i++) s += v[i] * v[(i * 7 + j) % 40];\n"
    "  y[threadIdx.x] = s;\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(256) hm_fits(const float *x, float *y) {\n"
    "  y[threadIdx.x] = 2.0f * x[threadIdx.x];\n"
    "}\n";

static inline int tj_remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static inline void tj_remove_tree(const char *dir) {
  if (dir && dir[0]) nftw(dir, tj_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Makes a new empty cache dir under /tmp, points HUMMING_CACHE_DIR at it, resets the JIT. */
static inline void tj_fresh_cache(char *dir, size_t len) {
  tj_remove_tree(dir);
  snprintf(dir, len, "/tmp/hm-test-jit-XXXXXX");
  assert_non_null(mkdtemp(dir));
  setenv("HUMMING_CACHE_DIR", dir, 1);
  hm_shutdown();
}

/* The cache dir of the running test program: made by tj_setup, removed by tj_teardown. */
static char tj_cache_dir[256];

/* cmocka setup: a fresh cache dir and the default compiler. */
static inline int tj_setup(void **state) {
  (void)state;
  unsetenv("HUMMING_COMPILER");
  tj_fresh_cache(tj_cache_dir, sizeof(tj_cache_dir));
  return 0;
}

/* cmocka teardown: forget the JIT's process state and remove the cache dir. */
static inline int tj_teardown(void **state) {
  (void)state;
  unsetenv("HUMMING_COMPILER");
  hm_shutdown();
  tj_remove_tree(tj_cache_dir);
  tj_cache_dir[0] = '\0';
  return 0;
}

/* Path of a file of the entry of key. */
static inline void tj_entry_file(const char *dir, const char *key, const char *file, char *out, size_t len) {
  snprintf(out, len, "%s/kernels/%.2s/%s/%s", dir, key, key, file);
}

static inline bool tj_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

#endif
