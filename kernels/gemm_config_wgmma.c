/* SPDX-License-Identifier: Apache-2.0 */
/* Legality and shared memory of wgmma configs (kernels/gemm_wgmma_traits.cuh, and the W8A8 stage of
 * kernels/gemm_w8a8_wgmma.cuh). */
#include "kernels/gemm_config_wgmma.h"

#include "check.h"
#include "kernels/gemm_config_w8a8.h"
#include "kernels/gemm_launch.h"

bool hm_gemm_wgmma_takes(const hm_gemm_config *base) {
  if (base->arch != 90) return false;
  /* W8A8: fp8 x fp8 or int8 x int8 (gemm_w8a8_wgmma.cuh); the layer check names the rest. */
  if (hm_gemm_is_w8a8(&base->layer)) return base->layer.weight == base->layer.act;
  const int bits = hm_gemm_weight_bits(base->layer.weight);
  const bool act16 = base->layer.act == HM_F16 || base->layer.act == HM_BF16;
  return act16 && (bits == 4 || bits == 8 || bits == 16);
}

int hm_gemm_wgmma_acc_regs(const hm_gemm_tuning *t) {
  if (t->warps_m < 1 || t->warps_n < 4) return 0;
  return t->bn / (t->warps_n / 4) / 64 * (t->bm / t->warps_m / 2);
}

int hm_gemm_wgmma_sum_regs(const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  const int acc = hm_gemm_wgmma_acc_regs(t);
  if (!hm_gemm_is_w8a8(&cfg->layer)) return acc;
  /* The warp-specialized kernel folds one m64 block at a time (gemm_w8a8_ws.cuh). */
  return t->ws && t->warps_n >= 4 ? acc + t->bn / (t->warps_n / 4) / 2 : 2 * acc;
}

/* Consumer warpgroups of a warp-specialized tile. */
static int ws_consumers(const hm_gemm_tuning *t) {
  return t->warps_m * t->warps_n / 4;
}

int hm_gemm_wgmma_max_sum_regs(const hm_gemm_config *cfg) {
  /* The warp-specialized W8A8 consumers get 224 registers (setmaxnreg) as two warpgroups,
   * 152 as three; what the sums leave (32, 24) holds addresses, descriptors and scales.
   * The others share 168 or fewer. */
  if (!hm_gemm_is_w8a8(&cfg->layer) || !cfg->tuning.ws) return 128;
  return ws_consumers(&cfg->tuning) == 3 ? 128 : 192;
}

/* The warp-specialized kernels (gemm_ws_pipe.cuh) split the SM's registers between their
 * producer and two consumer warpgroups (8 computing warps), one CTA an SM; W8A8 also runs
 * three of one m64 block each, at 152 registers, too few for the weight-only dequant. */
static hm_status check_ws(const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  const int consumers = ws_consumers(t); /* warps_n is whole warpgroups (hm_gemm_wgmma_check) */
  if (!(consumers == 2 || (consumers == 3 && hm_gemm_is_w8a8(&cfg->layer))) || t->ctas_per_sm != 1)
    HM_FAIL(HM_INVALID_ARGUMENT,
            "warp-specialized wgmma: %dx%d warps and %d CTAs an SM (it needs two consumer warpgroups, "
            "or three for W8A8, one CTA an SM)",
            t->warps_m, t->warps_n, t->ctas_per_sm);
  return HM_OK;
}

hm_status hm_gemm_wgmma_check(const hm_gemm_config *cfg) {
  HM_CHECK_NOT_NULL(cfg);
  const hm_gemm_tuning *t = &cfg->tuning;
  const int bits = hm_gemm_weight_bits(cfg->layer.weight);
  if (cfg->arch != 90)
    HM_FAIL(HM_UNSUPPORTED, "the wgmma GEMM kernel is built for sm_90a only, not sm_%d", cfg->arch);
  if (!hm_gemm_is_w8a8(&cfg->layer) && bits != 4 && bits != 8 && bits != 16)
    HM_FAIL(HM_UNSUPPORTED, "the wgmma GEMM kernel takes 4-, 8- or 16-bit weights, not %s",
            hm_dtype_name(cfg->layer.weight));
  if (t->warps_k != 1 || t->warps_m < 1 || t->warps_n < 4 || t->warps_n % 4 != 0)
    HM_FAIL(HM_INVALID_ARGUMENT,
            "wgmma warp grid %dx%dx%d: warps_n must be a multiple of 4 (warpgroups), warps_k 1", t->warps_m,
            t->warps_n, t->warps_k);
  const int wg_n = t->warps_n / 4;
  if (t->bn < 64 || t->bn % (64 * wg_n) != 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "wgmma tile bn=%d must give each of %d warpgroups along n whole 64 columns",
            t->bn, wg_n);
  const int rows = t->bm / t->warps_m;
  if (t->bm % t->warps_m != 0 || rows % 32 != 0 || rows < 32 || rows > 256)
    HM_FAIL(HM_INVALID_ARGUMENT,
            "wgmma tile bm=%d: each of %d warpgroups along m needs 32..256 rows, a multiple of 32", t->bm,
            t->warps_m);
  if (hm_gemm_wgmma_sum_regs(cfg) > hm_gemm_wgmma_max_sum_regs(cfg))
    HM_FAIL(HM_INVALID_ARGUMENT,
            "wgmma tile %dx%d holds %d accumulators (and W8A8 stage partial sums) per thread (at most %d)",
            t->bm, t->bn, hm_gemm_wgmma_sum_regs(cfg), hm_gemm_wgmma_max_sum_regs(cfg));
  if (t->stages < 3) HM_FAIL(HM_INVALID_ARGUMENT, "wgmma kernels need stages >= 3, not %d", t->stages);
  return t->ws ? check_ws(cfg) : HM_OK;
}

static size_t stage_bytes(const hm_gemm_config *cfg) {
  const size_t stage =
      hm_gemm_is_w8a8(&cfg->layer) ? hm_gemm_w8a8_wgmma_stage_bytes(cfg) : hm_gemm_wo_stage_bytes(cfg);
  return (stage + 1023) / 1024 * 1024;
}

/* The warp-specialized kernels stage their tile in the output type: rows an odd number of
 * words apart for weight-only (hm_wgws_c_pitch), 4 banks apart for W8A8 (hm_w8ss_c_pitch),
 * or as the tensor stores read it, without padding (hm_tc_tile). */
static size_t staged_out_bytes(const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  if (hm_gemm_tma_c(cfg)) return (size_t)t->bm * t->bn * 2;
  return (size_t)t->bm * ((size_t)t->bn * 2 + (hm_gemm_is_w8a8(&cfg->layer) ? 16 : 4));
}

/* Warp-specialized: STAGES stages, the staged C tile of C_BYTES beside them, barriers (full
 * and empty a stage, two a map set), two map sets (the bytes of one of 2 bm rows). */
static size_t ws_smem_bytes(const hm_gemm_config *cfg, int stages, size_t c_bytes) {
  return 1024 + stage_bytes(cfg) * (size_t)stages + c_bytes + (2 * (size_t)stages + 4) * 8 +
         hm_gemm_maps_bytes(cfg, 2 * (size_t)cfg->tuning.bm);
}

/* Only where K fills every k-tile: a K tail reads its slot's bytes past K as weights times
 * zero tokens (gemm_ws_pipe.cuh), and output values staged there may not be finite. */
bool hm_gemm_ws_c_in_ring(const hm_gemm_config *cfg) {
  const size_t c_bytes = staged_out_bytes(cfg);
  return cfg->tuning.ws && !hm_gemm_is_w8a8(&cfg->layer) && cfg->layer.k % cfg->tuning.bk == 0 &&
         stage_bytes(cfg) >= c_bytes && ws_smem_bytes(cfg, 3, c_bytes) > hm_gemm_arch_smem_limit(cfg->arch);
}

size_t hm_gemm_wgmma_smem_bytes(const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  if (t->ws) return ws_smem_bytes(cfg, t->stages, hm_gemm_ws_c_in_ring(cfg) ? 0 : staged_out_bytes(cfg));
  const size_t pipe = stage_bytes(cfg) * (size_t)t->stages;
  const size_t staged_c = (size_t)t->bm * ((size_t)t->bn * 4 + 8);
  return 1024 + (pipe > staged_c ? pipe : staged_c) + hm_gemm_maps_bytes(cfg, (size_t)t->bm);
}
