/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Source generation for the weight-only GEMM: a small translation unit that turns a
 * config into a constants struct, includes gemm_kernel.cuh and defines the extern "C"
 * entry point named by hm_gemm_config_name().
 */
#ifndef HM_GEMM_GEN_H
#define HM_GEMM_GEN_H

#include "kernels/gemm_config.h"
#include "kernels/jit.h"

typedef struct hm_gemm_source {
  char name[256];
  char *text;           /* owned; free with hm_gemm_source_free */
  hm_kernel_source src; /* points into name and text */
} hm_gemm_source;

/* Generates the kernel of a checked config for cfg->arch. */
hm_status hm_gemm_gen(const hm_gemm_config *cfg, hm_gemm_source *out);
/* Frees the text; a zeroed or already freed source is a no-op. */
void hm_gemm_source_free(hm_gemm_source *s);

#endif
