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
 *    many rows pay in ALU time what they save in padding; fp8 operands of mma.sync on
 *    sm_90 convert at under half the rate of 4-bit codes (F8_UNPACK_WEIGHTS_PER_SM_US);
 *  - overlap: memory and compute never hide each other fully, so a share of the
 *    shorter one is added to the longer (and the choice still cares about both);
 *  - k-iterations: each one ends in a cp.async wait and a CTA barrier that the few
 *    resident warps cannot hide, a fixed cost per iteration an SM runs (measured on the
 *    H200 2026-12-03: bk 64 -> 128 saved 0.43 us an iteration at M = 1 and 0.25 us at
 *    M = 4096, N = K = 8192), so deeper k tiles win where shared memory allows; the W8A8
 *    wgmma kernel adds its fold: each k-iteration its warpgroups wait out their wgmmas and
 *    scale the partial sums into the accumulators before the next ones issue. The wait and
 *    barrier stall the math, so they are charged as far as the roofline says the math
 *    bounds the kernel: at decode they hide in the weights' stream (fit below);
 *  - segments: each piece of a tile a CTA runs starts with an empty pipeline (row maps,
 *    then a DRAM round trip before the first MMA), and each piece that is not a whole
 *    tile publishes a partial, fences and counts itself in with an atomic, serially;
 *    counted for the CTA that waits longest, from the split the kernel makes. CTAs
 *    sharing an SM stream while one of them waits, so these latencies are charged once
 *    an SM (the CTA's own), not once per resident CTA: why two CTAs an SM win where CTAs
 *    run many short tiles and lose where one long tile a CTA becomes two halves to fix up.
 *
 * Fit of the launch, segment and fix-up constants (2026-12-03, docs/PERF.md eighth
 * session call 2: DeepSeek-V3 W4A16 g128 decode on the H200, chained forwards, the tile
 * bm8 bn256 bk128 w1x4x2 under s4 Stream-K one and two CTAs an SM, s4 data-parallel, s6
 * and s8, on dense M = 1 and down and gate_up M = 1 and 16, plus dense bk64 s8 and bn128
 * w1x2x4 s6; least squares of log(predicted / measured) on a grid): LAUNCH_US 3.5 (was
 * 2.0), PARTIAL_FIXUP_US 2.75 (the flat 1.0 us a split kernel paid before), with
 * SEGMENT_FILL_US 1.5 as the ninth session traced it (MoE decode: 1.45-1.6 us of fill a
 * segment; the free fit's 1.0 and 3.5 us fit 5.0 % against 5.4 %). RMS error 5.4 % over
 * 26 cells, the worst c2 at M = 16 (+10 % down, +12 % gate_up: two CTAs gain more than
 * the latencies they hide). Charging co-resident CTAs' latencies in part instead (shares
 * 0-0.5) fit worse (9.6-6.2 %); charging the k-iteration cost in full at decode (K_ITER_US
 * x 56-684 iterations an SM, where the measured overhead over the roofline was 10-100 us,
 * and the traced loop streams a k-tile in 0.56-0.59 us whatever it carries) fit at best
 * 25 %.
 *
 * A data-parallel launch of one tile a CTA on most but not all SMs ran 1.5x the time of
 * Stream-K on the same split (gate_up at one token, 128 tiles on 132 SMs: 57.5 against
 * 37.9 us, one or two CTAs an SM; H200, docs/PERF.md eleventh session): its slowest CTA's
 * mainloop took 1.65x the median one's. It comes with programmatic launch (without it the
 * same launch ran 39.6 us), but how is not known (a traced launch had one SM run two of its
 * CTAs; padding shared memory to one CTA an SM changed nothing). It is charged as measured
 * (PARTIAL_WAVE_DP_FACTOR) where it was seen: neither data-parallel dense decode (32 tiles)
 * nor down at one token (224 tiles) ran slower than predicted. A dense decode tile alone on
 * its SM (hm_gemm_exclusive_sm, which came later) is not charged: one 64-column unit a CTA,
 * 128 on 132 SMs, ran 1.07-1.23x faster than Stream-K (N = 8192, K = 4096-32768, one to
 * eight tokens; H100, docs/PERF.md twenty-fifth session).
 */
#include <math.h>

#include "check.h"
#include "heuristics/choose.h"
#include "heuristics/roofline.h"
#include "kernels/gemm_config_w8a8.h"
#include "kernels/hm_sk_split.cuh"

#define LAUNCH_US 3.5
#define DRAM_LATENCY_US 0.8
#define L2_BW_FACTOR 2.5
#define SEGMENT_FILL_US 1.5
#define PARTIAL_FIXUP_US 2.75
#define WARPS_TO_FILL_SM 8.0
#define WARPS_TO_FILL_EXCLUSIVE_SM 4.0
#define DEQUANT_WEIGHTS_PER_SM_US 2e5
/*
 * sm_90 has no 8-bit mma.sync: ptxas unpacks each fp8 operand register into two f16 ones
 * (F2FP.F16.E4M3.UNPACK_B, 136 of a W4A8 decode tile's 505 mainloop instructions a stage)
 * and runs f16 MMAs, so W8A8 fp8 and W4A8 codes cost far more than a 4-bit code's LOP3 and
 * HFMA2. Fit to 20 decode launches of DeepSeek-V3's experts, W4A8 MXFP4 and fp8, both
 * GEMMs, 1-16 tokens, data-parallel and Stream-K (H200, docs/PERF.md nineteenth session):
 * RMS error 16 % against 17 % at the 4-bit rate, and of the nine pairs of kernels timed at
 * one M it orders seven as measured, among them both at one token that the 4-bit rate
 * ordered wrong: W4A8's data-parallel gate_up (144 tiles on 132 SMs), which ran 1.46x
 * Stream-K's time, is predicted 1.40x (was 0.97x); fp8's, also 1.46x, comes out level,
 * Stream-K ahead by a hair (was 0.95x). 1e5 fits 15 % but orders fp8's pair wrong.
 */
#define F8_UNPACK_WEIGHTS_PER_SM_US 8e4
#define OVERLAP_LOSS 0.2
/* One SM's load path tops out near twice its fair share of the DRAM bandwidth. */
#define SM_BW_SHARE_MAX 2.0
#define K_ITER_US 0.3
#define PARTIAL_WAVE_DP_FACTOR 1.5
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

/* Fraction of the tensor rate a resident set of mma.sync warp tiles reaches. A dense decode
 * tile alone on its SM (hm_gemm_exclusive_sm) fills it with four warps, one a scheduler:
 * N = 8192 at 1-8 tokens ran 1.10x / 1.33x faster on four warps than on eight / two
 * (bm8 bn64 bk256, H100, docs/PERF.md twenty-fifth session). */
static double warp_tile_efficiency(const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  const int frags = (hm_gemm_acc_rows(t) / t->warps_m / 16) * (t->bn / t->warps_n / 64);
  const double per_tile = frags >= 4 ? 0.85 : frags >= 2 ? 0.7 : 0.55;
  const double warps_per_sm = (double)t->warps_m * t->warps_n * t->warps_k * t->ctas_per_sm;
  const double to_fill = hm_gemm_exclusive_sm(cfg) ? WARPS_TO_FILL_EXCLUSIVE_SM : WARPS_TO_FILL_SM;
  return per_tile * fmin(1.0, warps_per_sm / to_fill);
}

/* How the kernel would share ceil(tiles) tiles on its grid (kernels/hm_sk_split.cuh): whole
 * tiles in data-parallel waves, then equal Stream-K ranges. What the cost needs of it: the
 * k-iterations the busiest CTA runs; whether some range ends inside a tile, so that
 * partials are published and summed; and the latencies of the CTA that waits longest, a
 * pipeline fill for each piece of a tile it runs (kernels/gemm_kernel.cuh hm_gemm_segment)
 * and a fix-up for each of those pieces that is not a whole tile (hm_gemm_fixup). */
typedef struct sk_split {
  double makespan_iters;
  bool fixup;
  double latency_us;
} sk_split;

/* What a Stream-K range of len iterations starting offset iterations into a tile costs in
 * fills and fix-ups: a fill for each tile it touches, a fix-up for each end inside one. */
static double sk_range_latency_us(int offset, int len, int k_iters) {
  const int pieces = (offset + len - 1) / k_iters + 1;
  const int ragged_ends = (offset != 0) + ((offset + len) % k_iters != 0);
  return pieces * SEGMENT_FILL_US + (ragged_ends < pieces ? ragged_ends : pieces) * PARTIAL_FIXUP_US;
}

/* The longest fill and fix-up latency of the ctas ranges iters is split into (the ones
 * hm_sk_begin bounds), walked in order; the walk stops at a bound no range exceeds (the
 * most tiles a range can touch, both its ends inside one), which some range reaches
 * unless the split is aligned to the tiles. */
static double sk_worst_latency_us(int iters, int ctas, int k_iters) {
  const int longest = iters / ctas + (iters % ctas != 0);
  const int most_pieces = (k_iters + longest - 2) / k_iters + 1;
  const double most = most_pieces * SEGMENT_FILL_US + (most_pieces < 2 ? most_pieces : 2) * PARTIAL_FIXUP_US;
  double worst_us = 0.0;
  for (int c = 0; c < ctas && worst_us < most; c++) {
    const int begin = hm_sk_begin(c, iters, ctas), end = hm_sk_begin(c + 1, iters, ctas);
    worst_us = fmax(worst_us, sk_range_latency_us(begin % k_iters, end - begin, k_iters));
  }
  return worst_us;
}

static sk_split split_of(const hm_gemm_config *cfg, double tiles, double k_iters, int sm_count) {
  const hm_gemm_tuning *t = &cfg->tuning;
  const int grid = sm_count * t->ctas_per_sm;
  const int all = (int)ceil(tiles), dp = hm_sk_dp_tiles(all, grid, t->stream_k);
  const int waves = (dp + grid - 1) / grid;
  sk_split s = {waves * k_iters, false, waves * SEGMENT_FILL_US};
  if (!t->stream_k && all < sm_count && 2 * all >= sm_count && !hm_gemm_exclusive_sm(cfg))
    s.makespan_iters *= PARTIAL_WAVE_DP_FACTOR;
  if (all == dp) return s;
  const int ctas = hm_sk_ctas(all - dp, (int)k_iters, grid, t->sk_min_iters);
  const int iters = (all - dp) * (int)k_iters;
  s.makespan_iters += ceil((double)iters / ctas);
  s.fixup = ctas != all - dp;
  s.latency_us += sk_worst_latency_us(iters, ctas, (int)k_iters);
  return s;
}

static double pipeline_bytes_in_flight(const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  size_t ring = hm_gemm_config_smem_bytes(cfg);
  /* A tile that overlaps fills keeps its reduction and row maps beside its ring. */
  if (hm_gemm_sync_overlaps_fill(t)) ring -= hm_gemm_sync_smem_bytes(cfg, 0);
  const double stage = (double)ring / t->stages;
  /* The wgmma ring keeps one more stage out of loading: the one its last wgmmas still read. */
  return stage * (t->stages - (t->mma == HM_MMA_WGMMA ? 2 : 1));
}

/*
 * The fixed costs of the k-iterations an SM runs, its CTAs' together. The wait and barrier
 * stall the math, so they cost time as far as the math bounds the kernel, which the
 * roofline puts at its compute over memory time below M*: at decode they hide in the
 * weights' stream. A two-stage ring has nothing in flight while it computes: each
 * iteration waits out a whole DRAM round trip.
 */
static double iteration_us(const hm_gemm_config *cfg, const hm_roofline *r, const sk_split *split) {
  const hm_gemm_tuning *t = &cfg->tuning;
  const bool folds = t->mma == HM_MMA_WGMMA && hm_gemm_is_w8a8(&cfg->layer);
  const double math_share = r->mem_us > 0 ? fmin(1.0, r->compute_us / r->mem_us) : 1.0;
  const double barrier_us = t->ws ? 0.0 : K_ITER_US * math_share;
  const double per_iter_us =
      barrier_us + (t->stages <= 2 ? DRAM_LATENCY_US : 0.0) + (folds ? W8A8_WGMMA_FOLD_US : 0.0);
  return per_iter_us * split->makespan_iters * t->ctas_per_sm;
}

/*
 * The m-tiles of a MoE launch of `rows` routed rows, summed over its experts: each expert's
 * rows X (binomial, rows draws of 1 in experts, as hm_expected_active_experts counts them)
 * pad to whole tiles, E[ceil(X / bm)] an expert. Taking the ceiling of the mean instead put
 * a cliff at whole tiles: DeepSeek-V3's 2048 rows (8.0 an active expert) cost bm 8 two
 * tiles an expert and 1.65-1.75x its measured time (H200, docs/PERF.md nineteenth session),
 * where Poisson rows pad to 1.41. Summed from the pmf's mode outwards (Poisson, the
 * binomial's limit at these experts' counts) while terms matter; past a spread of several
 * tiles the remainder is about uniform, half a tile an expert.
 */
static double expected_m_tiles(int64_t experts, int64_t rows, int bm) {
  const double lambda = (double)rows / (double)experts;
  if (lambda <= 0) return 0;
  if (sqrt(lambda) > 4.0 * bm) return (double)experts * (lambda / bm + (bm - 1.0) / (2.0 * bm));
  const int64_t mode = (int64_t)floor(lambda);
  const double at_mode = exp(mode * log(lambda) - lambda - lgamma((double)mode + 1.0));
  double sum = at_mode * (double)((mode + bm - 1) / bm), pmf = at_mode;
  for (int64_t k = mode + 1; pmf > 1e-12 * at_mode; k++) {
    pmf *= lambda / (double)k;
    sum += pmf * (double)((k + bm - 1) / bm);
  }
  pmf = at_mode;
  for (int64_t k = mode; k > 0 && pmf > 1e-12 * at_mode; k--) {
    pmf *= (double)k / lambda;
    sum += pmf * (double)((k - 1 + bm - 1) / bm);
  }
  return (double)experts * sum;
}

/*
 * The bytes tiles read again, in DRAM bytes' time: an expert's weights once for each of its
 * m-tiles, the activations once for each n-tile. The kernels walk tiles n fastest
 * (kernels/gemm_sched.cuh hm_tile_at), so the busy CTAs hold busy / n_tiles rows of tiles
 * at once: those rows share each weight tile, fetched from DRAM once a pass of the expert's
 * rows, and a row's activations stay in L2 while its n-tiles run. The rest come from L2.
 * Dense N = K = 8192 at eight tokens re-reads its 128 KiB of activations for each of 128
 * one-unit tiles and ran as fast as at one token (H100, docs/PERF.md twenty-fifth session).
 * Charging every m-tile's weights at DRAM's rate overpredicted W4A16 and fp8 from 512 rows
 * an expert by 1.2-2.5x (21 launches of N = K = 8192 and DeepSeek-V3's experts, H100,
 * thirtieth session): the RMS error of log(predicted / measured) falls from 70 % to 12 %.
 */
static double reread_bytes(const hm_roofline *r, const hm_device_profile *p, double experts, double m_tiles,
                           double n_tiles, double busy) {
  const double per_expert = experts > 0 ? r->weight_bytes / experts : 0;
  const double rows_at_once = fmax(1.0, busy / n_tiles);
  const double passes = fmin(m_tiles, fmax(1.0, m_tiles / rows_at_once));
  const double pass_rate = per_expert + r->act_bytes <= p->l2_bytes / 2.0 ? L2_BW_FACTOR : 1.0;
  const double weights = r->weight_bytes * ((passes - 1) / pass_rate + (m_tiles - passes) / L2_BW_FACTOR);
  const double rows_bytes = r->act_bytes / (experts * m_tiles) * (rows_at_once + 1);
  const double act_rate = fmin(r->act_bytes, rows_bytes) <= p->l2_bytes / 2.0 ? L2_BW_FACTOR : 1.0;
  return weights + r->act_bytes * (n_tiles - 1) / act_rate;
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
  const double m_tiles_per_expert = cfg->compute.type == HM_GEMM_DENSE
                                        ? ceil((double)valid_m / t->bm)
                                        : expected_m_tiles(lc->experts, valid_m, t->bm) / experts;
  const double n_tiles = (double)hm_gemm_n_tiles(cfg), k_iters = (double)hm_gemm_k_iters(cfg);
  const double tiles = experts * m_tiles_per_expert * n_tiles;
  const sk_split split = split_of(cfg, tiles, k_iters, p->sm_count);
  /* Average CTAs at work: total k-iterations over (makespan x CTAs launched). */
  const double busy = fmin((double)p->sm_count * t->ctas_per_sm, tiles * k_iters / split.makespan_iters);

  const double bw_bytes_us = p->mem_bw_gbs * 1e3;
  const double sm_cap_bytes_us = SM_BW_SHARE_MAX * bw_bytes_us / p->sm_count;
  const double cta_bytes_us = fmin(pipeline_bytes_in_flight(cfg) / DRAM_LATENCY_US, sm_cap_bytes_us);
  const double busy_sms = fmin((double)p->sm_count, ceil(busy / t->ctas_per_sm));
  const double stream_bytes_us = fmin(bw_bytes_us, fmin(busy * cta_bytes_us, busy_sms * sm_cap_bytes_us));
  const double dram_bytes = r.weight_bytes + r.act_bytes + r.out_bytes;
  const double reread_us_bytes = reread_bytes(&r, p, experts, m_tiles_per_expert, n_tiles, busy);
  const double fixup_bytes = split.fixup ? 2.0 * p->sm_count * t->ctas_per_sm * hm_gemm_acc_rows(t) * t->bn * 4 : 0;
  out->mem_us = (dram_bytes + reread_us_bytes + fixup_bytes / L2_BW_FACTOR) / stream_bytes_us;

  const double padded_flops = 2.0 * experts * m_tiles_per_expert * t->bm * n_tiles * t->bn * k_iters * t->bk;
  const double sm_share = fmin(1.0, busy / t->ctas_per_sm / p->sm_count);
  const double tensor_us = r.compute_us * (padded_flops / fmax(r.flops, 1.0));
  const bool quantized = hm_gemm_weight_bits(cfg->layer.weight) < 16;
  const double dequant_weights = quantized ? tiles * t->bn * k_iters * t->bk : 0.0;
  /* W4A8's f16 codes on sm_90 are priced as the fp8 operands: on the same tiles they ran
   * 1.01-1.04x faster (docs/PERF.md, twenty-second session), inside this model's error, and
   * the tables stay those the fp8 operands were tuned on. */
  const bool unpacks = t->mma == HM_MMA_SYNC && cfg->arch >= 90 && cfg->layer.act == HM_F8E4M3;
  const double dequant_rate = unpacks ? F8_UNPACK_WEIGHTS_PER_SM_US : DEQUANT_WEIGHTS_PER_SM_US;
  const double dequant_us = dequant_weights / (dequant_rate * p->sm_count * sm_share);
  double efficiency = t->mma == HM_MMA_WGMMA ? wgmma_tile_efficiency(t) : warp_tile_efficiency(cfg);
  if (t->mma == HM_MMA_SYNC && cfg->arch >= 90)
    efficiency *= fmin(1.0, MMA_SYNC_SM90_TFLOPS_PER_SM * p->sm_count / p->tflops_f16);
  out->compute_us = tensor_us / (sm_share * efficiency) + dequant_us;

  out->roofline_us = r.predicted_us;
  out->busy_ctas = busy;
  out->bw_gbs = stream_bytes_us * 1e-3;
  const double longer = fmax(out->mem_us, out->compute_us), shorter = fmin(out->mem_us, out->compute_us);
  out->predicted_us =
      LAUNCH_US + longer + OVERLAP_LOSS * shorter + iteration_us(cfg, &r, &split) + split.latency_us;
  return HM_OK;
}
