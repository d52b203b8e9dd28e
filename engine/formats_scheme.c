/* SPDX-License-Identifier: Apache-2.0 */
/* Named quantization schemes (the --quant names) and GEMM type names. */
#include <stdio.h>
#include <string.h>

#include "check.h"

struct scheme_entry {
  const char *name;
  hm_quant_scheme scheme;
};

#define W(wt, st, kind, gk, gn, zp, gs) {wt, st, kind, gk, gn, zp, gs}
static const struct scheme_entry schemes[] = {
    {"bf16", {W(HM_BF16, HM_BF16, HM_SCALE_NONE, 0, 0, false, false), HM_BF16, HM_ACT_SCALE_NONE}},
    {"w4a16", {W(HM_U4, HM_BF16, HM_SCALE_GROUP, 128, 0, true, false), HM_BF16, HM_ACT_SCALE_NONE}},
    {"w4a16-sym", {W(HM_I4, HM_BF16, HM_SCALE_GROUP, 128, 0, false, false), HM_BF16, HM_ACT_SCALE_NONE}},
    {"w8a16", {W(HM_U8, HM_BF16, HM_SCALE_GROUP, 128, 0, false, false), HM_BF16, HM_ACT_SCALE_NONE}},
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

hm_status hm_quant_scheme_parse(const char *name, hm_quant_scheme *out) {
  HM_CHECK_NOT_NULL(name);
  HM_CHECK_NOT_NULL(out);
  for (size_t i = 0; i < HM_ARRAY_SIZE(schemes); i++) {
    if (strcmp(schemes[i].name, name) == 0) {
      *out = schemes[i].scheme;
      return HM_OK;
    }
  }
  HM_FAIL(HM_INVALID_ARGUMENT,
          "unknown quantization scheme '%s' (bf16, w4a16, w4a16-sym, w8a16, w8a8-fp8, w8a8-fp8-ch, "
          "w8a8-int8, w4a8-mxfp4, w4a8-int4, w4a8-nvfp4)",
          name);
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
