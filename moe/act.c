/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The activation between the two expert GEMMs, and the quantization of x for 8-bit
 * paths (the identity function): bf16 rows in, f32 math, rows of the down GEMM's
 * activation type out. Host loop, or kernels/moe_act.cuh with the same formulas.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "moe_internal.h"
#include "numfmt.h"
#include "quant.h"

int hm_moe_act_fn_of(hm_moe_activation act) {
  switch (act) {
    case HM_MOE_ACT_SILU_MUL: return HM_ACT_FN_SILU_MUL;
    case HM_MOE_ACT_GELU_MUL: return HM_ACT_FN_GELU_MUL;
    case HM_MOE_ACT_RELU2: return HM_ACT_FN_RELU2;
  }
  return -1;
}

static bool is_gated(int fn) {
  return fn == HM_ACT_FN_SILU_MUL || fn == HM_ACT_FN_GELU_MUL;
}

static float act_value(int fn, float g, float u) {
  switch (fn) {
    case HM_ACT_FN_SILU_MUL: return g / (1.0f + expf(-g)) * u;
    case HM_ACT_FN_GELU_MUL: return 0.5f * g * (1.0f + erff(g * 0.70710678118654752f)) * u;
    case HM_ACT_FN_RELU2: return g > 0.0f ? g * g : 0.0f;
    default: return g;
  }
}

static bool is_8bit(hm_dtype t) {
  return t == HM_F8E4M3 || t == HM_I8;
}

static hm_status check_args(const hm_moe_act_args *a) {
  HM_CHECK_NOT_NULL(a);
  if (a->fn < HM_ACT_FN_SILU_MUL || a->fn > HM_ACT_FN_IDENTITY)
    HM_FAIL(HM_INVALID_ARGUMENT, "activation function %d is unknown", a->fn);
  if (a->items < 0 || a->width < 1)
    HM_FAIL(HM_INVALID_ARGUMENT, "activation of %lld rows of width %lld", (long long)a->items,
            (long long)a->width);
  int64_t need = is_gated(a->fn) ? 2 * a->width : a->width;
  if (a->in_stride < need)
    HM_FAIL(HM_INVALID_ARGUMENT, "activation input stride %lld is below the %lld columns it reads",
            (long long)a->in_stride, (long long)need);
  bool wide = a->out_type == HM_BF16 || a->out_type == HM_F16;
  if (!wide && !is_8bit(a->out_type))
    HM_FAIL(HM_INVALID_ARGUMENT, "activation output type %s is not bf16, f16, f8e4m3 or i8",
            hm_dtype_name(a->out_type));
  if (wide && a->scale != HM_ACT_SCALE_NONE)
    HM_FAIL(HM_INVALID_ARGUMENT, "%s activations take no scales", hm_dtype_name(a->out_type));
  if (!wide && a->scale != HM_ACT_SCALE_TOKEN && a->scale != HM_ACT_SCALE_GROUP128)
    HM_FAIL(HM_INVALID_ARGUMENT, "%s activations need per-token or 1x128 scales", hm_dtype_name(a->out_type));
  if (a->items == 0) return HM_OK;
  HM_CHECK_NOT_NULL(a->in);
  HM_CHECK_NOT_NULL(a->out);
  if (!wide) HM_CHECK_NOT_NULL(a->out_scale);
  return HM_OK;
}

static hm_status act_host(const hm_moe_act_args *a) {
  float *v = malloc((size_t)a->width * sizeof(float));
  if (v == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "activation row of %lld", (long long)a->width);
  hm_status ret = HM_OK;
  bool gated = is_gated(a->fn);
  int64_t groups = a->scale == HM_ACT_SCALE_GROUP128 ? (a->width + 127) / 128 : 1;
  size_t elem = (size_t)hm_dtype_bits(a->out_type) / 8;
  for (int64_t item = 0; item < a->items; item++) {
    int64_t row = a->row_of ? a->row_of[item] : item;
    if (row < 0) continue;
    const uint16_t *in = (const uint16_t *)a->in + row * a->in_stride;
    for (int64_t c = 0; c < a->width; c++)
      v[c] = act_value(a->fn, hm_bf16_to_f32(in[c]), gated ? hm_bf16_to_f32(in[a->width + c]) : 0.0f);
    void *out = (char *)a->out + (size_t)(row * a->width) * elem;
    if (is_8bit(a->out_type))
      HM_CHECK_GOTO(
          hm_quantize_activations(v, 1, a->width, a->out_type, a->scale, out, a->out_scale + row * groups),
          done);
    else
      HM_CHECK_GOTO(hm_convert_from_f32(a->out_type, v, out, a->width), done);
  }
done:
  free(v);
  return ret;
}

static int kernel_out(hm_dtype t) {
  switch (t) {
    case HM_F16: return HM_ACT_OUT_F16;
    case HM_F8E4M3: return HM_ACT_OUT_E4M3;
    case HM_I8: return HM_ACT_OUT_I8;
    default: return HM_ACT_OUT_BF16;
  }
}

static int kernel_scale(hm_act_scale_kind s) {
  return s == HM_ACT_SCALE_TOKEN ? HM_ACT_SCALE_TOKEN_ : s == HM_ACT_SCALE_GROUP128 ? HM_ACT_SCALE_GROUP_ : 0;
}

hm_status hm_moe_act_kernel(hm_moe_exec *x, hm_kernel **slot, const hm_moe_act_args *a, hm_kernel **out) {
  char defines[256];
  snprintf(
      defines, sizeof(defines),
      "#define HM_ACT_FN %d\n#define HM_ACT_WIDTH %lld\n#define HM_ACT_OUT %d\n#define HM_ACT_SCALE %d\n",
      a->fn, (long long)a->width, kernel_out(a->out_type), kernel_scale(a->scale));
  return hm_moe_kernel_get(x, slot, "hm_moe_act", defines, "moe_act.cuh", out);
}

static hm_status act_cuda(hm_moe_exec *x, hm_kernel **slot, const hm_moe_act_args *a) {
  hm_kernel *k = NULL;
  HM_CHECK(hm_moe_act_kernel(x, slot, a, &k));
  struct hm_moe_act_params p = {.row_of = a->row_of,
                                .in = a->in,
                                .out = a->out,
                                .out_scale = a->out_scale,
                                .in_stride = a->in_stride,
                                .items = a->items};
  return hm_moe_kernel_launch(x, k, a->items, 1, HM_ACT_THREADS, &p);
}

hm_status hm_moe_act_run(hm_moe_exec *x, hm_kernel **slot, const hm_moe_act_args *a) {
  HM_CHECK(check_args(a));
  if (a->items == 0) return HM_OK;
  if (!hm_moe_on_host(x)) return act_cuda(x, slot, a);
  HM_CHECK(act_host(a));
  x->launches++;
  return HM_OK;
}
