/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The reference GEMM on the host: the oracle of every GPU test. f32 accumulation,
 * multithreaded and cache-blocked; usable at N = K = 4096. Semantics of each layout are
 * those of hm_gemm_args in humming/layer.h; rows a layout does not cover are not written.
 */
#ifndef HM_REF_GEMM_H
#define HM_REF_GEMM_H

#include "humming.h"
#include "quant.h"

typedef struct hm_ref_gemm_problem {
  const hm_host_weights *w;  /* (E, N, K) */
  hm_dtype act;              /* type of a */
  hm_act_scale_kind act_scale;
  hm_dtype out;              /* F32, F16 or BF16 */
  const void *bias;          /* (E, N) in out type (f32 if out is F32), or NULL */
  hm_gemm_args args;         /* a, a_scale, c and metadata as host pointers */
  int threads;               /* 0 = the host backend's count */
} hm_ref_gemm_problem;

hm_status hm_ref_gemm(const hm_ref_gemm_problem *p);

#endif
