/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The autotuner: for each M bucket of a layer it times the analytic choice, the GEMM
 * module's default and the cost model's next best candidates on the engine's GPU (CUDA
 * events, weights cold in L2, median of reps), and returns the winners as tuning-table
 * entries. Kernels are launched directly (kernels/gemm_launch.h) on device buffers of
 * the transformed weights' size: timing does not depend on the weights' values, so no
 * layer is quantized or transformed. Every GEMM type is tuned: the MoE layouts on uniform
 * routing laid out as the MoE layer lays it out, a fused shared expert taking every token
 * (heuristics/tuner_routing.h).
 */
#ifndef HM_TUNER_H
#define HM_TUNER_H

#include "heuristics/choose.h"
#include "heuristics/tune_table.h"

typedef struct hm_tune_request {
  const hm_layer_config *layer;
  hm_gemm_type type; /* MoE types route layer->top_k slots a token */
  int candidates;    /* timed per bucket beside the analytic choice and the default (0: 6) */
  int reps;          /* timed launches per candidate, median taken (0: 15) */
  int chain;         /* launches back to back in a sample, as layers run in serving (0: 1, one cold launch) */
  int shared;        /* MoE types: the last experts, which every token takes (fused shared experts) */
  bool a_per_slot;   /* indexed: A holds a row per routed slot (the down GEMM), not per token */
  int64_t max_m;     /* only the buckets that start below this valid M (0: all) */
} hm_tune_request;

/* One bucket's outcome; the tuned config is never slower than the analytic one (it is one of the timed). */
typedef struct hm_tune_bucket {
  int64_t m_lo, m_hi, m; /* timed at valid M = m */
  hm_gemm_tuning heuristic, tuned;
  double predicted_us, heuristic_us, default_us, tuned_us;
  int timed;
} hm_tune_bucket;

typedef struct hm_tune_result {
  int count;
  hm_tune_bucket buckets[HM_GEMM_PLAN_MAX];
  hm_tune_entry entries[HM_GEMM_PLAN_MAX]; /* to store in the table */
} hm_tune_result;

/* Whether the tuner times the bucket (m_lo, m_hi]: those past its largest shapes keep the
 * analytic choice. */
bool hm_tuner_bucket_timed(const hm_layer_config *layer, hm_gemm_type type, int64_t m_lo, int64_t m_hi);
/* Tunes every bucket of req's layer on a CUDA engine. */
hm_status hm_tuner_run(hm_engine *engine, const hm_tune_request *req, hm_tune_result *out);

#endif
