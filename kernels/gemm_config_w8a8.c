/* SPDX-License-Identifier: Apache-2.0 */
/* Layer, legality, shared memory and default tuning of W8A8 configs. */
#include "kernels/gemm_config_w8a8.h"

#include <stdio.h>

#include "check.h"

/* int8 partial sums of a whole segment stay exact below 2^31: 127 * 127 * K. */
#define INT8_MAX_K 131072
/* Accumulators and stage partial sums each take mi*nu*32 registers a thread. */
#define MAX_UNITS_PER_WARP 2
/* mma.sync tiles of two units a warp stay within 256 threads: 512 leave 128 registers a
 * thread, and ptxas spills the sums (check_sync_tuning). */
#define FIT_THREADS 256

bool hm_gemm_is_w8a8(const hm_gemm_layer_part *l) {
  return l->act == HM_F8E4M3 || l->act == HM_I8;
}

/* e2m1 weights are mxfp4 or nvfp4 by their group along K (w4a8_fp4_from_layer). */
int hm_gemm_w4a8_format(const hm_gemm_layer_part *l) {
  if (!hm_gemm_is_w8a8(l)) return HM_W4_NONE;
  if (l->weight == HM_I4) return HM_W4_INT4;
  if (l->weight != HM_F4E2M1) return HM_W4_NONE;
  return l->group == 16 ? HM_W4_NVFP4 : HM_W4_E2M1;
}

static bool is_fp4(int fmt) {
  return fmt == HM_W4_E2M1 || fmt == HM_W4_NVFP4;
}

/* Bytes of a weight unit (32 k x 64 n codes) and of its scales at one k32 step: e8m0 bytes
 * of its 64 columns (mxfp4), e4m3 ones of each K half (nvfp4). */
static size_t unit_bytes(const hm_gemm_layer_part *l) {
  return hm_gemm_w4a8_format(l) == HM_W4_NONE ? 2048 : 1024;
}

static size_t fp4_unit_bytes(const hm_gemm_layer_part *l) {
  return 64 * (size_t)hm_w4_scale_parts(hm_gemm_w4a8_format(l));
}

/* Scales that change along K (128x128 weight blocks, 1x128 activation groups): the kernel
 * folds each stage's partial sums into its accumulators with them. */
static bool k_scaled(const hm_gemm_layer_part *l) {
  return l->group_n != 0 || l->act_scale == HM_ACT_SCALE_GROUP128;
}

/*
 * e2m1 weights: mxfp4 (e8m0 scales per 32 along K) keeps group 32, nvfp4 (e4m3 scales per
 * 16, one K half of the k32 MMA, and an optional f32 global scale the epilogue applies)
 * group 16. Scales of other types or groups would have to scale codes (e2m1 times an e4m3
 * scale needs up to 5 significant bits) or parts of a K half.
 */
static hm_status w4a8_fp4_from_layer(const hm_quant_format *w, hm_gemm_layer_part *l) {
  const bool mx = w->scale == HM_E8M0 && w->group_k == 32;
  const bool nv = w->scale == HM_F8E4M3 && w->group_k == 16;
  if (w->scale_kind != HM_SCALE_GROUP || (!mx && !nv))
    HM_FAIL(HM_UNSUPPORTED,
            "W4A8 GEMM: e2m1 weights need e8m0 scales per 32 (mxfp4) or f8e4m3 scales per 16 (nvfp4) along "
            "K, not %s scales per %d",
            hm_dtype_name(w->scale), w->group_k);
  if (mx && w->global_scale) HM_FAIL(HM_UNSUPPORTED, "W4A8 mxfp4 GEMM: no global scale");
  l->group = w->group_k;
  l->group_n = 0;
  return HM_OK;
}

bool hm_w4a8_f16_codes(hm_dtype weight, hm_dtype act, int arch) {
  return weight == HM_F4E2M1 && act == HM_F8E4M3 && arch == 90;
}

hm_status hm_gemm_w8a8_from_layer(const hm_layer_config *lc, hm_gemm_config *out) {
  const hm_quant_format *w = &lc->scheme.weight;
  hm_gemm_layer_part *l = &out->layer;
  l->act_scale = lc->scheme.act_scale;
  l->w4_f16 = hm_w4a8_f16_codes(w->weight, l->act, out->arch);
  if (w->weight == HM_F4E2M1) return w4a8_fp4_from_layer(w, l);
  if (w->scale_kind == HM_SCALE_CHANNEL) {
    l->group = l->group_n = 0;
  } else if (w->scale_kind == HM_SCALE_BLOCK) {
    l->group = w->group_k;
    l->group_n = w->group_n;
  } else {
    HM_FAIL(HM_UNSUPPORTED,
            "W8A8 GEMM: weight scales must be per channel or 128x128 blocks (scale layout %d)",
            (int)w->scale_kind);
  }
  return HM_OK;
}

static hm_status check_types(const hm_gemm_layer_part *l, int arch) {
  const bool int8 = l->act == HM_I8 && (l->weight == HM_I8 || l->weight == HM_I4);
  const bool fp8 = l->act == HM_F8E4M3 && (l->weight == HM_F8E4M3 || l->weight == HM_F4E2M1);
  if (!int8 && !fp8)
    HM_FAIL(HM_UNSUPPORTED,
            "W8A8 GEMM: %s weights with %s activations (kernels exist for i8 x i8, f8e4m3 x f8e4m3 and "
            "W4A8: i4 x i8, f4e2m1 (mxfp4, nvfp4) x f8e4m3)",
            hm_dtype_name(l->weight), hm_dtype_name(l->act));
  if (l->out != HM_F16 && l->out != HM_BF16)
    HM_FAIL(HM_UNSUPPORTED, "W8A8 GEMM: output must be f16 or bf16, not %s", hm_dtype_name(l->out));
  if (l->act_scale != HM_ACT_SCALE_TOKEN && l->act_scale != HM_ACT_SCALE_GROUP128)
    HM_FAIL(HM_UNSUPPORTED, "W8A8 GEMM: activation scales must be per token or 1x128 (kind %d)",
            (int)l->act_scale);
  if (l->zero_point) HM_FAIL(HM_UNSUPPORTED, "W8A8 GEMM: no zero points");
  const int need = fp8 ? 89 : 80;
  if (arch < need)
    HM_FAIL(HM_UNSUPPORTED, "the W8A8 %s kernel needs sm_%d or later (mma.sync m16n8k32), device is sm_%d",
            fp8 ? "fp8" : "int8", need, arch);
  return HM_OK;
}

/*
 * f16 accumulation (gemm_w8a8_kernel.cuh, acc16) adds each k32 MMA's f16 sums into f32 sums
 * that the per-channel and per-token scales multiply at the end. Scales that change along K
 * would scale each of them, and int8 MMAs sum exactly in s32 at full rate already.
 */
hm_status hm_gemm_f16_acc_check(const hm_gemm_layer_part *l) {
  if (!hm_gemm_is_w8a8(l))
    HM_FAIL(HM_UNSUPPORTED, "f16 accumulation is an option of the fp8 W8A8 kernel, not of %s activations",
            hm_dtype_name(l->act));
  if (l->act != HM_F8E4M3)
    HM_FAIL(HM_UNSUPPORTED, "W8A8 GEMM: f16 accumulation takes f8e4m3 activations, not %s (int8 sums in s32)",
            hm_dtype_name(l->act));
  if (l->group_n != 0)
    HM_FAIL(HM_UNSUPPORTED,
            "W8A8 GEMM: f16 accumulation is refused for %dx%d block weight scales (per-channel fp8, mxfp4 "
            "or nvfp4 weights only)",
            l->group_n, l->group);
  if (l->act_scale != HM_ACT_SCALE_TOKEN)
    HM_FAIL(HM_UNSUPPORTED,
            "W8A8 GEMM: f16 accumulation is refused for 1x128 activation scales (per-token scales only)");
  return HM_OK;
}

hm_status hm_gemm_w8a8_check_layer(const hm_gemm_config *cfg) {
  const hm_gemm_layer_part *l = &cfg->layer;
  HM_CHECK(check_types(l, cfg->arch));
  if (l->n <= 0 || l->k <= 0 || l->experts <= 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "GEMM shape N=%lld K=%lld E=%lld must be positive", (long long)l->n,
            (long long)l->k, (long long)l->experts);
  if (l->n > (1 << 30) || l->k > (1 << 30) || l->experts > 65536)
    HM_FAIL(HM_UNSUPPORTED, "GEMM shape N=%lld K=%lld E=%lld too large", (long long)l->n, (long long)l->k,
            (long long)l->experts);
  if (l->n % 2 != 0) HM_FAIL(HM_UNSUPPORTED, "GEMM N=%lld must be even", (long long)l->n);
  /* A rows are copied in 16-byte pieces. */
  if (l->k % 16 != 0) HM_FAIL(HM_UNSUPPORTED, "W8A8 GEMM K=%lld must be a multiple of 16", (long long)l->k);
  const bool block = l->group_n != 0;
  if (block && (l->group != 128 || l->group_n != 128 || l->n % 128 != 0 || l->k % 128 != 0))
    HM_FAIL(HM_UNSUPPORTED,
            "W8A8 GEMM: block scales must be 128x128 on N=%lld, K=%lld multiples of 128 "
            "(blocks %dx%d)",
            (long long)l->n, (long long)l->k, l->group_n, l->group);
  const int fmt = hm_gemm_w4a8_format(l);
  if (fmt == HM_W4_E2M1 && (l->group != 32 || l->k % 32 != 0))
    HM_FAIL(HM_UNSUPPORTED, "W4A8 mxfp4 GEMM: e8m0 scales per 32 along K=%lld (group %d)", (long long)l->k,
            l->group);
  if (l->w4_f16 && (!is_fp4(fmt) || cfg->arch < 89))
    HM_FAIL(HM_UNSUPPORTED,
            "W4A8 f16 codes: e2m1 weights with fp8 activations on sm_89 or later (%s x %s, sm_%d)",
            hm_dtype_name(l->weight), hm_dtype_name(l->act), cfg->arch);
  if (!block && !is_fp4(fmt) && l->group != 0)
    HM_FAIL(HM_UNSUPPORTED, "W8A8 GEMM: group scales (group %d)", l->group);
  if (l->act == HM_I8 && !k_scaled(l) && l->k > INT8_MAX_K)
    HM_FAIL(HM_UNSUPPORTED, "W8A8 int8 GEMM: K=%lld above %d would overflow the s32 sums", (long long)l->k,
            INT8_MAX_K);
  return HM_OK;
}

/* A swapped 8-row tile (warps_m 1) holds one 16-row block of sums a unit, as a 16-row tile does. */
static int units_per_warp(const hm_gemm_tuning *t) {
  return (hm_gemm_acc_rows(t) / t->warps_m / 16) * (t->bn / t->warps_n / 64);
}

size_t hm_gemm_w8a8_wgmma_stage_bytes(const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  const size_t a_scales = cfg->layer.act_scale == HM_ACT_SCALE_GROUP128 ? (size_t)t->bm * 4 : 0;
  return (size_t)t->bm * t->bk + (size_t)t->bn / 64 * (t->bk / 32) * 2048 + a_scales;
}

/* The warp-specialized kernel (gemm_w8a8_ws.cuh) runs a warpgroup's tokens as m64 blocks
 * and its columns as the wgmma N: whole m64 blocks, and with block scales one 128-column
 * block a warpgroup. The rule on its sums (hm_gemm_wgmma_max_sum_regs) keeps N at 192 or
 * below. */
static hm_status check_ws_tuning(const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  const int rows = t->bm / t->warps_m, cols = t->bn / (t->warps_n / 4);
  if (rows % 64 != 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "W8A8 warp-specialized GEMM: %d token rows a warpgroup (whole m64 blocks)",
            rows);
  if (cfg->layer.group_n != 0 && 128 % cols != 0)
    HM_FAIL(HM_INVALID_ARGUMENT,
            "W8A8 warp-specialized GEMM: %d columns a warpgroup straddle 128-column scale blocks", cols);
  return HM_OK;
}

/* What the wgmma kernels (gemm_w8a8_wgmma.cuh, gemm_w8a8_ws.cuh) add to the common wgmma rules. */
static hm_status check_wgmma_tuning(const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  if (t->bk != 128)
    HM_FAIL(HM_INVALID_ARGUMENT,
            "W8A8 wgmma GEMM: bk=%d must be 128 (a 128-byte swizzle row of tokens, one K scale block)",
            t->bk);
  /* A thread holds up to 128 sums, 16 A fragment registers and its addresses and scales:
   * more than 2 warpgroups leave it 128 registers, and ptxas spills. The warp-specialized
   * kernel's producer gives three consumer warpgroups 152, for 128 sums without A fragments. */
  const int groups = t->warps_m * (t->warps_n / 4), most = t->ws ? 3 : 2;
  if (groups > most)
    HM_FAIL(HM_INVALID_ARGUMENT, "W8A8 wgmma GEMM: %d warpgroups (at most %d: a thread needs ~150 registers)",
            groups, most);
  return t->ws ? check_ws_tuning(cfg) : HM_OK;
}

/*
 * A warp of two units keeps both units' sums beside a stage's partial sums (fp8, or int8
 * with K-varying scales) or widened codes (W4A8). ptxas 13.0 spills them in 512-thread CTAs,
 * which leave 128 registers a thread: bm128 bn256 warps 4x4 with fp8 block scales 40-536 bytes
 * on sm_90a (bk 64: 392) and 72-112 on sm_89, int8 per channel 24-48 at bk 128, mxfp4 bk 256
 * 992, int4 264. mxfp4 and nvfp4 also spill with bk 256 (bm64 bn256 warps 2x4: mxfp4 56
 * bytes; nvfp4 88 on sm_90a, whose fp8 MMAs ptxas unpacks into f16 ones).
 */
static hm_status check_sync_tuning(const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  const int fmt = hm_gemm_w4a8_format(&cfg->layer);
  if (units_per_warp(t) < 2) return HM_OK;
  if (hm_gemm_config_threads(cfg) > FIT_THREADS)
    HM_FAIL(HM_INVALID_ARGUMENT, "W8A8 GEMM: two units a warp in %d threads (at most %d: ptxas spills)",
            hm_gemm_config_threads(cfg), FIT_THREADS);
  if (is_fp4(fmt) && t->bk > 128)
    HM_FAIL(HM_INVALID_ARGUMENT, "W4A8 %s GEMM: two units a warp with bk=%d (at most 128: ptxas spills)",
            fmt == HM_W4_NVFP4 ? "nvfp4" : "mxfp4", t->bk);
  return HM_OK;
}

hm_status hm_gemm_w8a8_check_tuning(const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  if (t->mma == HM_MMA_WGMMA && hm_gemm_w4a8_format(&cfg->layer) != HM_W4_NONE)
    HM_FAIL(HM_INVALID_ARGUMENT, "W4A8 GEMM: no wgmma kernel, 4-bit weights run on the mma.sync one");
  if (t->mma == HM_MMA_WGMMA && cfg->compute.f16_acc)
    HM_FAIL(HM_INVALID_ARGUMENT,
            "W8A8 GEMM: f16 accumulation runs on the mma.sync kernel, not on wgmma tiles");
  if (t->mma == HM_MMA_WGMMA) return check_wgmma_tuning(cfg);
  if ((t->bk / 32) % t->warps_k != 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "W8A8 GEMM: warps_k=%d must divide bk/32=%d", t->warps_k, t->bk / 32);
  if (k_scaled(&cfg->layer) && 128 % t->bk != 0)
    HM_FAIL(HM_INVALID_ARGUMENT,
            "W8A8 GEMM: bk=%d must divide 128, the K span of a block or activation scale", t->bk);
  if (units_per_warp(t) > MAX_UNITS_PER_WARP)
    HM_FAIL(HM_INVALID_ARGUMENT,
            "W8A8 GEMM: warp tile %dx%d holds more than %d accumulators (and as many "
            "partial sums) per thread",
            t->bm / t->warps_m, t->bn / t->warps_n, MAX_UNITS_PER_WARP * 32);
  return check_sync_tuning(cfg);
}

size_t hm_gemm_w8a8_smem_bytes(const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  const size_t bn_units = (size_t)t->bn / 64, steps = (size_t)t->bk / 32;
  size_t stage =
      (size_t)t->bm * t->bk + bn_units * steps * (unit_bytes(&cfg->layer) + fp4_unit_bytes(&cfg->layer));
  stage = (stage + 127) / 128 * 128;
  return hm_gemm_sync_smem_bytes(cfg, stage * (size_t)t->stages);
}

void hm_gemm_w8a8_fit(const hm_gemm_config *base, hm_gemm_tuning *t) {
  if (t->mma == HM_MMA_WGMMA) {
    t->bk = 128; /* the selection's wgmma tiles are W8A8 ones already */
    return;
  }
  /* Taller warp grids first (warps that split K give theirs up), then wider ones, up to
   * FIT_THREADS; past that the tile trades columns for rows of warps. */
  while (units_per_warp(t) > MAX_UNITS_PER_WARP) {
    const int threads = 32 * t->warps_m * t->warps_n * t->warps_k;
    const bool taller = t->bm % (32 * t->warps_m) == 0;
    if (taller && (t->warps_k > 1 || 2 * threads <= FIT_THREADS)) {
      t->warps_m *= 2;
      if (t->warps_k > 1) t->warps_k /= 2;
    } else if (t->bn % (128 * t->warps_n) == 0 && 2 * threads <= FIT_THREADS) {
      t->warps_n *= 2;
    } else if (taller && t->warps_n % 2 == 0) {
      t->bn /= 2;
      t->warps_n /= 2;
      t->warps_m *= 2;
    } else {
      break; /* the check says why */
    }
  }
  if (k_scaled(&base->layer) && t->bk > 128) t->bk = 128;
  while (t->warps_k > 1 && (t->bk / 32) % t->warps_k != 0) t->warps_k /= 2;
  /* W4A8 stages hold half the weight bytes: twice as many keep as many bytes in flight
   * (fit_smem takes them back where shared memory runs out). Not the swapped decode tile:
   * its loop is bound by converting codes, not by bytes in flight, and eight stages keep a
   * second CTA off the SM, where the tuner's one- and two-token picks ran two to four CTAs
   * an SM of four stages or fewer (H200 and H100, docs/PERF.md twenty-third session). */
  if (hm_gemm_w4a8_format(&base->layer) != HM_W4_NONE && t->bm != 8)
    t->stages = t->stages * 2 > 8 ? 8 : t->stages * 2;
}

void hm_gemm_w8a8_name_tag(const hm_gemm_layer_part *l, char *buf, size_t len) {
  if (len == 0) return;
  buf[0] = '\0';
  if (!hm_gemm_is_w8a8(l)) return;
  char block[32] = "";
  if (l->group_n) snprintf(block, sizeof(block), "_b%dx%d", l->group_n, l->group);
  snprintf(buf, len, "%s_a%s%s", block, l->act_scale == HM_ACT_SCALE_GROUP128 ? "g128" : "tok",
           l->w4_f16 ? "_w16" : "");
}
