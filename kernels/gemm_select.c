/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Default tuning. Decode (few rows per expert) is pure weight bandwidth: a 16-row tile,
 * 256 columns, the k16 steps of each stage split over two warp groups, four stages,
 * Stream-K over all SMs. Up to 8 rows per expert, quantized weights take the 8-row tile
 * with swapped MMA operands, which halves the MMAs a weight unit costs. More rows per
 * expert move to taller tiles. Batch-invariant configs fix bk and warps_k (which set the
 * summation order) and drop Stream-K.
 */
#include "kernels/gemm_select.h"

#include <string.h>

#include "check.h"
#include "heuristics/roofline.h"
#include "kernels/gemm_config_w8a8.h"
#include "kernels/gemm_config_wgmma.h"
#include "kernels/gemm_launch.h"

/* Upper ends of the rows-per-expert classes; the last class is open. */
static const int64_t row_classes[] = {16, 32, 64};
#define ROW_CLASS_COUNT ((int)HM_ARRAY_SIZE(row_classes) + 1)

/* The class before the first, up to SWAP_ROWS rows per expert, where it applies. */
#define SWAP_CLASS (-1)
#define SWAP_ROWS 8

/*
 * Dequant is what the swapped tile saves time on beside the MMAs, so unquantized weights
 * keep the 16-row tile; batch-invariant configs keep one MMA shape for every M.
 */
static bool swap_class_applies(const hm_gemm_config *base) {
  return !base->compute.batch_invariant && hm_gemm_weight_bits(base->layer.weight) < 16;
}

static hm_gemm_tuning tuning_for_class(int cls, bool invariant) {
  static const hm_gemm_tuning swap_decode = {8, 256, 128, 1, 4, 2, 4, true, 4, 1, HM_MMA_SYNC, false};
  if (cls == SWAP_CLASS) return swap_decode;
  static const hm_gemm_tuning fast[ROW_CLASS_COUNT] = {
      {16, 256, 128, 1, 4, 2, 4, true, 4, 1, HM_MMA_SYNC, false},
      {32, 256, 128, 1, 4, 2, 4, true, 4, 1, HM_MMA_SYNC, false},
      {64, 256, 64, 1, 4, 2, 4, true, 4, 1, HM_MMA_SYNC, false},
      {128, 256, 128, 2, 4, 1, 3, true, 4, 1, HM_MMA_SYNC, false},
  };
  static const hm_gemm_tuning invariant_cfg[ROW_CLASS_COUNT] = {
      {16, 128, 64, 1, 2, 1, 6, false, 0, 2, HM_MMA_SYNC, false},
      {32, 128, 64, 1, 2, 1, 6, false, 0, 2, HM_MMA_SYNC, false},
      {64, 128, 64, 1, 2, 1, 4, false, 0, 2, HM_MMA_SYNC, false},
      {128, 256, 64, 2, 4, 1, 4, false, 0, 1, HM_MMA_SYNC, false},
  };
  return invariant ? invariant_cfg[cls] : fast[cls];
}

/*
 * On sm_90, from the (32, 64] rows-per-expert class on, the wgmma kernels: mma.sync tops
 * out near a third of Hopper's tensor rate (W8A8 fp8 block-scaled reached 109-144 TFLOP/s
 * at 128+ rows per expert, spilling its partial sums). Two warpgroups of 128 columns each
 * (64 for W8A8); 64 tokens a tile in the middle class, 128 beyond. Up to 32 rows per
 * expert the weights' bandwidth decides and mma.sync reaches it. Batch-invariant layers
 * stay on mma.sync, the instruction (and so the summation order) of their small-M kernels.
 */
#define WGMMA_FIRST_CLASS 2

/* f16 accumulation exists on the mma.sync kernels only. */
static bool wgmma_class_applies(const hm_gemm_config *base) {
  return !base->compute.batch_invariant && !base->compute.f16_acc && hm_gemm_wgmma_takes(base);
}

static hm_gemm_tuning wgmma_tuning_for_class(const hm_gemm_config *base, int cls) {
  static const hm_gemm_tuning mid = {64, 256, 128, 1, 8, 1, 4, true, 4, 1, HM_MMA_WGMMA, false};
  /* bk 128 over 4 stages beat bk 64 over 6 at every M from 256 to 16384 (N = K = 8192, H200,
   * docs/PERF.md 2026-12-03): half the k-iterations, each with its barrier. */
  static const hm_gemm_tuning large = {128, 256, 128, 1, 8, 1, 4, true, 4, 1, HM_MMA_WGMMA, false};
  /* W8A8 keeps a stage's partial sums beside the accumulators: 64 columns a warpgroup, two
   * warpgroups. The stage is half the 16-bit one's bytes, so six of them fit. */
  static const hm_gemm_tuning w8a8_mid = {64, 128, 128, 1, 8, 1, 6, true, 4, 1, HM_MMA_WGMMA, false};
  static const hm_gemm_tuning w8a8_large = {128, 128, 128, 1, 8, 1, 6, true, 4, 1, HM_MMA_WGMMA, false};
  if (hm_gemm_is_w8a8(&base->layer)) return cls == ROW_CLASS_COUNT - 1 ? w8a8_large : w8a8_mid;
  return cls == ROW_CLASS_COUNT - 1 ? large : mid;
}

/* Narrows bn (and warps_n) for layers with few columns; a wgmma warpgroup keeps its 4 warps. */
static void fit_columns(hm_gemm_tuning *t, int64_t n) {
  const int64_t n_pad = (n + 63) / 64 * 64;
  const int min_warps_n = t->mma == HM_MMA_WGMMA ? 4 : 1;
  while (t->bn > 64 && t->bn / 2 >= n_pad) {
    t->bn /= 2;
    if (t->warps_n > min_warps_n) t->warps_n /= 2;
  }
}

/*
 * Fewer stages, then CTAs per SM, then (outside batch-invariant configs, whose bk is
 * fixed) a smaller bk, until shared memory fits the arch.
 */
static hm_status fit_smem(hm_gemm_config *c) {
  const size_t limit = hm_gemm_arch_smem_limit(c->arch);
  if (limit == 0) HM_FAIL(HM_UNSUPPORTED, "no GEMM kernels for sm_%d", c->arch);
  hm_gemm_tuning *t = &c->tuning;
  while (t->ctas_per_sm > 1 && hm_gemm_config_smem_bytes(c) * (size_t)t->ctas_per_sm > limit) {
    if (t->stages > 3) t->stages--;
    else t->ctas_per_sm--;
  }
  const int min_stages = t->mma == HM_MMA_WGMMA ? 3 : 2;
  for (;;) {
    while (t->stages > min_stages && hm_gemm_config_smem_bytes(c) > limit) t->stages--;
    const bool can_halve = !c->compute.batch_invariant && t->bk > 64 && (t->bk / 32) % t->warps_k == 0;
    if (hm_gemm_config_smem_bytes(c) <= limit || !can_halve) return HM_OK;
    t->bk /= 2;
    t->stages = 3;
  }
}

static int64_t effective_experts(const hm_gemm_config *base) {
  return base->compute.type == HM_GEMM_DENSE ? 1 : base->layer.experts;
}

static int row_class(const hm_gemm_config *base, int64_t valid_m) {
  const int64_t experts = effective_experts(base);
  if (swap_class_applies(base) && valid_m <= SWAP_ROWS * experts) return SWAP_CLASS;
  for (int i = 0; i < (int)HM_ARRAY_SIZE(row_classes); i++)
    if (valid_m <= row_classes[i] * experts) return i;
  return ROW_CLASS_COUNT - 1;
}

/* valid_m: the M the tile is chosen for (hm_gemm_prefer_ws). */
static hm_status select_class(const hm_gemm_config *base, int cls, int64_t valid_m, hm_gemm_config *out) {
  *out = *base;
  out->tuning = tuning_for_class(cls, base->compute.batch_invariant);
  if (cls >= WGMMA_FIRST_CLASS && wgmma_class_applies(base)) out->tuning = wgmma_tuning_for_class(base, cls);
  /* Unquantized units are four times wider than 4-bit ones: keep stages affordable. */
  if (hm_gemm_weight_bits(base->layer.weight) == 16) out->tuning.bk = 64;
  if (hm_gemm_is_w8a8(&base->layer)) hm_gemm_w8a8_fit(base, &out->tuning);
  fit_columns(&out->tuning, base->layer.n);
  HM_CHECK(fit_smem(out));
  HM_CHECK(hm_gemm_config_check(out));
  return hm_gemm_prefer_ws(out, valid_m);
}

/*
 * W8A8 launches of 32- and 64-row tiles: the warp-specialized kernel's 64-token tile, two
 * warpgroups of 128 columns, streams the weights near the copy rate. fp8 block-scaled masked
 * gate_up at 256 and 1024 rows an expert (DeepSeek-V3) ran 1752 and 1827 us on it
 * (4.2-4.3 TB/s), 1.53x and 2.10x the mma.sync bm32 and bm64 tiles the cost model picks
 * (fourteenth session); DeepSeek-V3's dense MLP at 32 and 64 tokens 1.03-1.06x and
 * 1.37-1.56x (fifteenth session, docs/PERF.md). Indexed launches take it too, their token
 * rows gathered by the producer's cp.async: a stage is 8 KiB of tokens (four 16-byte copies
 * a producer thread) against 32 KiB of weights, where the 128-token tile's gathered 32 KiB
 * held its consumers back (twelfth session). On sm_90a the mma.sync bm64 tile it replaces
 * there spills 32-96 bytes a thread (ptxas 13.0). Not yet timed on indexed launches.
 */
static bool w8a8_mid(const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  return hm_gemm_is_w8a8(&cfg->layer) && !t->ws && (t->bm == 32 || t->bm == 64) && wgmma_class_applies(cfg);
}

/* cfg = ws where its stages fit at bk and, if tma, its producer loads token tiles with TMA:
 * a probe whose refusals are answers, not errors. */
static void take_if_legal(hm_gemm_config *cfg, hm_gemm_config *ws, int bk, bool tma) {
  hm_error_quiet_begin();
  const bool fits = (!tma || hm_gemm_tma_a(ws)) && fit_smem(ws) == HM_OK && ws->tuning.bk == bk &&
                    hm_gemm_config_check(ws) == HM_OK;
  hm_error_quiet_end();
  if (fits) *cfg = *ws;
}

/*
 * Measured on the H200 (docs/PERF.md, 2026-12-04 twelfth session): with TMA token tiles the
 * warp-specialized kernel runs fp8 block-scaled groups of 4096 rows 1.19-1.22x and W4A16
 * dense M = 4096 1.12x faster than the plain kernel of the same tile. Without TMA (indexed
 * launches gather their token rows) it ran 0.75x. 16-bit weights were not measured, nor
 * tiles under 128 tokens but W8A8's 64-token one (w8a8_mid).
 */
hm_status hm_gemm_prefer_ws(hm_gemm_config *cfg, int64_t valid_m) {
  HM_CHECK_NOT_NULL(cfg);
  const hm_gemm_tuning *t = &cfg->tuning;
  const bool quantized = hm_gemm_is_w8a8(&cfg->layer) || hm_gemm_weight_bits(cfg->layer.weight) < 16;
  hm_gemm_config ws = *cfg;
  if (w8a8_mid(cfg)) {
    static const hm_gemm_tuning mid_ws = {64, 256, 128, 1, 8, 1, 4, true, 4, 1, HM_MMA_WGMMA, true};
    ws.tuning = mid_ws;
    fit_columns(&ws.tuning, cfg->layer.n);
    take_if_legal(cfg, &ws, mid_ws.bk, false);
    return HM_OK;
  }
  if (t->mma != HM_MMA_WGMMA || t->ws || t->bm < 128 || t->warps_m * t->warps_n * t->warps_k != 8 ||
      t->ctas_per_sm != 1 || !quantized)
    return HM_OK;
  ws.tuning.ws = true;
  /* W8A8's warp-specialized kernel takes tokens as the wgmma M: a warpgroup's 64 token rows
   * against all bn columns make one m64nNk32 a k32 step with the widest N, and two row
   * scales a thread a fold (gemm_w8a8_ws.cuh). 256 tokens a tile read 0.75x the L2 bytes a
   * flop of 128 (a 48 KiB stage for twice the flops of a 32 KiB one), and L2 bytes are what
   * bound the 128-token tile: fp8 block-scaled groups of 4096 rows ran 1.29x (gate_up) and
   * 1.23x (down) faster on it (docs/PERF.md, fourteenth session). The 256-token tile is no
   * longer bound by them: clusters of two sharing its token tile by TMA multicast, a third
   * fewer again, ran 0.96-1.00x (fifteenth session, reverted). Fewer rows an expert would
   * pad more of each tile. */
  const bool tall = valid_m / effective_experts(cfg) > HM_GEMM_TALL_ROWS;
  if (hm_gemm_is_w8a8(&cfg->layer) && t->bm == 128) {
    ws.tuning.warps_m = 2;
    ws.tuning.warps_n = 4;
    if (tall) ws.tuning.bm = 256;
  }
  /* Weight-only: 256 tokens against 128 columns, one warpgroup a 64-column half, its output
   * tile staged in a ring slot (gemm_ws_wgmma.cuh). On the H100 (docs/PERF.md thirtieth
   * session) W4A16 N = K = 8192 ran 1.07x, 1.02x, 1.03x and 1.03x faster on it than on
   * bm128 bn256 at M = 1024, 2048, 4096 and 16384, and 0.96x at 512; DeepSeek-V3's grouped
   * gate_up 1.02x and 1.01x at 1024 and 4096 rows an expert, its down 0.98x and 1.01x.
   * 8-bit weights were not timed on it. Where its three stages do not fit (the row maps and
   * counts of 257 experts), the 128-token tile stays. */
  const bool four_bit = !hm_gemm_is_w8a8(&cfg->layer) && hm_gemm_weight_bits(cfg->layer.weight) == 4;
  if (four_bit && t->bm == 128 && t->bn == 256 && tall) {
    hm_gemm_config tall_ws = ws;
    tall_ws.tuning.bm = 256;
    tall_ws.tuning.bn = 128;
    tall_ws.tuning.warps_m = 1;
    tall_ws.tuning.warps_n = 8;
    take_if_legal(cfg, &tall_ws, t->bk, true);
    if (cfg->tuning.ws) return HM_OK;
  }
  take_if_legal(cfg, &ws, t->bk, true);
  return HM_OK;
}

hm_status hm_gemm_select(const hm_gemm_config *base, int64_t valid_m, hm_gemm_config *out) {
  HM_CHECK_NOT_NULL(base);
  HM_CHECK_NOT_NULL(out);
  return select_class(base, row_class(base, valid_m), valid_m, out);
}

hm_status hm_gemm_plan_make(const hm_gemm_config *base, hm_gemm_plan *out) {
  HM_CHECK_NOT_NULL(base);
  HM_CHECK_NOT_NULL(out);
  memset(out, 0, sizeof(*out));
  const int64_t experts = effective_experts(base);
  if (swap_class_applies(base)) {
    HM_CHECK(select_class(base, SWAP_CLASS, 0, &out->cfg[out->count]));
    out->m_hi[out->count++] = SWAP_ROWS * experts;
  }
  /* Each class's kernel as chosen for its smallest M. */
  for (int cls = 0; cls < ROW_CLASS_COUNT; cls++) {
    HM_CHECK(select_class(base, cls, cls > 0 ? row_classes[cls - 1] * experts : 0, &out->cfg[out->count]));
    out->m_hi[out->count++] = cls < (int)HM_ARRAY_SIZE(row_classes) ? row_classes[cls] * experts : INT64_MAX;
  }
  return HM_OK;
}

int hm_gemm_plan_pick(const hm_gemm_plan *plan, int64_t valid_m) {
  for (int i = 0; i < plan->count; i++)
    if (valid_m <= plan->m_hi[i]) return i;
  return plan->count - 1;
}

/*
 * The rows routed to a contiguous launch of m rows. Each active expert's rows are padded
 * to block_m, so m overstates them, at decode by up to block_m times (8 tokens top-8 fill
 * 128 rows at block_m 16), and an estimate from m would stream 12x the experts it does.
 * Inverts the expected padded count: block_m for each active expert's first rows, one row
 * for each further row (the padding of fuller experts averages out).
 */
static int64_t contiguous_rows(int64_t m, int block_m, int64_t experts) {
  if (block_m <= 1 || experts <= 1 || m <= 1) return m;
  int64_t lo = 1, hi = m;
  while (lo < hi) {
    const int64_t r = lo + (hi - lo + 1) / 2;
    const double active = hm_expected_active_experts(experts, (double)r);
    if (block_m * active + ((double)r - active) <= (double)m)
      lo = r;
    else
      hi = r - 1;
  }
  return lo;
}

int64_t hm_gemm_valid_m(const hm_gemm_args *args, int64_t experts) {
  switch (args->type) {
  case HM_GEMM_INDEXED: return args->m * args->top_k;
  case HM_GEMM_GROUPED_MASKED: return args->routed_rows > 0 ? args->routed_rows : args->m * experts;
  case HM_GEMM_GROUPED_CONTIGUOUS:
    return args->routed_rows > 0 ? args->routed_rows : contiguous_rows(args->m, args->block_m, experts);
  default: return args->m;
  }
}
