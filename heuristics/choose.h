/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Profile-aware choice of the weight-only GEMM's tuning: every candidate tiling is
 * enumerated, the ones the kernel or the device cannot run are dropped, and the rest are
 * ranked by a cost model built on the roofline (tile and wave quantization, bytes in
 * flight per SM, Stream-K when few tiles would leave SMs idle, MoE rows per expert).
 * A layer's kernels are chosen per bucket of valid M; the tuner (tuner.h) measures the
 * same buckets and its winners (tune_table.h) are asked first (choose_engine.h).
 */
#ifndef HM_CHOOSE_H
#define HM_CHOOSE_H

#include "heuristics/device_profile.h"
#include "kernels/gemm_select.h"

/* What the cost model says about one config at one valid M. */
typedef struct hm_choose_cost {
  double predicted_us; /* launch + max(memory, compute) + k-iteration, pipeline fill and fix-up latencies */
  double roofline_us;  /* hm_roofline_estimate's time: a lower bound of predicted_us */
  double mem_us, compute_us;
  double busy_ctas; /* average CTAs at work over the kernel's makespan */
  double bw_gbs;    /* DRAM bandwidth those CTAs' pipelines can pull, at most the profile's */
} hm_choose_cost;

/* Predicted time of cfg (tuning filled) at valid_m rows on profile. */
/*
 * The model's error against the device was 15-60 % (docs/PERF.md, 2026-12-03), so scores
 * closer than this fraction are ties; the fixed table's tuning, which measurements chose,
 * breaks them.
 */
#define HM_CHOOSE_MODEL_RESOLUTION 0.2

hm_status hm_choose_cost_of(const hm_layer_config *lc, const hm_gemm_config *cfg, int64_t valid_m,
                            const hm_device_profile *profile, hm_choose_cost *out);

/* Legal tunings of base on profile; *out is malloc'd (free it), *count may be 0. */
hm_status hm_choose_candidates(const hm_gemm_config *base, const hm_device_profile *profile, hm_gemm_tuning **out,
                               int *count);
/* Whether tuning suits profile (shared memory, threads and registers per SM) and the kernel's checks. */
bool hm_choose_tuning_legal(const hm_gemm_config *base, const hm_gemm_tuning *tuning, const hm_device_profile *p);

/*
 * The measured dense decode tile of bm (8 or 16) rows for base's layer, one 64-column unit
 * a CTA alone on its SM, where the layer's units about fill the SMs (choose.c); false
 * elsewhere. The candidates hold it, though the 8-row one lies outside their cross product.
 */
bool hm_choose_unit_tile(const hm_gemm_config *base, const hm_device_profile *p, int bm, hm_gemm_tuning *out);

/* Field by field (the struct has padding). */
bool hm_choose_tuning_equal(const hm_gemm_tuning *a, const hm_gemm_tuning *b);

/* The rows an M bucket is timed and judged at, for (m_lo, m_hi]: its upper end, 4*m_lo for the open one. */
int64_t hm_choose_bucket_m(int64_t m_lo, int64_t m_hi);
/* The tallest tile (bm) of the candidates, mma.sync and wgmma alike. */
#define HM_CHOOSE_MAX_BM 256

/* Rows one token brings to a launch of type: the layer's top_k for the MoE types (a dense
 * layer's row is a token; so is an expert-parallel shard's, top_k 0 or 1). */
int hm_choose_token_rows(const hm_layer_config *lc, hm_gemm_type type);
/* Buckets of valid M for a layer and GEMM type, the last open: a dense layer's end at 1 to 2048
 * rows, a MoE layer's at 1/32 to 512 rows per expert, at least a row apart (choose.c lists them). */
int hm_choose_bucket_count(void);
void hm_choose_bucket(const hm_layer_config *lc, hm_gemm_type type, int index, int64_t *m_lo, int64_t *m_hi);

/*
 * What the choice minimizes over (m_lo, m_hi]: predicted / roofline time summed over the
 * range's start, geometric middle and judging point; predicted_us (or NULL) at the last.
 * No point of a MoE layer is taken below one token, lc->top_k rows; dense layers ignore it.
 */
hm_status hm_choose_score(const hm_layer_config *lc, const hm_gemm_config *cfg, const hm_device_profile *p,
                          int64_t m_lo, int64_t m_hi, double *score, double *predicted_us);

/*
 * The analytic choice for valid M in (m_lo, m_hi] (m_hi = INT64_MAX: open): the
 * candidate with the least summed relative cost over the range's sample points
 * (hm_choose_score). out = the layer's base config on profile->arch with that
 * tuning; predicted_us at hm_choose_bucket_m. HM_UNSUPPORTED when no candidate is legal.
 */
hm_status hm_choose_config(const hm_layer_config *lc, hm_gemm_type type, const hm_device_profile *profile,
                           int64_t m_lo, int64_t m_hi, hm_gemm_config *out, double *predicted_us);
/*
 * The candidates ranked by cost at valid_m, best first, at most max; the tuner times
 * these. *count receives how many were written.
 */
hm_status hm_choose_ranked(const hm_layer_config *lc, hm_gemm_type type, const hm_device_profile *profile,
                           int64_t valid_m, hm_gemm_tuning *out, int max, int *count);
/* One config per bucket, adjacent equal ones merged: the layer's kernel table (hm_choose_score). */
hm_status hm_choose_plan(const hm_layer_config *lc, hm_gemm_type type, const hm_device_profile *profile,
                         hm_gemm_plan *out);

#endif
