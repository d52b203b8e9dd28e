/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The default (analytic) choice of tuning for the weight-only GEMM, and the table of
 * kernels a layer needs: one config per interval of valid M. The heuristics module
 * refines the choice; these signatures are what it and `humming-moe precompile` use.
 */
#ifndef HM_GEMM_SELECT_H
#define HM_GEMM_SELECT_H

#include "kernels/gemm_config.h"

#define HM_GEMM_PLAN_MAX 12

/* Kernel i serves valid M in (m_hi of kernel i-1, m_hi]; the last has m_hi = INT64_MAX. */
typedef struct hm_gemm_plan {
  int count;
  int64_t m_hi[HM_GEMM_PLAN_MAX];
  hm_gemm_config cfg[HM_GEMM_PLAN_MAX];
} hm_gemm_plan;

/*
 * Tuning for base (layer, compute and arch set) at valid M (rows; m*top_k for indexed,
 * max_m*E for masked): tiles from the rows an expert sees, Stream-K unless batch
 * invariant, stages cut to the arch's shared memory, the warp-specialized kernel where
 * hm_gemm_prefer_ws takes it. out = base with tuning filled.
 */
hm_status hm_gemm_select(const hm_gemm_config *base, int64_t valid_m, hm_gemm_config *out);
/*
 * Turns a plain two-warpgroup wgmma tile of 128+ tokens into the warp-specialized kernel
 * where that kernel's producer loads token tiles with TMA (hm_gemm_tma_a): W8A8 and
 * quantized weight-only layers, stages cut to fit beside its staged output tile. W8A8 runs
 * a warpgroup per 64 tokens. Both take 256 tokens a tile where valid_m, the M cfg is chosen
 * for, gives an expert more than HM_GEMM_TALL_ROWS rows (weight-only against 128 columns).
 * Leaves cfg as it is elsewhere, or where the warp-specialized config is not legal.
 */
#define HM_GEMM_TALL_ROWS 512
hm_status hm_gemm_prefer_ws(hm_gemm_config *cfg, int64_t valid_m);
/* Every kernel base needs, by M interval. */
hm_status hm_gemm_plan_make(const hm_gemm_config *base, hm_gemm_plan *out);
/* Index of the plan entry serving valid_m (valid_m <= 0 picks the first). */
int hm_gemm_plan_pick(const hm_gemm_plan *plan, int64_t valid_m);
/* The rows a forward selects with: m, m*top_k (indexed); grouped: args->routed_rows when
 * set, else m*experts (masked) or the routed rows estimated from the padded count (contiguous). */
int64_t hm_gemm_valid_m(const hm_gemm_args *args, int64_t experts);

#endif
