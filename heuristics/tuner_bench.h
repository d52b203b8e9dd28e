/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tuner's bench: device buffers shaped like a transformed layer (several copies of
 * the weights, so that each timed launch finds its weights cold in L2), activations,
 * output, Stream-K workspace and uniform-routing metadata for the indexed layout; and
 * the timing of one kernel on them.
 */
#ifndef HM_TUNER_BENCH_H
#define HM_TUNER_BENCH_H

#include "kernels/gemm_launch.h"

#define HM_TUNER_MAX_COPIES 64

typedef struct hm_tuner_bench {
  hm_engine *engine;
  hm_stream *stream;
  const hm_layer_config *layer;
  hm_gemm_type type;
  int top_k;
  int copies;
  hm_gemm_operands ops[HM_TUNER_MAX_COPIES];
  void *a, *c, *workspace;
  float *a_scale; /* 8-bit activations' scales (per row, or per row and 128 columns) */
  size_t workspace_bytes;
  int32_t *sorted_ids, *expert_ids, *num_padded;
  int64_t max_padded, meta_m;
  int meta_block_m;
} hm_tuner_bench;

/* Buffers for valid M up to max_valid_m; l2_bytes sets how many weight copies keep L2 cold. */
hm_status hm_tuner_bench_create(hm_engine *engine, const hm_layer_config *layer, hm_gemm_type type,
                                int64_t max_valid_m, size_t l2_bytes, hm_tuner_bench *out);
void hm_tuner_bench_destroy(hm_tuner_bench *b);
/* Median microseconds of reps launches of kernel (built from cfg) at valid_m, after a warm-up. */
hm_status hm_tuner_bench_time(hm_tuner_bench *b, hm_kernel *kernel, const hm_gemm_config *cfg, int64_t valid_m,
                              int reps, double *median_us);

#endif
