/* SPDX-License-Identifier: Apache-2.0 */
/* Quantization formats of weights and activations (public part of humming.h). */
#ifndef HUMMING_FORMATS_H
#define HUMMING_FORMATS_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How weight scales are laid out (the canonical contract of DESIGN.md). */
typedef enum hm_scale_kind {
  HM_SCALE_NONE = 0, /* unquantized weights (f16/bf16) */
  HM_SCALE_CHANNEL,  /* (E, N, 1) */
  HM_SCALE_GROUP,    /* (E, N, K/group_k); mxfp4 and nvfp4 too */
  HM_SCALE_BLOCK,    /* f32 (E, N/group_n, K/group_k), e.g. 128x128 fp8 */
  HM_SCALE_TENSOR    /* (E, 1) */
} hm_scale_kind;

/*
 * A weight format. Integer weights: w = (q - z) * s, with z the zero point when
 * zero_point is set, 2^(bits-1) for unsigned types without zero points, 0 for signed.
 * Float weights: w = decode(q) * s. A global (second-level) f32 scale per expert
 * multiplies either when global_scale is set.
 */
typedef struct hm_quant_format {
  hm_dtype weight;          /* U1..U8, I4, I8, F8E4M3, F8E5M2, F4E2M1, or F16/BF16 */
  hm_dtype scale;           /* F16, BF16, F32, E8M0 (mxfp4), F8E4M3 (nvfp4) */
  hm_scale_kind scale_kind; /* layout of scale */
  int group_k;              /* group size along K (GROUP, BLOCK) */
  int group_n;              /* group size along N (BLOCK) */
  bool zero_point;          /* integer zero points, packed along N */
  bool global_scale;        /* f32 per-expert second-level scale */
} hm_quant_format;

/* How activations are quantized on the fly for 8-bit math. */
typedef enum hm_act_scale_kind {
  HM_ACT_SCALE_NONE = 0, /* f16/bf16 activations */
  HM_ACT_SCALE_TOKEN,    /* one f32 scale per row */
  HM_ACT_SCALE_GROUP128  /* one f32 scale per row and 128 columns */
} hm_act_scale_kind;

/* A whole scheme: weight format, activation type, activation scales. */
typedef struct hm_quant_scheme {
  hm_quant_format weight;
  hm_dtype act;               /* F16, BF16, F8E4M3, I8 */
  hm_act_scale_kind act_scale; /* NONE for f16/bf16 activations */
} hm_quant_scheme;

/*
 * The scheme names hm_quant_scheme_parse takes. Weight-only schemes are spelled by their
 * parts, w<B>a16[-sym][-g<G>|-ch]: B-bit codes (B = 1..8) with bf16 activations; unsigned
 * with zero points (8-bit ones centred at 128 instead), or with -sym centred (i4 and i8 for
 * B = 4 and 8); scales per group of G = 16, 32, 64 or 128 along K (128 unless said) or per
 * channel (-ch). So w4a16 is GPTQ/AWQ's u4 with zero points in groups of 128, w4a16-sym
 * i4, w3a16-g64 u3 with zero points in groups of 64. The others: w8a8-fp8 (128x128
 * blocks, 1x128 activations), w8a8-fp8-ch (per channel, per token), w8a8-int8,
 * w4a8-mxfp4, w4a8-int4, w4a8-nvfp4.
 */
#define HM_QUANT_SCHEMES                                                                        \
  "bf16, w<B>a16[-sym][-g<G>|-ch] (B 1-8, G 16|32|64|128: w4a16, w4a16-sym, w8a16, w3a16-g64, " \
  "...), w8a8-fp8, w8a8-fp8-ch, w8a8-int8, w4a8-mxfp4, w4a8-int4, w4a8-nvfp4"

/* Parses a scheme name (HM_QUANT_SCHEMES). HM_INVALID_ARGUMENT for an unknown name. */
HM_API hm_status hm_quant_scheme_parse(const char *name, hm_quant_scheme *out);
/* Writes a short name of the scheme ("w4a16 u4 g128 zp") into buf. */
HM_API void hm_quant_scheme_describe(const hm_quant_scheme *scheme, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
