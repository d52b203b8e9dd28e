/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host quantization of activations: absmax scaling per token or per 1x128 group, the
 * same rule the GPU applies on the fly, so the reference GEMM sees the same inputs.
 */
#include <math.h>

#include "check.h"
#include "numfmt.h"
#include "quant.h"

#define HM_ACT_GROUP 128

static hm_status check_act_args(const void *x, const void *q, const float *scales, int64_t m, int64_t k,
                                hm_dtype act, hm_act_scale_kind kind) {
  if (m < 0 || k <= 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "activation shape (%lld, %lld) is invalid", (long long)m, (long long)k);
  bool plain = act == HM_F16 || act == HM_BF16;
  bool scaled = act == HM_F8E4M3 || act == HM_I8;
  if (!plain && !scaled)
    HM_FAIL(HM_INVALID_ARGUMENT, "%s is not an activation type (f16, bf16, f8e4m3, i8)", hm_dtype_name(act));
  if (plain && kind != HM_ACT_SCALE_NONE)
    HM_FAIL(HM_INVALID_ARGUMENT, "%s activations take no scales", hm_dtype_name(act));
  if (scaled && kind != HM_ACT_SCALE_TOKEN && kind != HM_ACT_SCALE_GROUP128)
    HM_FAIL(HM_INVALID_ARGUMENT, "%s activations need per-token or per-1x128 scales", hm_dtype_name(act));
  if (m == 0) return HM_OK;
  HM_CHECK_NOT_NULL(x);
  HM_CHECK_NOT_NULL(q);
  if (scaled) HM_CHECK_NOT_NULL(scales);
  return HM_OK;
}

static int64_t groups_per_row(hm_act_scale_kind kind, int64_t k) {
  return kind == HM_ACT_SCALE_GROUP128 ? (k + HM_ACT_GROUP - 1) / HM_ACT_GROUP : 1;
}

/* Quantizes x[0..len) with one absmax scale; the largest element maps onto qmax. */
static hm_status quantize_group(const float *x, int64_t len, hm_dtype act, void *q, int64_t q0,
                                float *scale) {
  float absmax = 0.0f;
  for (int64_t i = 0; i < len; i++) {
    if (!isfinite(x[i]))
      HM_FAIL(HM_INVALID_ARGUMENT, "activation element %lld is %g; activations must be finite",
              (long long)(q0 + i), (double)x[i]);
    absmax = fmaxf(absmax, fabsf(x[i]));
  }
  float qmax = act == HM_F8E4M3 ? 448.0f : 127.0f;
  float s = absmax / qmax;
  if (s == 0.0f) s = 1.0f;
  *scale = s;
  for (int64_t i = 0; i < len; i++) {
    float v = x[i] / s;
    if (act == HM_F8E4M3)
      ((uint8_t *)q)[q0 + i] = hm_e4m3_from_f32(v);
    else
      ((int8_t *)q)[q0 + i] = (int8_t)hm_int_from_f32(HM_I8, v);
  }
  return HM_OK;
}

hm_status hm_quantize_activations(const float *x, int64_t m, int64_t k, hm_dtype act, hm_act_scale_kind kind,
                                  void *q, float *scales) {
  HM_CHECK(check_act_args(x, q, scales, m, k, act, kind));
  if (kind == HM_ACT_SCALE_NONE) return hm_convert_from_f32(act, x, q, m * k);
  int64_t groups = groups_per_row(kind, k);
  int64_t width = kind == HM_ACT_SCALE_GROUP128 ? HM_ACT_GROUP : k;
  for (int64_t r = 0; r < m; r++) {
    for (int64_t g = 0; g < groups; g++) {
      int64_t c0 = g * width;
      int64_t len = c0 + width <= k ? width : k - c0;
      HM_CHECK(quantize_group(x + r * k + c0, len, act, q, r * k + c0, &scales[r * groups + g]));
    }
  }
  return HM_OK;
}

hm_status hm_dequantize_activations(const void *q, const float *scales, int64_t m, int64_t k, hm_dtype act,
                                    hm_act_scale_kind kind, float *out) {
  HM_CHECK(check_act_args(out, q, scales, m, k, act, kind));
  if (kind == HM_ACT_SCALE_NONE) return hm_convert_to_f32(act, q, out, m * k);
  int64_t groups = groups_per_row(kind, k);
  int64_t width = kind == HM_ACT_SCALE_GROUP128 ? HM_ACT_GROUP : k;
  for (int64_t r = 0; r < m; r++)
    for (int64_t c = 0; c < k; c++)
      out[r * k + c] = hm_load_f32(act, q, r * k + c) * scales[r * groups + c / width];
  return HM_OK;
}
