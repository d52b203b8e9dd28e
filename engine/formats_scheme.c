/* SPDX-License-Identifier: Apache-2.0 */
/* Named quantization schemes (the --quant names) and GEMM type names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

struct scheme_entry {
  const char *name;
  hm_quant_scheme scheme;
};

#define W(wt, st, kind, gk, gn, zp, gs) {wt, st, kind, gk, gn, zp, gs}
/* The schemes with a name of their own; weight-only ones are spelled by their parts. */
static const struct scheme_entry schemes[] = {
    {"bf16", {W(HM_BF16, HM_BF16, HM_SCALE_NONE, 0, 0, false, false), HM_BF16, HM_ACT_SCALE_NONE}},
    {"w8a8-fp8",
     {W(HM_F8E4M3, HM_F32, HM_SCALE_BLOCK, 128, 128, false, false), HM_F8E4M3, HM_ACT_SCALE_GROUP128}},
    {"w8a8-fp8-ch",
     {W(HM_F8E4M3, HM_F32, HM_SCALE_CHANNEL, 0, 0, false, false), HM_F8E4M3, HM_ACT_SCALE_TOKEN}},
    {"w8a8-int8", {W(HM_I8, HM_F32, HM_SCALE_CHANNEL, 0, 0, false, false), HM_I8, HM_ACT_SCALE_TOKEN}},
    {"w4a8-mxfp4",
     {W(HM_F4E2M1, HM_E8M0, HM_SCALE_GROUP, 32, 0, false, false), HM_F8E4M3, HM_ACT_SCALE_TOKEN}},
    {"w4a8-int4", {W(HM_I4, HM_F32, HM_SCALE_CHANNEL, 0, 0, false, false), HM_I8, HM_ACT_SCALE_TOKEN}},
    {"w4a8-nvfp4",
     {W(HM_F4E2M1, HM_F8E4M3, HM_SCALE_GROUP, 16, 0, false, true), HM_F8E4M3, HM_ACT_SCALE_TOKEN}},
};
#undef W

/* Advances *p past prefix if it starts there. */
static bool take(const char **p, const char *prefix) {
  const size_t len = strlen(prefix);
  if (strncmp(*p, prefix, len) != 0) return false;
  *p += len;
  return true;
}

/*
 * w<B>a16[-sym][-g<G>|-ch] (HM_QUANT_SCHEMES): B-bit codes with bf16 activations and
 * scales, per group of G along K (128 unless said) or per channel. Unsigned codes carry
 * zero points (GPTQ's and AWQ's asymmetric form), except 8-bit ones, centred at 128; -sym
 * codes are centred: i4 and i8 where they exist, else unsigned ones around 2^(B-1).
 */
static bool parse_weight_only(const char *name, hm_quant_scheme *out) {
  static const hm_dtype unsigned_codes[] = {HM_U1, HM_U2, HM_U3, HM_U4, HM_U5, HM_U6, HM_U7, HM_U8};
  const char *p = name;
  if (p[0] != 'w' || p[1] < '1' || p[1] > '8') return false;
  const int bits = p[1] - '0';
  p += 2;
  if (!take(&p, "a16")) return false;
  const bool sym = take(&p, "-sym");
  hm_quant_format w = {unsigned_codes[bits - 1], HM_BF16, HM_SCALE_GROUP, 128, 0, !sym && bits < 8, false};
  if (sym && (bits == 4 || bits == 8)) w.weight = bits == 4 ? HM_I4 : HM_I8;
  if (take(&p, "-ch")) {
    w.scale_kind = HM_SCALE_CHANNEL;
    w.group_k = 0;
  } else if (take(&p, "-g")) {
    static const char *const groups[] = {"16", "32", "64", "128"};
    bool known = false;
    for (size_t i = 0; i < HM_ARRAY_SIZE(groups) && !known; i++)
      if (strcmp(p, groups[i]) == 0) known = true;
    if (!known) return false;
    w.group_k = atoi(p);
    p += strlen(p);
  }
  if (*p != '\0') return false;
  *out = (hm_quant_scheme){w, HM_BF16, HM_ACT_SCALE_NONE};
  return true;
}

hm_status hm_quant_scheme_parse(const char *name, hm_quant_scheme *out) {
  HM_CHECK_NOT_NULL(name);
  HM_CHECK_NOT_NULL(out);
  for (size_t i = 0; i < HM_ARRAY_SIZE(schemes); i++) {
    if (strcmp(schemes[i].name, name) == 0) {
      *out = schemes[i].scheme;
      return HM_OK;
    }
  }
  if (parse_weight_only(name, out)) return HM_OK;
  HM_FAIL(HM_INVALID_ARGUMENT, "unknown quantization scheme '%s' (%s)", name, HM_QUANT_SCHEMES);
}

static const char *scale_kind_name(hm_scale_kind kind) {
  switch (kind) {
  case HM_SCALE_NONE: return "none";
  case HM_SCALE_CHANNEL: return "channel";
  case HM_SCALE_GROUP: return "g";
  case HM_SCALE_BLOCK: return "block";
  case HM_SCALE_TENSOR: return "tensor";
  }
  return "?";
}

void hm_quant_scheme_describe(const hm_quant_scheme *s, char *buf, size_t len) {
  if (s == NULL || buf == NULL || len == 0) return;
  const hm_quant_format *w = &s->weight;
  char scale[32];
  if (w->scale_kind == HM_SCALE_GROUP)
    snprintf(scale, sizeof(scale), "g%d", w->group_k);
  else if (w->scale_kind == HM_SCALE_BLOCK)
    snprintf(scale, sizeof(scale), "block%dx%d", w->group_n, w->group_k);
  else
    snprintf(scale, sizeof(scale), "%s", scale_kind_name(w->scale_kind));
  snprintf(buf, len, "w:%s a:%s %s%s%s", hm_dtype_name(w->weight), hm_dtype_name(s->act), scale,
           w->zero_point ? " zp" : "", w->global_scale ? " gscale" : "");
}

const char *hm_gemm_type_name(hm_gemm_type type) {
  switch (type) {
  case HM_GEMM_DENSE: return "dense";
  case HM_GEMM_INDEXED: return "indexed";
  case HM_GEMM_GROUPED_CONTIGUOUS: return "grouped_contiguous";
  case HM_GEMM_GROUPED_MASKED: return "grouped_masked";
  }
  return "invalid";
}
