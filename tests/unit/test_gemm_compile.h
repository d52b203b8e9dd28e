/* SPDX-License-Identifier: Apache-2.0 */
/* What the NVRTC compile tests of generated kernels share: compile a batch, check it, free it. */
#ifndef HM_TEST_GEMM_COMPILE_H
#define HM_TEST_GEMM_COMPILE_H

#include <stdio.h>
#include <stdlib.h>

#include "hm_test.h"
#include "kernels/gemm_gen.h"
#include "kernels/transform.h"

#define TG_BATCH_MAX 1024

/* Generated sources to compile in one batch (static: a source is large). */
typedef struct tg_batch {
  hm_gemm_source src[TG_BATCH_MAX];
  int count;
} tg_batch;

/* Takes the source just generated into slot count; sm_90 sources compile for sm_90a, the
 * target the CI check names, whatever instructions they use. */
static inline void tg_take(tg_batch *b, int arch) {
  b->src[b->count].src.arch_specific = arch >= 90;
  b->count++;
}

static inline void tg_add_gemm(tg_batch *b, const hm_gemm_config *cfg) {
  assert_true(b->count < TG_BATCH_MAX);
  HM_ASSERT_OK(hm_gemm_gen(cfg, &b->src[b->count]));
  tg_take(b, cfg->arch);
}

static inline void tg_add_transform(tg_batch *b, const hm_transform_desc *d) {
  assert_true(b->count < TG_BATCH_MAX);
  HM_ASSERT_OK(hm_transform_gen(d, &b->src[b->count]));
  tg_take(b, d->arch);
}

/* Compiles count generated sources (through the cache), names the first failures, asserts
 * every cubin came back non-empty, and frees the sources. what names the batch. */
static inline void tg_compile_all(hm_gemm_source *src, int count, const char *what) {
  hm_kernel_source *srcs = calloc((size_t)count, sizeof(*srcs));
  const hm_cubin **outs = calloc((size_t)count, sizeof(*outs));
  assert_non_null(srcs);
  assert_non_null(outs);
  for (int i = 0; i < count; i++) srcs[i] = src[i].src;
  hm_status st = hm_jit_get_cubins(srcs, count, outs);
  int failed = 0;
  for (int i = 0; i < count; i++)
    if (outs[i] == NULL && failed++ < 5) printf("FAILED: %s sm_%d\n", srcs[i].name, srcs[i].arch);
  printf("%d %s kernels compiled, %d failed\n", count, what, failed);
  if (st != HM_OK) fail_msg("compile failed: %s", hm_last_error());
  for (int i = 0; i < count; i++) {
    assert_true(outs[i]->size > 0);
    hm_gemm_source_free(&src[i]);
  }
  free(srcs);
  free(outs);
}

#endif
