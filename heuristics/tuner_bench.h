/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tuner's bench: device buffers shaped like a transformed layer (several copies of
 * the weights, so that each timed launch finds its weights cold in L2), activations,
 * output, Stream-K workspace and, for the MoE layouts, uniform routing laid out as the
 * layer lays it out (tuner_routing.h); and the timing of one kernel on them.
 */
#ifndef HM_TUNER_BENCH_H
#define HM_TUNER_BENCH_H

#include "heuristics/tuner.h"
#include "kernels/gemm_launch.h"

#define HM_TUNER_MAX_COPIES 64

/* A device buffer that grows to the largest shape timed. */
typedef struct hm_tuner_buffer {
  void *ptr;
  size_t bytes;
} hm_tuner_buffer;

typedef struct hm_tuner_bench {
  hm_engine *engine;
  hm_stream *stream;
  const hm_layer_config *layer;
  hm_gemm_type type;
  int top_k;            /* slots a token: the layer's for the MoE layouts, 1 for dense */
  int shared;           /* the layer's last experts that every token takes (a fused shared expert) */
  int a_rows_per_token; /* indexed: top_k where A holds token rows, 1 where it holds slot rows */
  bool routing_ready;   /* the down GEMM: launched as the MoE layer launches it (hm_gemm_args) */
  int copies;
  hm_gemm_operands ops[HM_TUNER_MAX_COPIES];
  hm_tuner_buffer a, a_scale, c, workspace;
  /* The routing of the last shape timed (meta_m rows, blocks of meta_block), on the device. */
  int32_t *sorted_ids, *expert_ids, *num_padded, *expert_counts, *expert_offsets;
  int64_t max_padded, meta_m;
  int meta_block;
} hm_tuner_bench;

/* Whether a launch of type at valid M fits the bench: masked launches hold max_m rows an
 * expert, which grows past any memory long before the other layouts do. */
bool hm_tuner_bench_fits(const hm_layer_config *layer, hm_gemm_type type, int64_t valid_m);
/* The bench of req's layer and GEMM type, routed as req says; l2_bytes sets how many weight
 * copies keep L2 cold. */
hm_status hm_tuner_bench_create(hm_engine *engine, const hm_tune_request *req, size_t l2_bytes,
                                hm_tuner_bench *out);
void hm_tuner_bench_destroy(hm_tuner_bench *b);
/* Median microseconds a launch of kernel (built from cfg) at valid_m, over reps samples after a
 * warm-up; a sample is chain launches back to back, each on the next weight copy, divided by
 * chain (1: one cold launch, its latency and tail included). */
hm_status hm_tuner_bench_time(hm_tuner_bench *b, hm_kernel *kernel, const hm_gemm_config *cfg,
                              int64_t valid_m, int reps, int chain, double *median_us);

#endif
