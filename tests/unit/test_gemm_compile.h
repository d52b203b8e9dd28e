/* SPDX-License-Identifier: Apache-2.0 */
/* What the NVRTC compile tests of generated kernels share: compile a batch, check it, free it. */
#ifndef HM_TEST_GEMM_COMPILE_H
#define HM_TEST_GEMM_COMPILE_H

#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "hm_swap8_tunings.h"
#include "hm_test.h"
#include "kernels/gemm_config_w8a8.h"
#include "kernels/gemm_gen.h"
#include "kernels/gemm_select.h"
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

/* Adds the transform of one 128x128 expert: weight codes with scales per group (0: per
 * channel), for activations act. */
static inline void tg_add_transform_128(tg_batch *b, hm_dtype weight, hm_dtype scale, int group, hm_dtype act,
                                        int arch) {
  const hm_transform_desc d = {.weight = weight,
                               .scale = scale,
                               .act = act,
                               .group = group,
                               .n = 128,
                               .k = 128,
                               .experts = 1,
                               .arch = arch,
                               .w4_f16 = hm_w4a8_f16_codes(weight, act, arch)};
  tg_add_transform(b, &d);
}

/* The plan of a layer's GEMM type on arch. */
static inline hm_gemm_plan tg_plan_of(const hm_layer_config *lc, hm_gemm_type type, int arch) {
  hm_gemm_config base;
  HM_ASSERT_OK(hm_gemm_config_from_layer(lc, type, arch, &base));
  hm_gemm_plan plan;
  HM_ASSERT_OK(hm_gemm_plan_make(&base, &plan));
  return plan;
}

/* Adds the plans of the GEMM types a layer takes on arch (dense alone, or the three MoE
 * ones): each entry of type own's, the decode (first) and large-M (last) entries of the others. */
static inline void tg_add_layer_plans(tg_batch *b, const hm_layer_config *lc, hm_gemm_type own, int arch) {
  for (int t = 0; t < 4; t++) {
    if ((t == HM_GEMM_DENSE) != (lc->experts == 1)) continue;
    const hm_gemm_plan plan = tg_plan_of(lc, (hm_gemm_type)t, arch);
    for (int j = 0; j < (t == (int)own ? plan.count : 1); j++) tg_add_gemm(b, &plan.cfg[j]);
    if (t != (int)own) tg_add_gemm(b, &plan.cfg[plan.count - 1]);
  }
}

/* Adds the swapped 8-row tunings the device tests force (hm_swap8_tunings.h) on GEMM type
 * `type` of layer lc, each checked first: they must be legal for every W8A8 format. */
static inline void tg_add_swap8(tg_batch *b, const hm_layer_config *lc, hm_gemm_type type, int arch) {
  hm_gemm_config cfg;
  HM_ASSERT_OK(hm_gemm_config_from_layer(lc, type, arch, &cfg));
  for (size_t i = 0; i < HM_ARRAY_SIZE(hm_swap8_tunings); i++) {
    cfg.tuning = hm_swap8_tunings[i];
    HM_ASSERT_OK(hm_gemm_config_check(&cfg));
    tg_add_gemm(b, &cfg);
  }
}

/* Compiles count generated sources (through the cache), names the first failures, asserts
 * every cubin came back non-empty, and frees the sources. what names the batch. */
static inline void tg_compile_all(hm_gemm_source *src, int count, const char *what) {
  hm_kernel_source *srcs = calloc((unsigned)count, sizeof(*srcs));
  const hm_cubin **outs = calloc((unsigned)count, sizeof(*outs));
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
