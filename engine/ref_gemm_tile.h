/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One task of the reference GEMM: a block of plan rows of one expert times a tile of
 * that expert's B rows. Private to ref_gemm*.c.
 */
#ifndef HM_REF_GEMM_TILE_H
#define HM_REF_GEMM_TILE_H

#include <stddef.h>
#include <stdint.h>

#include "ref_gemm.h"
#include "ref_gemm_plan.h"

/* B rows dequantized together: 32 rows of K = 4096 in f32 stay in L2. */
#define HM_REF_TILE_N 32
/* Plan rows multiplied with one B tile before the tile is used for the next block. */
#define HM_REF_BLOCK_ROWS 128
/* K slab of the micro-kernel, so its rows of A and B stay in L1 across the tile. */
#define HM_REF_BLOCK_K 512
/* Plan rows whose f32 activations are held at once: bounds memory at any M. */
#define HM_REF_WAVE_ROWS 2048
/* Partial sums per output; K is zero padded to a multiple of it. */
#define HM_REF_LANES 4
#define HM_REF_ALIGN 64

typedef struct hm_ref_task {
  int64_t expert;
  int64_t n0;     /* first B row of the tile */
  int64_t r0, r1; /* plan rows [r0, r1), all of the expert */
} hm_ref_task;

/* A worker's buffers, and which B tile its tile buffer holds (to skip reloading it). */
typedef struct hm_ref_scratch {
  float *tile; /* (HM_REF_TILE_N, k_pad) */
  float *acc;  /* lane sums of a block: HM_REF_BLOCK_ROWS x HM_REF_TILE_N x HM_REF_LANES */
  float *bias; /* (HM_REF_TILE_N) */
  float *out;  /* (HM_REF_TILE_N) one finished row of the tile */
  int64_t tile_expert, tile_n0;
} hm_ref_scratch;

typedef struct hm_ref_job {
  const hm_ref_gemm_problem *p;
  hm_ref_plan plan;
  int64_t n, k, k_pad;
  int64_t a_first; /* first plan row of the current wave */
  float *a_f32;    /* (HM_REF_WAVE_ROWS, k_pad) the wave's plan rows of A in f32, zero padded */
  hm_ref_task *tasks;
  int64_t task_count;
  int workers;
  hm_ref_scratch *scratch; /* (workers) */
} hm_ref_job;

static inline size_t hm_ref_round_up(size_t x, size_t to) {
  return (x + to - 1) / to * to;
}

hm_status hm_ref_scratch_init(hm_ref_scratch *s, int64_t k_pad);
void hm_ref_scratch_free(hm_ref_scratch *s);
/* Computes and writes the C rows of one task. */
hm_status hm_ref_tile_run(const hm_ref_job *job, const hm_ref_task *task, hm_ref_scratch *s);

#endif
