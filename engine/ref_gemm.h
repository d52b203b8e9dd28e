/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The reference GEMM on the host: the oracle of every GPU test. f32 accumulation,
 * multithreaded and cache-blocked; usable at N = K = 4096. Semantics of each layout are
 * those of hm_gemm_args in humming/layer.h; rows a layout does not cover are not written.
 * Each output element is reduced in a fixed order, so the result does not depend on
 * the thread count or on which rows share a call.
 */
#ifndef HM_REF_GEMM_H
#define HM_REF_GEMM_H

#include "humming.h"
#include "quant.h"

typedef struct hm_ref_gemm_problem {
  const hm_host_weights *w; /* (E, N, K); the dense layout uses expert 0 */
  hm_dtype act;             /* type of a: F32, F16, BF16 (no scales), F8E4M3 or I8 (scaled) */
  hm_act_scale_kind act_scale;
  hm_dtype out;      /* F32, F16 or BF16; rounded to nearest even */
  const void *bias;  /* (E, N) in out type (f32 if out is F32), or NULL; added before topk_weights */
  hm_gemm_args args; /* a, a_scale, c and metadata as host pointers */
  int threads;       /* 0 = the host backend's count (hm_parallel_threads) */
} hm_ref_gemm_problem;

/* Computes args.c; HM_INVALID_ARGUMENT naming the bad value for any inconsistent input. */
hm_status hm_ref_gemm(const hm_ref_gemm_problem *p);

#endif
