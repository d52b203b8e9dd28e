/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Launching a weight-only GEMM kernel: the kernel argument (mirrored by
 * kernels/gemm_params.cuh), the persistent grid, and the Stream-K workspace.
 */
#ifndef HM_GEMM_LAUNCH_H
#define HM_GEMM_LAUNCH_H

#include <cuda.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/gemm_config.h"
#include "kernels/jit.h"

/* Field for field the device's struct hm_gemm_params. */
typedef struct hm_gemm_kernel_params {
  const void *a;
  void *c;
  const void *b;
  const void *scales;
  const uint8_t *zeros;
  const void *bias;
  const float *global_scale;
  const int32_t *expert_offsets;
  const int32_t *expert_counts;
  const int32_t *sorted_ids;
  const int32_t *expert_ids;
  const int32_t *num_padded;
  const float *topk_weights;
  float *partials;
  int32_t *counters;
  int64_t m;
  int32_t top_k;
  int32_t a_rows_per_token;
  int32_t block_m;
  int32_t grid;
  int32_t routing_ready;
  int32_t max_padded;
  const float *a_scale;
  const void *next_b;
  int64_t next_unit_bytes;
  int32_t next_units;
  CUtensorMap tma_a;
  CUtensorMap tma_c, tma_c8;
} hm_gemm_kernel_params;

/*
 * Whether the kernel of cfg loads its token tiles with TMA (tma_a of the generated config):
 * the warp-specialized producer, where a tile's token rows are consecutive A rows (not
 * indexed) and the rows suit a tensor map (16-byte row stride, whole 128-byte swizzle rows
 * a k-tile). The launch then passes the activations' tensor map in tma_a.
 */
bool hm_gemm_tma_a(const hm_gemm_config *cfg);

/*
 * Whether the kernel of cfg stores its output tiles with TMA (tma_c of the generated
 * config, gemm_ws_store.cuh): the warp-specialized kernels where a tile's rows are
 * consecutive rows of C (not indexed) and C's rows suit a tensor map (16-byte row stride).
 * The launch passes C's tensor maps in tma_c (boxes of hm_gemm_tma_c_rows rows) and tma_c8
 * (8 rows), where C is 16-byte aligned.
 */
bool hm_gemm_tma_c(const hm_gemm_config *cfg);
/* The rows one tensor store of a tma_c kernel takes: a warpgroup's, or the tile's where
 * warpgroups share rows. */
int hm_gemm_tma_c_rows(const hm_gemm_config *cfg);

/* The weights the stream's next GEMM reads (transformed, laid out (E, N/64, K) in units of
 * 64 columns over all of K): units of unit_bytes each; weight NULL where none is known. */
typedef struct hm_gemm_next {
  const void *weight;
  int64_t unit_bytes;
  int64_t units;
} hm_gemm_next;

/* Transformed weights of a layer on the device (kernels/transform.h), and those of the
 * GEMM after it on the stream, which a dense decode launch warms in L2 (hm_gemm_warms_next). */
typedef struct hm_gemm_operands {
  const void *weight;
  const void *scales;
  const uint8_t *zeros;
  const void *bias;
  const float *global_scale;
  hm_gemm_next next;
} hm_gemm_operands;

/*
 * Bytes of the Stream-K workspace for the largest grid of cfg on sm_count SMs: per-CTA
 * counters (must be zero before the first launch; kernels leave them zero) and two
 * partial tiles per CTA.
 */
size_t hm_gemm_workspace_bytes(const hm_gemm_config *cfg, int sm_count);
/* CTAs to launch for args: the persistent grid, fewer for small problems; 0: nothing to do. */
int hm_gemm_grid(const hm_gemm_config *cfg, int sm_count, const hm_gemm_args *args);
/* Checks args against cfg (type, pointers, block_m, sizes). */
hm_status hm_gemm_check_args(const hm_gemm_config *cfg, const hm_gemm_args *args);
/*
 * Whether a launch of cfg with `grid` CTAs warms the next GEMM's weights in L2 (ops->next):
 * an mma.sync dense decode tile alone on its SM (hm_gemm_exclusive_sm) whose every CTA runs
 * one whole tile, so that the warm-up comes after the CTA's last weight copy is issued.
 */
bool hm_gemm_warms_next(const hm_gemm_config *cfg, const hm_gemm_args *args, int grid);
/* Launches kernel (built from cfg) on stream. workspace: hm_gemm_workspace_bytes, zeroed once. */
hm_status hm_gemm_launch(hm_kernel *kernel, const hm_gemm_config *cfg, int sm_count, const hm_gemm_operands *ops,
                         const hm_gemm_args *args, void *workspace, hm_stream *stream);

#endif
