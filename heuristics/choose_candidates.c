/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The candidate tunings: the cross product of tile, warp grid, pipeline depth,
 * Stream-K and CTAs per SM, kept only where the kernel accepts it
 * (hm_gemm_config_check) and the device can hold it (shared memory per block and per
 * SM, threads and registers per SM). Cheap structural tests run first so that the
 * kernel's check, which records an error for every refusal, sees few losers.
 */
#include <stdlib.h>

#include "check.h"
#include "heuristics/choose.h"
#include "kernels/gemm_config_w8a8.h"
#include "kernels/gemm_config_wgmma.h"
#include "kernels/gemm_select.h"

#define MAX_THREADS_PER_SM 2048
#define REGS_PER_SM 65536
/* Registers a GEMM thread needs beside its accumulators: addresses, fragments, dequant. */
#define BASE_REGS_PER_THREAD 64
/* The same in a plain wgmma kernel, whose A-fragment ring and copy plans stay live across
 * the asynchronous MMAs: ptxas 13.0 (sm_90a) gave bm64 w1x8x1 207-210 registers for its 64
 * accumulators, and 188 bytes of spills when the cost model picked it two CTAs an SM. */
#define WGMMA_BASE_REGS_PER_THREAD 120
/* And what 8-bit weight codes add there: twice a 4-bit unit's code registers in the ring.
 * ptxas 13.0 spilled bm128 bn256 w1x8x1 (128 accumulators) 64-88 bytes a thread on
 * gathered and grouped u8 launches, 32-48 on u4z ones (thirtieth session). */
#define WGMMA_8BIT_CODE_REGS 16
#define MAX_REGS_PER_THREAD 255
/* What a warp-specialized kernel's producer threads keep (gemm_ws_pipe.cuh). */
#define WS_PRODUCER_REGS 56
/* A W8A8 warp-specialized consumer beside its sums: descriptors, row scales and addresses,
 * with no fragments (gemm_w8a8_ws.cuh). Three consumer warpgroups hold 128 sums in 152
 * registers without spilling (ptxas 13.0, test_gemm_wgmma_nvrtc). */
#define WS_W8A8_BASE_REGS 24
/*
 * Weight columns one warp (mma.sync) or warpgroup (wgmma) may span, the swapped 8-row tile
 * aside: a thread keeps every unit column's dequantized fragments and scale operands, which
 * the register estimate above does not count. Wider ones spilled under ptxas 13.0 for
 * sm_90a once the cost model started picking them two CTAs an SM (2026-12-04): bm16
 * bn256 w1x1x4 c2 at 255 registers and 12-28 bytes of spills, the wgmma bm64 bn256 w1x4x1
 * c2 at 255 and 80 bytes; the 8-row tile over four units stays at 126.
 */
#define MAX_WIDE_COLUMNS 128

static const int bms[] = {8, 16, 32, 64, 128, HM_CHOOSE_MAX_BM};
static const int bns[] = {64, 128, 256};
static const int bks[] = {64, 128, 256};
static const int warp_counts[] = {1, 2, 4};
static const int stage_counts[] = {2, 3, 4, 6, 8};
static const int ctas_per_sm[] = {1, 2, 3, 4};
static const int sk_min_iters = 4;
/* The wgmma kernel's (sm_90): tokens per warpgroup 32..256, warpgroups of 4 warps along n. */
static const int wgmma_bms[] = {64, 128, 192, HM_CHOOSE_MAX_BM};
static const int wgmma_bks[] = {64, 128};
static const int wgmma_warps_m[] = {1, 2};
static const int wgmma_warps_n[] = {4, 8};
static const int wgmma_stage_counts[] = {3, 4, 5, 6};

/* Rules of both kernels that come from the layer: group and bk, padding, batch invariance. */
static bool layer_fit_ok(const hm_gemm_config *base, const hm_gemm_tuning *t) {
  const int group = base->layer.group;
  if (group != 0 && group % t->bk != 0 && t->bk % group != 0) return false;
  /* A tile wider than the padded N only computes padding. */
  const int64_t n_pad = (base->layer.n + 63) / 64 * 64, k_pad = (base->layer.k + 15) / 16 * 16;
  if (t->bn > 64 && t->bn / 2 >= n_pad) return false;
  if (t->bk > 64 && t->bk / 2 >= k_pad) return false;
  /* Batch invariance fixes the summation order: one bk and warps_k, no Stream-K. */
  if (base->compute.batch_invariant && (t->bk != 64 || t->warps_k != 1 || t->stream_k)) return false;
  return true;
}

/* The wgmma kernels' warpgroup rules (gemm_config_wgmma.c, and the W8A8 one's bk of 128
 * in gemm_config_w8a8.c), likewise without errors. */
static bool wgmma_grid_ok(const hm_gemm_config *base, const hm_gemm_tuning *t) {
  if (!hm_gemm_wgmma_takes(base) || base->compute.batch_invariant) return false;
  if (t->warps_k != 1 || t->warps_n % 4 != 0 || t->bn % (64 * (t->warps_n / 4)) != 0) return false;
  if (hm_gemm_is_w8a8(&base->layer) && t->bk != 128) return false;
  if (t->bn / (t->warps_n / 4) > MAX_WIDE_COLUMNS) return false;
  hm_gemm_config cfg = *base;
  cfg.tuning = *t;
  const int rows = t->bm / t->warps_m;
  if (t->bm % t->warps_m != 0 || rows % 32 != 0 || rows > 256 ||
      hm_gemm_wgmma_sum_regs(&cfg) > hm_gemm_wgmma_max_sum_regs(&cfg))
    return false;
  return t->stages >= 3 && t->bm <= 32 * t->warps_m * t->warps_n;
}

/* The kernel's own tile rules, without recording an error for each refusal. */
static bool shape_ok(const hm_gemm_config *base, const hm_gemm_tuning *t) {
  if (t->mma == HM_MMA_WGMMA) return wgmma_grid_ok(base, t) && layer_fit_ok(base, t);
  const int acc_rows = hm_gemm_acc_rows(t);
  if (t->bm == 8 ? t->warps_m != 1 : t->bm % (16 * t->warps_m) != 0) return false;
  if (t->bn % (64 * t->warps_n) != 0) return false;
  if ((t->bk / 16) % t->warps_k != 0) return false;
  if ((acc_rows / t->warps_m / 16) * (t->bn / t->warps_n / 64) > 4) return false;
  if (t->bm != 8 && t->bn / t->warps_n > MAX_WIDE_COLUMNS) return false;
  const int threads = 32 * t->warps_m * t->warps_n * t->warps_k;
  if (threads > 1024 || acc_rows > threads) return false;
  /* The swapped 8-row tile: quantized weights only, and one MMA shape under batch invariance. */
  if (t->bm == 8 && (hm_gemm_weight_bits(base->layer.weight) == 16 || base->compute.batch_invariant)) return false;
  return layer_fit_ok(base, t);
}

/* Whether a weight-only wgmma tiling runs on the plain kernel, as hm_gemm_prefer_ws leaves
 * it: the warp-specialized one it may move to splits the registers its own way. Whether it
 * moves does not depend on M (past HM_GEMM_TALL_ROWS only its tile does). */
static bool runs_plain_wgmma(const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  if (t->mma != HM_MMA_WGMMA || t->ws || hm_gemm_is_w8a8(&cfg->layer)) return false;
  hm_gemm_config as_run = *cfg;
  return hm_gemm_prefer_ws(&as_run, 0) == HM_OK && !as_run.tuning.ws;
}

static bool device_ok(const hm_gemm_config *cfg, const hm_device_profile *p) {
  const hm_gemm_tuning *t = &cfg->tuning;
  const size_t smem = hm_gemm_config_smem_bytes(cfg);
  if (smem > (size_t)p->smem_per_block_bytes || smem * (size_t)t->ctas_per_sm > (size_t)p->smem_per_sm_bytes)
    return false;
  const int threads = hm_gemm_config_threads(cfg);
  if (threads * t->ctas_per_sm > MAX_THREADS_PER_SM) return false;
  const int acc_regs = t->mma == HM_MMA_WGMMA
                           ? hm_gemm_wgmma_sum_regs(cfg)
                           : (hm_gemm_acc_rows(t) / t->warps_m / 16) * (t->bn / t->warps_n / 64) * 32;
  /* A warp-specialized kernel's producer warpgroup gives its registers to the consumers
   * (setmaxnreg): only the consumers need room for the sums. */
  const int producers = t->ws ? HM_GEMM_PRODUCER_THREADS : 0;
  /* The 8-bit mma.sync tiles past 8 rows keep a stage's partial sums beside the f32 ones and
   * spill even alone on an SM (ptxas 13.0: bm64 w2x4x1 144-224 bytes); two an SM spilled
   * 352-944 bytes (bm32 w1x4x1, bm64 bk64) when the cost model began to pick them. */
  if (t->mma == HM_MMA_SYNC && hm_gemm_is_w8a8(&cfg->layer) && t->bm != 8 && t->ctas_per_sm > 1) return false;
  const int code_regs = hm_gemm_weight_bits(cfg->layer.weight) == 8 ? WGMMA_8BIT_CODE_REGS : 0;
  if (WGMMA_BASE_REGS_PER_THREAD + acc_regs + code_regs > MAX_REGS_PER_THREAD && runs_plain_wgmma(cfg))
    return false;
  int base = t->mma == HM_MMA_WGMMA && !t->ws ? WGMMA_BASE_REGS_PER_THREAD : BASE_REGS_PER_THREAD;
  if (t->ws && hm_gemm_is_w8a8(&cfg->layer)) base = WS_W8A8_BASE_REGS;
  const int regs = (base + acc_regs) * (threads - producers) + WS_PRODUCER_REGS * producers;
  return regs * t->ctas_per_sm <= REGS_PER_SM;
}

bool hm_choose_tuning_legal(const hm_gemm_config *base, const hm_gemm_tuning *tuning, const hm_device_profile *p) {
  if (base == NULL || tuning == NULL || p == NULL) return false;
  hm_gemm_config cfg = *base;
  cfg.tuning = *tuning;
  if (!shape_ok(base, tuning) || !device_ok(&cfg, p)) return false;
  hm_error_quiet_begin();
  const bool legal = hm_gemm_config_check(&cfg) == HM_OK;
  hm_error_quiet_end();
  return legal;
}

/* Appends t if legal, growing the array by doubling. */
static hm_status push_legal(const hm_gemm_config *base, const hm_device_profile *p, const hm_gemm_tuning *t,
                            hm_gemm_tuning **items, int *count, int *cap) {
  if (!hm_choose_tuning_legal(base, t, p)) return HM_OK;
  if (*count == *cap) {
    const int grown_cap = *cap ? *cap * 2 : 256;
    hm_gemm_tuning *grown = realloc(*items, (size_t)grown_cap * sizeof(*grown));
    if (grown == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "%d candidate tunings", grown_cap);
    *items = grown;
    *cap = grown_cap;
  }
  (*items)[(*count)++] = *t;
  return HM_OK;
}

/* Every warp grid, depth, schedule and occupancy of one tile shape. */
static hm_status push_tile(const hm_gemm_config *base, const hm_device_profile *p, hm_gemm_tuning t,
                           hm_gemm_tuning **items, int *count, int *cap) {
  for (size_t wm = 0; wm < HM_ARRAY_SIZE(warp_counts); wm++)
    for (size_t wn = 0; wn < HM_ARRAY_SIZE(warp_counts); wn++)
      for (size_t wk = 0; wk < HM_ARRAY_SIZE(warp_counts); wk++)
        for (size_t s = 0; s < HM_ARRAY_SIZE(stage_counts); s++)
          for (size_t c = 0; c < HM_ARRAY_SIZE(ctas_per_sm); c++)
            for (int sk = 0; sk < 2; sk++) {
              t.warps_m = warp_counts[wm];
              t.warps_n = warp_counts[wn];
              t.warps_k = warp_counts[wk];
              t.stages = stage_counts[s];
              t.ctas_per_sm = ctas_per_sm[c];
              t.stream_k = sk == 1;
              t.sk_min_iters = t.stream_k ? sk_min_iters : 0;
              HM_CHECK(push_legal(base, p, &t, items, count, cap));
            }
  return HM_OK;
}

/* Every wgmma tile, warpgroup grid, depth, schedule and occupancy. Not the warp-specialized
 * kernels: the cost model does not tell them apart from the plain ones; the choice turns a
 * plain tile into its warp-specialized kernel where that was measured faster
 * (hm_gemm_prefer_ws), and a tuning table or a pinned plan may still name them. */
static hm_status push_wgmma(const hm_gemm_config *base, const hm_device_profile *p, hm_gemm_tuning **items,
                            int *count, int *cap) {
  for (size_t m = 0; m < HM_ARRAY_SIZE(wgmma_bms); m++)
    for (size_t nn = 0; nn < HM_ARRAY_SIZE(bns); nn++)
      for (size_t k = 0; k < HM_ARRAY_SIZE(wgmma_bks); k++)
        for (size_t wm = 0; wm < HM_ARRAY_SIZE(wgmma_warps_m); wm++)
          for (size_t wn = 0; wn < HM_ARRAY_SIZE(wgmma_warps_n); wn++)
            for (size_t s = 0; s < HM_ARRAY_SIZE(wgmma_stage_counts); s++)
              for (int c = 1; c <= 2; c++)
                for (int sk = 0; sk < 2; sk++) {
                  const hm_gemm_tuning t = {.bm = wgmma_bms[m], .bn = bns[nn], .bk = wgmma_bks[k],
                                            .warps_m = wgmma_warps_m[wm], .warps_n = wgmma_warps_n[wn],
                                            .warps_k = 1, .stages = wgmma_stage_counts[s], .stream_k = sk == 1,
                                            .sk_min_iters = sk == 1 ? sk_min_iters : 0, .ctas_per_sm = c,
                                            .mma = HM_MMA_WGMMA};
                  HM_CHECK(push_legal(base, p, &t, items, count, cap));
                }
  return HM_OK;
}

hm_status hm_choose_candidates(const hm_gemm_config *base, const hm_device_profile *profile, hm_gemm_tuning **out,
                               int *count) {
  HM_CHECK_NOT_NULL(base);
  HM_CHECK_NOT_NULL(profile);
  HM_CHECK_NOT_NULL(out);
  HM_CHECK_NOT_NULL(count);
  *out = NULL;
  *count = 0;
  hm_status ret = HM_OK;
  hm_gemm_tuning *items = NULL;
  int n = 0, cap = 0;
  for (size_t m = 0; m < HM_ARRAY_SIZE(bms); m++)
    for (size_t nn = 0; nn < HM_ARRAY_SIZE(bns); nn++)
      for (size_t k = 0; k < HM_ARRAY_SIZE(bks); k++) {
        hm_gemm_tuning t = {.bm = bms[m], .bn = bns[nn], .bk = bks[k]};
        HM_CHECK_GOTO(push_tile(base, profile, t, &items, &n, &cap), fail);
      }
  for (int rows = 8; rows <= 16; rows += 8) {
    hm_gemm_tuning unit;
    if (hm_choose_unit_tile(base, profile, rows, &unit))
      HM_CHECK_GOTO(push_legal(base, profile, &unit, &items, &n, &cap), fail);
  }
  if (hm_gemm_wgmma_takes(base) && !base->compute.batch_invariant)
    HM_CHECK_GOTO(push_wgmma(base, profile, &items, &n, &cap), fail);
  *out = items;
  *count = n;
  return HM_OK;
fail:
  free(items);
  return ret;
}
