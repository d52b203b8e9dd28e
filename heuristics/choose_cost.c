/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cost model behind the choice. It starts from the roofline's bytes and flops and
 * only ever adds to them, so a prediction is never below the roofline:
 *  - tiles: rows are padded to bm per expert, columns to bn, K to bk;
 *  - schedule: whole tiles per CTA quantize into waves; Stream-K splits k-iterations
 *    (no finer than sk_min_iters) so that few tiles still keep every CTA busy, on the
 *    CTAs the kernels would give them (kernels/hm_sk_split.cuh);
 *  - bandwidth: a CTA can only have its pipeline's stages in flight, so by Little's law
 *    it streams (stages-1)*stage_bytes per DRAM latency; too few busy CTAs, or too
 *    shallow pipelines, leave bandwidth unused (this is where H20 and H200 part ways:
 *    the H20 moves more bytes per SM and needs deeper pipelines);
 *  - re-reads: every m-tile reads its expert's weights again and every n-tile the
 *    activations, from L2 when they fit, else from DRAM;
 *  - compute: padded flops at the tensor rate, derated for small warp tiles, which
 *    reload fragments from shared memory for few MMAs, and for SMs holding fewer warps
 *    than it takes to feed all four tensor cores and hide the MMA and dequant latency;
 *  - dequant: every m-tile converts its expert's weight codes again, so short tiles on
 *    many rows pay in ALU time what they save in padding;
 *  - overlap: memory and compute never hide each other fully, so a share of the
 *    shorter one is added to the longer (and the choice still cares about both);
 *  - k-iterations: each one ends in a cp.async wait and a CTA barrier that the few
 *    resident warps cannot hide, a fixed cost per iteration an SM runs (measured on the
 *    H200 2026-12-03: bk 64 -> 128 saved 0.43 us an iteration at M = 1 and 0.25 us at
 *    M = 4096, N = K = 8192), so deeper k tiles win where shared memory allows; the W8A8
 *    wgmma kernel adds its fold: each k-iteration its warpgroups wait out their wgmmas and
 *    scale the partial sums into the accumulators before the next ones issue.
 */
#include <math.h>

#include "check.h"
#include "heuristics/choose.h"
#include "heuristics/roofline.h"
#include "kernels/gemm_config_w8a8.h"
#include "kernels/hm_sk_split.cuh"

#define LAUNCH_US 2.0
#define DRAM_LATENCY_US 0.8
#define L2_BW_FACTOR 2.5
#define SK_FIXUP_US 1.0
#define WARPS_TO_FILL_SM 8.0
#define DEQUANT_WEIGHTS_PER_SM_US 2e5
#define OVERLAP_LOSS 0.2
/* One SM's load path tops out near twice its fair share of the DRAM bandwidth. */
#define SM_BW_SHARE_MAX 2.0
#define K_ITER_US 0.3
/* ~120 instructions a warp (16 scale loads, 32 products, 64 FMAs, the wait) with 8 warps on
 * 4 schedulers: some 300 cycles of the tensor cores idle an iteration, not measured yet. */
#define W8A8_WGMMA_FOLD_US 0.17

/* Masked launches skip the experts no row reached (their tiles come from the counts), as
 * the other grouped types do. */
static double effective_experts(hm_gemm_type type, const hm_roofline *r) {
  if (type == HM_GEMM_DENSE) return 1.0;
  return r->active_experts > 1.0 ? r->active_experts : 1.0;
}

/*
 * mma.sync on sm_90 tops out near 2.5 TFLOP/s an SM (328 TFLOP/s measured on an H200,
 * whose profile rate is wgmma's): a cap, so that devices with a slow tensor rate (H20)
 * see none of it.
 */
#define MMA_SYNC_SM90_TFLOPS_PER_SM 2.5
#define WARPGROUPS_TO_FILL_SM 2.0

/* Fraction of the tensor rate a resident set of wgmma warpgroup tiles reaches: the wider
 * the wgmma N (tokens), the less register-A dequant per MMA. */
static double wgmma_tile_efficiency(const hm_gemm_tuning *t) {
  const int n = t->bm / t->warps_m;
  const double per_tile = n >= 128 ? 0.9 : n >= 64 ? 0.75 : 0.6;
  const double warpgroups_per_sm = (double)t->warps_m * (t->warps_n / 4) * t->ctas_per_sm;
  return per_tile * fmin(1.0, warpgroups_per_sm / WARPGROUPS_TO_FILL_SM);
}

/* Fraction of the tensor rate a resident set of mma.sync warp tiles reaches. */
static double warp_tile_efficiency(const hm_gemm_tuning *t) {
  const int frags = (hm_gemm_acc_rows(t) / t->warps_m / 16) * (t->bn / t->warps_n / 64);
  const double per_tile = frags >= 4 ? 0.85 : frags >= 2 ? 0.7 : 0.55;
  const double warps_per_sm = (double)t->warps_m * t->warps_n * t->warps_k * t->ctas_per_sm;
  return per_tile * fmin(1.0, warps_per_sm / WARPS_TO_FILL_SM);
}

/* How the kernel would share ceil(tiles) tiles on its grid (kernels/hm_sk_split.cuh):
 * data-parallel waves, then CTAs that split the rest. What the cost needs of it: the
 * k-iterations the busiest CTA runs, and whether some CTA's range ends inside a tile, so
 * that partials are published and summed. */
typedef struct sk_split {
  double makespan_iters;
  bool fixup;
} sk_split;

static sk_split split_of(const hm_gemm_tuning *t, double tiles, double k_iters, int sm_count) {
  const int grid = sm_count * t->ctas_per_sm;
  const int all = (int)ceil(tiles), dp = hm_sk_dp_tiles(all, grid, t->stream_k);
  const double waves = ceil((double)dp / grid) * k_iters;
  if (all == dp) return (sk_split){waves, false};
  const int ctas = hm_sk_ctas(all - dp, (int)k_iters, grid, t->sk_min_iters);
  return (sk_split){waves + ceil((all - dp) * k_iters / ctas), ctas != all - dp};
}

static double pipeline_bytes_in_flight(const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  const double stage = (double)hm_gemm_config_smem_bytes(cfg) / t->stages;
  /* The wgmma ring keeps one more stage out of loading: the one its last wgmmas still read. */
  return stage * (t->stages - (t->mma == HM_MMA_WGMMA ? 2 : 1));
}

hm_status hm_choose_cost_of(const hm_layer_config *lc, const hm_gemm_config *cfg, int64_t valid_m,
                            const hm_device_profile *p, hm_choose_cost *out) {
  HM_CHECK_NOT_NULL(lc);
  HM_CHECK_NOT_NULL(cfg);
  HM_CHECK_NOT_NULL(p);
  HM_CHECK_NOT_NULL(out);
  if (valid_m < 1) HM_FAIL(HM_INVALID_ARGUMENT, "cost at valid M %lld", (long long)valid_m);
  hm_roofline r;
  HM_CHECK(hm_roofline_estimate(lc, valid_m, 1, p, &r));
  const hm_gemm_tuning *t = &cfg->tuning;
  const double experts = effective_experts(cfg->compute.type, &r);
  const double m_tiles_per_expert = ceil((double)valid_m / experts / t->bm);
  const double n_tiles = (double)hm_gemm_n_tiles(cfg), k_iters = (double)hm_gemm_k_iters(cfg);
  const double tiles = experts * m_tiles_per_expert * n_tiles;
  const sk_split split = split_of(t, tiles, k_iters, p->sm_count);
  /* Average CTAs at work: total k-iterations over (makespan x CTAs launched). */
  const double busy = fmin((double)p->sm_count * t->ctas_per_sm, tiles * k_iters / split.makespan_iters);

  const double bw_bytes_us = p->mem_bw_gbs * 1e3;
  const double sm_cap_bytes_us = SM_BW_SHARE_MAX * bw_bytes_us / p->sm_count;
  const double cta_bytes_us = fmin(pipeline_bytes_in_flight(cfg) / DRAM_LATENCY_US, sm_cap_bytes_us);
  const double busy_sms = fmin((double)p->sm_count, ceil(busy / t->ctas_per_sm));
  const double stream_bytes_us = fmin(bw_bytes_us, fmin(busy * cta_bytes_us, busy_sms * sm_cap_bytes_us));
  const double dram_bytes = r.weight_bytes + r.act_bytes + r.out_bytes;
  const double reread_bytes = r.weight_bytes * (m_tiles_per_expert - 1) + r.act_bytes * (n_tiles - 1);
  const double per_expert = experts > 0 ? r.weight_bytes / experts : 0;
  const double reread_rate = per_expert + r.act_bytes <= p->l2_bytes / 2.0 ? L2_BW_FACTOR : 1.0;
  const double fixup_bytes = split.fixup ? 2.0 * p->sm_count * t->ctas_per_sm * hm_gemm_acc_rows(t) * t->bn * 4 : 0;
  out->mem_us = (dram_bytes + (reread_bytes / reread_rate + fixup_bytes / L2_BW_FACTOR)) / stream_bytes_us;

  const double padded_flops = 2.0 * experts * m_tiles_per_expert * t->bm * n_tiles * t->bn * k_iters * t->bk;
  const double sm_share = fmin(1.0, busy / t->ctas_per_sm / p->sm_count);
  const double tensor_us = r.compute_us * (padded_flops / fmax(r.flops, 1.0));
  const bool quantized = hm_gemm_weight_bits(cfg->layer.weight) < 16;
  const double dequant_weights = quantized ? tiles * t->bn * k_iters * t->bk : 0.0;
  const double dequant_us = dequant_weights / (DEQUANT_WEIGHTS_PER_SM_US * p->sm_count * sm_share);
  double efficiency = t->mma == HM_MMA_WGMMA ? wgmma_tile_efficiency(t) : warp_tile_efficiency(t);
  if (t->mma == HM_MMA_SYNC && cfg->arch >= 90)
    efficiency *= fmin(1.0, MMA_SYNC_SM90_TFLOPS_PER_SM * p->sm_count / p->tflops_f16);
  out->compute_us = tensor_us / (sm_share * efficiency) + dequant_us;

  out->roofline_us = r.predicted_us;
  out->busy_ctas = busy;
  out->bw_gbs = stream_bytes_us * 1e-3;
  const double longer = fmax(out->mem_us, out->compute_us), shorter = fmin(out->mem_us, out->compute_us);
  /* Counted per SM, as if CTAs sharing an SM did not hide each other's iteration cost. That
   * held at M = 1 but not at 16 rows an expert, where two CTAs an SM ran 1.15-1.20x faster
   * (MoE decode, docs/PERF.md, seventh session); the tuner finds those, the model does not.
   * A two-stage ring has nothing in flight while it computes: each iteration waits out a
   * whole DRAM round trip. */
  const bool folds = t->mma == HM_MMA_WGMMA && hm_gemm_is_w8a8(&cfg->layer);
  const double per_iter_us =
      K_ITER_US + (t->stages <= 2 ? DRAM_LATENCY_US : 0.0) + (folds ? W8A8_WGMMA_FOLD_US : 0.0);
  const double iter_us = per_iter_us * split.makespan_iters * t->ctas_per_sm;
  out->predicted_us = LAUNCH_US + longer + OVERLAP_LOSS * shorter + iter_us + (split.fixup ? SK_FIXUP_US : 0.0);
  return HM_OK;
}
