/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The arithmetic of the reference GEMM. Every output element is the same function of
 * its A row and B row: HM_REF_LANES partial sums (lane l takes k = l mod LANES, k
 * ascending), added in a fixed tree, then bias, then the top-k weight. Blocking over
 * rows, columns and K only changes when those steps run, never their order.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "numfmt.h"
#include "ref_gemm_tile.h"

/* Rows of A and of B one micro-kernel call covers. */
#define MR 2
#define NR 4
#define GROUP (MR * NR * HM_REF_LANES)

_Static_assert(HM_REF_TILE_N % NR == 0, "a tile holds whole groups of NR B rows");
_Static_assert(HM_REF_BLOCK_ROWS % MR == 0, "a block holds whole pairs of A rows");
_Static_assert(HM_REF_BLOCK_K % HM_REF_LANES == 0, "a K slab holds whole lane groups");

static float *alloc_floats(size_t count) {
  return aligned_alloc(HM_REF_ALIGN, hm_ref_round_up(count * sizeof(float), HM_REF_ALIGN));
}

hm_status hm_ref_scratch_init(hm_ref_scratch *s, int64_t k_pad) {
  s->tile = alloc_floats((size_t)HM_REF_TILE_N * (size_t)k_pad);
  s->acc = alloc_floats((size_t)HM_REF_BLOCK_ROWS * HM_REF_TILE_N * HM_REF_LANES);
  s->bias = alloc_floats(HM_REF_TILE_N);
  s->out = alloc_floats(HM_REF_TILE_N);
  s->tile_expert = -1;
  if (s->tile == NULL || s->acc == NULL || s->bias == NULL || s->out == NULL)
    HM_FAIL(HM_OUT_OF_MEMORY, "reference GEMM scratch for K = %lld", (long long)k_pad);
  return HM_OK;
}

void hm_ref_scratch_free(hm_ref_scratch *s) {
  if (s == NULL) return;
  free(s->tile);
  free(s->acc);
  free(s->bias);
  free(s->out);
  memset(s, 0, sizeof(*s));
}

/*
 * acc (MR x NR x LANES) += lane products of rows a0, a1 with the NR rows at b over
 * [0, len). Plain loops over a local copy: the compiler keeps it in vector registers.
 */
static void kernel_2x4(const float *restrict a0, const float *restrict a1, const float *restrict b,
                       int64_t b_stride, int64_t len, float *restrict acc) {
  const float *restrict b0 = b;
  const float *restrict b1 = b + b_stride;
  const float *restrict b2 = b + 2 * b_stride;
  const float *restrict b3 = b + 3 * b_stride;
  float c[GROUP];
  memcpy(c, acc, sizeof(c));
  for (int64_t k = 0; k < len; k += HM_REF_LANES) {
    for (int l = 0; l < HM_REF_LANES; l++) {
      float x0 = a0[k + l], x1 = a1[k + l];
      float y0 = b0[k + l], y1 = b1[k + l], y2 = b2[k + l], y3 = b3[k + l];
      c[0 * HM_REF_LANES + l] += x0 * y0;
      c[1 * HM_REF_LANES + l] += x0 * y1;
      c[2 * HM_REF_LANES + l] += x0 * y2;
      c[3 * HM_REF_LANES + l] += x0 * y3;
      c[4 * HM_REF_LANES + l] += x1 * y0;
      c[5 * HM_REF_LANES + l] += x1 * y1;
      c[6 * HM_REF_LANES + l] += x1 * y2;
      c[7 * HM_REF_LANES + l] += x1 * y3;
    }
  }
  memcpy(acc, c, sizeof(c));
}

/* The lane sums of one output, added pairwise in a fixed tree. */
static float reduce_lanes(const float *lanes) {
  float t[HM_REF_LANES];
  memcpy(t, lanes, sizeof(t));
  for (int width = HM_REF_LANES / 2; width >= 1; width /= 2)
    for (int l = 0; l < width; l++) t[l] += t[l + width];
  return t[0];
}

static int64_t tile_cols(const hm_ref_job *job, const hm_ref_task *task) {
  int64_t left = job->n - task->n0;
  return left < HM_REF_TILE_N ? left : HM_REF_TILE_N;
}

/* Dequantizes the task's B rows (and bias) unless the worker holds them already. */
static hm_status load_tile(const hm_ref_job *job, const hm_ref_task *task, hm_ref_scratch *s) {
  if (s->tile_expert == task->expert && s->tile_n0 == task->n0) return HM_OK;
  const hm_ref_gemm_problem *p = job->p;
  int64_t cols = tile_cols(job, task), k = job->k, k_pad = job->k_pad;
  s->tile_expert = -1;
  HM_CHECK(hm_dequantize_rows(p->w, task->expert, task->n0, cols, s->tile));
  /* Spread rows from stride k to k_pad, last row first so no row is overwritten unread. */
  for (int64_t i = cols - 1; k_pad != k && i >= 0; i--) {
    memmove(s->tile + i * k_pad, s->tile + i * k, (size_t)k * sizeof(float));
    memset(s->tile + i * k_pad + k, 0, (size_t)(k_pad - k) * sizeof(float));
  }
  int64_t padded = (int64_t)hm_ref_round_up((size_t)cols, NR);
  memset(s->tile + cols * k_pad, 0, (size_t)((padded - cols) * k_pad) * sizeof(float));
  for (int64_t j = 0; j < cols; j++)
    s->bias[j] = p->bias ? hm_load_f32(p->out, p->bias, task->expert * job->n + task->n0 + j) : 0.0f;
  s->tile_expert = task->expert;
  s->tile_n0 = task->n0;
  return HM_OK;
}

/* Finishes plan row r0 + i of the task (bias, top-k weight) and stores it in C's type. */
static hm_status write_row(const hm_ref_job *job, const hm_ref_task *task, hm_ref_scratch *s, int64_t i,
                           int64_t quads) {
  const hm_ref_gemm_problem *p = job->p;
  int64_t r = task->r0 + i, cols = tile_cols(job, task);
  const float *pair = s->acc + (i / MR) * quads * GROUP;
  for (int64_t j = 0; j < cols; j++) {
    const float *lanes = pair + (j / NR) * GROUP + ((i % MR) * NR + j % NR) * HM_REF_LANES;
    float v = reduce_lanes(lanes);
    if (p->bias != NULL) v += s->bias[j];
    if (job->plan.row_weight != NULL) v *= job->plan.row_weight[r];
    s->out[j] = v;
  }
  size_t out_bytes = (size_t)hm_dtype_bits(p->out) / 8;
  uint8_t *dst = (uint8_t *)p->args.c + (size_t)(job->plan.c_row[r] * job->n + task->n0) * out_bytes;
  return hm_convert_from_f32(p->out, s->out, dst, cols);
}

hm_status hm_ref_tile_run(const hm_ref_job *job, const hm_ref_task *task, hm_ref_scratch *s) {
  HM_CHECK(load_tile(job, task, s));
  int64_t rows = task->r1 - task->r0, k_pad = job->k_pad;
  int64_t pairs = (rows + MR - 1) / MR;
  int64_t quads = (tile_cols(job, task) + NR - 1) / NR;
  memset(s->acc, 0, (size_t)(pairs * quads * GROUP) * sizeof(float));
  for (int64_t kb = 0; kb < k_pad; kb += HM_REF_BLOCK_K) {
    int64_t len = k_pad - kb < HM_REF_BLOCK_K ? k_pad - kb : HM_REF_BLOCK_K;
    for (int64_t pr = 0; pr < pairs; pr++) {
      const float *a0 = job->a_f32 + (task->r0 - job->a_first + pr * MR) * k_pad + kb;
      /* An odd last row pairs with itself; the duplicate's sums are never read. */
      const float *a1 = pr * MR + 1 < rows ? a0 + k_pad : a0;
      for (int64_t q = 0; q < quads; q++)
        kernel_2x4(a0, a1, s->tile + q * NR * k_pad + kb, k_pad, len, s->acc + (pr * quads + q) * GROUP);
    }
  }
  for (int64_t i = 0; i < rows; i++) HM_CHECK(write_row(job, task, s, i, quads));
  return HM_OK;
}
