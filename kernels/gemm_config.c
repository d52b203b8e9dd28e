/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel configs: derivation from a layer, legality, names and derived sizes. */
#include "kernels/gemm_config.h"

#include <stdio.h>
#include <string.h>

#include "check.h"
#include "kernels/gemm_config_w8a8.h"
#include "kernels/gemm_config_wgmma.h"

int hm_gemm_weight_bits(hm_dtype weight) {
  switch (weight) {
  case HM_F16:
  case HM_BF16: return 16;
  case HM_I8:
  case HM_U8: return 8;
  case HM_I4:
  case HM_U4: return 4;
  case HM_U7: return 7;
  case HM_U6: return 6;
  case HM_U5: return 5;
  case HM_U3: return 3;
  case HM_U2: return 2;
  case HM_U1: return 1;
  default: return 0;
  }
}

size_t hm_gemm_arch_smem_limit(int arch) {
  if (arch >= 90) return 227 * 1024;
  if (arch == 80 || arch == 87) return 163 * 1024;
  if (arch >= 86) return 99 * 1024;
  return 0;
}

hm_status hm_gemm_config_from_layer(const hm_layer_config *lc, hm_gemm_type type, int arch, hm_gemm_config *out) {
  HM_CHECK_NOT_NULL(lc);
  HM_CHECK_NOT_NULL(out);
  memset(out, 0, sizeof(*out));
  const hm_quant_format *w = &lc->scheme.weight;
  hm_gemm_layer_part *l = &out->layer;
  l->weight = w->weight;
  l->act = lc->scheme.act;
  l->out = lc->out;
  l->group = w->scale_kind == HM_SCALE_GROUP ? w->group_k : 0;
  l->zero_point = w->zero_point;
  l->bias = lc->bias;
  l->global_scale = w->global_scale;
  l->n = lc->n;
  l->k = lc->k;
  l->experts = lc->experts;
  out->compute.type = type;
  out->compute.batch_invariant = lc->batch_invariant;
  out->compute.f16_acc = lc->fp16_accumulate;
  out->arch = arch;
  if (hm_gemm_is_w8a8(l)) return hm_gemm_w8a8_from_layer(lc, out);
  if (w->scale_kind != HM_SCALE_GROUP && w->scale_kind != HM_SCALE_CHANNEL && w->scale_kind != HM_SCALE_NONE)
    HM_FAIL(HM_UNSUPPORTED, "weight-only GEMM: scale layout %d is not per group or per channel", (int)w->scale_kind);
  if ((w->scale_kind == HM_SCALE_NONE) != (hm_gemm_weight_bits(w->weight) == 16))
    HM_FAIL(HM_UNSUPPORTED, "weight-only GEMM: %s weights %s scales", hm_dtype_name(w->weight),
            w->scale_kind == HM_SCALE_NONE ? "need" : "take no");
  return HM_OK;
}

hm_status hm_gemm_config_check_layer(const hm_gemm_config *cfg) {
  const hm_gemm_layer_part *l = &cfg->layer;
  const int bits = hm_gemm_weight_bits(l->weight);
  if (cfg->compute.f16_acc) HM_CHECK(hm_gemm_f16_acc_check(l));
  if (hm_gemm_is_w8a8(l)) return hm_gemm_w8a8_check_layer(cfg);
  if (l->act != HM_F16 && l->act != HM_BF16)
    HM_FAIL(HM_UNSUPPORTED, "weight-only GEMM: activations must be f16 or bf16, not %s", hm_dtype_name(l->act));
  if (l->out != HM_F16 && l->out != HM_BF16)
    HM_FAIL(HM_UNSUPPORTED, "weight-only GEMM: output must be f16 or bf16, not %s", hm_dtype_name(l->out));
  if (bits == 0)
    HM_FAIL(HM_UNSUPPORTED, "weight-only GEMM: weight type %s (use u1..u8, i4, i8, f16, bf16)",
            hm_dtype_name(l->weight));
  if (bits == 16 && l->weight != l->act)
    HM_FAIL(HM_UNSUPPORTED, "unquantized weights (%s) must have the activation type (%s)", hm_dtype_name(l->weight),
            hm_dtype_name(l->act));
  if (l->zero_point && (bits == 16 || l->weight == HM_I4 || l->weight == HM_I8))
    HM_FAIL(HM_UNSUPPORTED, "zero points need unsigned weights, not %s", hm_dtype_name(l->weight));
  if (cfg->arch < 80)
    HM_FAIL(HM_UNSUPPORTED, "the weight-only GEMM kernels need sm_80 or later (mma.sync m16n8k16, cp.async), "
            "device is sm_%d", cfg->arch);
  if (l->n <= 0 || l->k <= 0 || l->experts <= 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "GEMM shape N=%lld K=%lld E=%lld must be positive", (long long)l->n,
            (long long)l->k, (long long)l->experts);
  if (l->n % 2 != 0) HM_FAIL(HM_UNSUPPORTED, "GEMM N=%lld must be even", (long long)l->n);
  if (l->k % 8 != 0) HM_FAIL(HM_UNSUPPORTED, "GEMM K=%lld must be a multiple of 8", (long long)l->k);
  if (l->n > (1 << 30) || l->k > (1 << 30) || l->experts > 65536)
    HM_FAIL(HM_UNSUPPORTED, "GEMM shape N=%lld K=%lld E=%lld too large", (long long)l->n, (long long)l->k,
            (long long)l->experts);
  if (l->group != 0 && (l->group % 16 != 0 || l->k % l->group != 0))
    HM_FAIL(HM_UNSUPPORTED, "group size %d must be a multiple of 16 dividing K=%lld", l->group, (long long)l->k);
  return HM_OK;
}

/* The warp tiles of the mma.sync kernel (the wgmma kernel's are in gemm_config_wgmma.c). */
static hm_status check_warp_grid(const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  const bool rows_ok = t->bm == 8 ? t->warps_m == 1
                                  : t->bm >= 16 && t->bm <= 256 && t->warps_m >= 1 && t->bm % (16 * t->warps_m) == 0;
  if (!rows_ok)
    HM_FAIL(HM_INVALID_ARGUMENT, "tile bm=%d (warps_m=%d) must be 8 with warps_m=1 (swapped operands) or a multiple "
            "of 16*warps_m, at most 256", t->bm, t->warps_m);
  if (t->bn < 64 || t->warps_n < 1 || t->bn % (64 * t->warps_n) != 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "tile bn=%d must be a multiple of 64*warps_n (warps_n=%d)", t->bn, t->warps_n);
  if (t->warps_k < 1 || (t->bk / 16) % t->warps_k != 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "warps_k=%d must divide bk/16=%d", t->warps_k, t->bk / 16);
  if ((hm_gemm_acc_rows(t) / t->warps_m / 16) * (t->bn / t->warps_n / 64) > 4)
    HM_FAIL(HM_INVALID_ARGUMENT, "warp tile %dx%d holds more than 128 accumulators per thread", t->bm / t->warps_m,
            t->bn / t->warps_n);
  return HM_OK;
}

static hm_status check_tuning(const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  if (t->mma != HM_MMA_SYNC && t->mma != HM_MMA_WGMMA)
    HM_FAIL(HM_INVALID_ARGUMENT, "mma=%d is neither mma.sync (%d) nor wgmma (%d)", (int)t->mma, HM_MMA_SYNC,
            HM_MMA_WGMMA);
  if (t->ws && t->mma != HM_MMA_WGMMA)
    HM_FAIL(HM_UNSUPPORTED, "warp specialization is implemented for the wgmma kernels only");
  /* bk 512 and 1024: a one-unit decode tile's stages of 16 or 32 KiB, a half or a quarter of
   * the k-iterations' waits and barriers, and eight k-warps each a whole scale group a stage. */
  const bool long_k =
      (t->bk == 512 || t->bk == 1024) && t->mma == HM_MMA_SYNC && !hm_gemm_is_w8a8(&cfg->layer);
  if (t->bk != 64 && t->bk != 128 && t->bk != 256 && !long_k)
    HM_FAIL(HM_INVALID_ARGUMENT, "tile bk=%d must be 64, 128 or 256 (or 512, 1024: weight-only mma.sync)", t->bk);
  HM_CHECK(t->mma == HM_MMA_WGMMA ? hm_gemm_wgmma_check(cfg) : check_warp_grid(cfg));
  if (t->stages < 2 || t->stages > HM_GEMM_MAX_STAGES)
    HM_FAIL(HM_INVALID_ARGUMENT, "stages=%d must be 2..%d", t->stages, HM_GEMM_MAX_STAGES);
  if (t->ctas_per_sm < 1 || t->ctas_per_sm > HM_GEMM_MAX_CTAS_PER_SM)
    HM_FAIL(HM_INVALID_ARGUMENT, "ctas_per_sm=%d must be 1..%d", t->ctas_per_sm, HM_GEMM_MAX_CTAS_PER_SM);
  if (t->stream_k && (cfg->compute.batch_invariant || t->sk_min_iters < 1))
    HM_FAIL(HM_INVALID_ARGUMENT, "Stream-K needs sk_min_iters >= 1 (%d) and no batch invariance", t->sk_min_iters);
  const int group = cfg->layer.group;
  if (group != 0 && group % t->bk != 0 && t->bk % group != 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "group %d and bk %d must divide one another", group, t->bk);
  const int threads = hm_gemm_config_threads(cfg);
  if (threads > 1024) HM_FAIL(HM_INVALID_ARGUMENT, "%d threads per CTA (at most 1024)", threads);
  if (hm_gemm_acc_rows(t) > threads)
    HM_FAIL(HM_INVALID_ARGUMENT, "bm=%d rows need %d threads (CTA has %d)", t->bm, hm_gemm_acc_rows(t), threads);
  const size_t smem = hm_gemm_config_smem_bytes(cfg), limit = hm_gemm_arch_smem_limit(cfg->arch);
  if (smem > limit)
    HM_FAIL(HM_UNSUPPORTED, "kernel needs %zu bytes of shared memory, sm_%d allows %zu", smem, cfg->arch, limit);
  return HM_OK;
}

hm_status hm_gemm_config_check(const hm_gemm_config *cfg) {
  HM_CHECK_NOT_NULL(cfg);
  HM_CHECK(hm_gemm_config_check_layer(cfg));
  HM_CHECK(check_tuning(cfg));
  return hm_gemm_is_w8a8(&cfg->layer) ? hm_gemm_w8a8_check_tuning(cfg) : HM_OK;
}

const char *hm_gemm_type_tag(hm_gemm_type t) {
  switch (t) {
  case HM_GEMM_DENSE: return "dense";
  case HM_GEMM_INDEXED: return "idx";
  case HM_GEMM_GROUPED_CONTIGUOUS: return "gcont";
  case HM_GEMM_GROUPED_MASKED: return "gmask";
  }
  return "bad";
}

void hm_gemm_layer_key(const hm_gemm_config *cfg, char *buf, size_t len) {
  const hm_gemm_layer_part *l = &cfg->layer;
  char group[16], w8a8[32];
  snprintf(group, sizeof(group), l->group ? "g%d" : "ch", l->group);
  hm_gemm_w8a8_name_tag(l, w8a8, sizeof(w8a8));
  snprintf(buf, len, "%s_%s%s_%s%s_a%s_o%s%s%s_n%lld_k%lld_e%lld%s%s", hm_gemm_type_tag(cfg->compute.type),
           hm_dtype_name(l->weight), l->zero_point ? "z" : "", group, w8a8, hm_dtype_name(l->act),
           hm_dtype_name(l->out), l->bias ? "_b" : "", l->global_scale ? "_gs" : "", (long long)l->n,
           (long long)l->k, (long long)l->experts, cfg->compute.batch_invariant ? "_bi" : "",
           cfg->compute.f16_acc ? "_acc16" : "");
}

void hm_gemm_config_name(const hm_gemm_config *cfg, char *buf, size_t len) {
  const hm_gemm_tuning *t = &cfg->tuning;
  char layer[160];
  hm_gemm_layer_key(cfg, layer, sizeof(layer));
  snprintf(buf, len, "hm_gemm_%s_m%dn%dk%d_w%dx%dx%d_s%d_%s%d_c%d%s%s", layer, t->bm, t->bn, t->bk,
           t->warps_m, t->warps_n, t->warps_k, t->stages, t->stream_k ? "sk" : "dp",
           t->stream_k ? t->sk_min_iters : 0, t->ctas_per_sm, t->mma == HM_MMA_WGMMA ? "_wgmma" : "",
           t->ws ? "_ws" : "");
}

int hm_gemm_config_threads(const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  return 32 * t->warps_m * t->warps_n * t->warps_k + (t->ws ? HM_GEMM_PRODUCER_THREADS : 0);
}

int hm_gemm_acc_rows(const hm_gemm_tuning *t) { return t->bm == 8 ? 16 : t->bm; }

int64_t hm_gemm_n_tiles(const hm_gemm_config *cfg) {
  const int64_t units = (cfg->layer.n + 63) / 64, per_tile = cfg->tuning.bn / 64;
  return (units + per_tile - 1) / per_tile;
}

int64_t hm_gemm_k_iters(const hm_gemm_config *cfg) {
  const int64_t k16 = (cfg->layer.k + 15) / 16, steps = cfg->tuning.bk / 16;
  return (k16 + steps - 1) / steps;
}

size_t hm_gemm_wo_stage_bytes(const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  const size_t bits = (size_t)hm_gemm_weight_bits(cfg->layer.weight);
  const bool quant = bits < 16;
  const size_t bn_units = (size_t)t->bn / 64, steps = (size_t)t->bk / 16;
  const int group = cfg->layer.group;
  const size_t stage_groups = (group == 0 || group >= t->bk) ? 1 : (size_t)(t->bk / group);
  size_t stage = (size_t)t->bm * t->bk * 2 + bn_units * steps * 128 * bits;
  if (quant) stage += stage_groups * bn_units * 128;
  if (quant && cfg->layer.zero_point) stage += stage_groups * bn_units * 64;
  return stage;
}

size_t hm_gemm_config_smem_bytes(const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  if (t->mma == HM_MMA_WGMMA) return hm_gemm_wgmma_smem_bytes(cfg);
  if (hm_gemm_is_w8a8(&cfg->layer)) return hm_gemm_w8a8_smem_bytes(cfg);
  const size_t stage = (hm_gemm_wo_stage_bytes(cfg) + 127) / 128 * 128;
  return hm_gemm_sync_smem_bytes(cfg, stage * (size_t)t->stages);
}

size_t hm_gemm_sync_smem_bytes(const hm_gemm_config *cfg, size_t pipe) {
  const hm_gemm_tuning *t = &cfg->tuning;
  const size_t red = hm_gemm_red_bytes(t), rows = (size_t)hm_gemm_acc_rows(t);
  if (hm_gemm_sync_overlaps_fill(t)) return pipe + red + hm_gemm_maps_bytes(cfg, 2 * rows);
  return (pipe > red ? pipe : red) + hm_gemm_maps_bytes(cfg, rows);
}

bool hm_gemm_sync_overlaps_fill(const hm_gemm_tuning *t) { return t->mma == HM_MMA_SYNC && t->bm == 8; }

bool hm_gemm_exclusive_sm(const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  return cfg->arch >= 90 && cfg->compute.type == HM_GEMM_DENSE && t->mma == HM_MMA_SYNC && t->bm <= 16 &&
         t->ctas_per_sm == 1;
}

size_t hm_gemm_launch_smem_bytes(const hm_gemm_config *cfg) {
  const size_t bytes = hm_gemm_config_smem_bytes(cfg);
  /* An SM holds a block's limit plus the 1 KiB reserved a CTA: two CTAs of half that do
   * not fit (sm_90: 114 KiB of 228). */
  const size_t half_sm = (hm_gemm_arch_smem_limit(cfg->arch) + 1024) / 2;
  return hm_gemm_exclusive_sm(cfg) && bytes < half_sm ? half_sm : bytes;
}

size_t hm_gemm_red_bytes(const hm_gemm_tuning *t) {
  const size_t warps_mn = (size_t)t->warps_m * t->warps_n;
  const size_t acc_regs = (size_t)hm_gemm_acc_rows(t) / t->warps_m / 16 * (size_t)(t->bn / t->warps_n / 64) * 32;
  return (size_t)(t->warps_k - 1) * warps_mn * 32 * acc_regs * 4;
}

size_t hm_gemm_maps_bytes(const hm_gemm_config *cfg, size_t rows) {
  const bool grouped =
      cfg->compute.type == HM_GEMM_GROUPED_CONTIGUOUS || cfg->compute.type == HM_GEMM_GROUPED_MASKED;
  return 3 * rows * 4 + 4 + (grouped ? (size_t)cfg->layer.experts * 4 : 0);
}
