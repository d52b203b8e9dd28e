/* SPDX-License-Identifier: Apache-2.0 */
/* Generation and launch of the W4A8 weight transform (kernels/transform_w4a8.cuh). */
#include "kernels/transform_w4a8.h"

#include <stdio.h>

#include "check.h"
#include "engine.h"
#include "kernels/hm_w4a8_codes.cuh"

/* Mirrors struct hm_w4_transform_params of transform_w4a8.cuh. */
typedef struct w4_transform_params {
  const void *qweight;
  const void *scales;
  void *out_weight;
  void *out_scales;
  int64_t experts;
  int32_t n, k, part;
} w4_transform_params;

bool hm_transform_is_w4a8(const hm_transform_desc *d) {
  return (d->act == HM_I8 && d->weight == HM_I4) || (d->act == HM_F8E4M3 && d->weight == HM_F4E2M1);
}

/* The kernel's format of d's weights: e2m1 ones are nvfp4 by their e4m3 scales. */
static int format_of(const hm_transform_desc *d) {
  if (d->weight != HM_F4E2M1) return HM_W4_INT4;
  return d->scale == HM_F8E4M3 ? HM_W4_NVFP4 : HM_W4_E2M1;
}

/* Scale bytes of a unit at one k32 step: e8m0 ones of its 64 columns, e4m3 ones of each K half. */
static int fp4_unit_bytes(const hm_transform_desc *d) {
  return 64 * hm_w4_scale_parts(format_of(d));
}

static hm_status check_desc(const hm_transform_desc *d) {
  if (!hm_transform_is_w4a8(d))
    HM_FAIL(HM_UNSUPPORTED, "W4A8 transform: %s weights with %s activations (i4 x i8, f4e2m1 x f8e4m3)",
            hm_dtype_name(d->weight), hm_dtype_name(d->act));
  if (d->n <= 0 || d->k <= 0 || d->experts <= 0 || d->k % 16 != 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "W4A8 transform: N=%lld K=%lld E=%lld (K a multiple of 16)", (long long)d->n,
            (long long)d->k, (long long)d->experts);
  if (d->n > INT32_MAX || d->k > INT32_MAX) HM_FAIL(HM_UNSUPPORTED, "W4A8 transform: N or K above 2^31");
  if (d->zero_point || d->group_n != 0)
    HM_FAIL(HM_UNSUPPORTED, "W4A8 transform: zero points or block scales");
  const int fmt = format_of(d);
  if (d->w4_f16 && fmt == HM_W4_INT4)
    HM_FAIL(HM_UNSUPPORTED, "W4A8 transform: f16 codes are for e2m1 weights");
  if (fmt == HM_W4_E2M1 && (d->scale != HM_E8M0 || d->group != 32 || d->k % 32 != 0))
    HM_FAIL(HM_UNSUPPORTED,
            "W4A8 transform: e2m1 weights take e8m0 scales per 32 on K a multiple of 32 (mxfp4) or f8e4m3 "
            "scales per 16 (nvfp4), not %s per %d on K=%lld",
            hm_dtype_name(d->scale), d->group, (long long)d->k);
  if (fmt == HM_W4_NVFP4 && d->group != 16)
    HM_FAIL(HM_UNSUPPORTED, "W4A8 transform: nvfp4 takes f8e4m3 scales per 16 along K, not per %d", d->group);
  const bool channel_scale = d->scale == HM_F16 || d->scale == HM_BF16 || d->scale == HM_F32;
  if (fmt == HM_W4_INT4 && (d->group != 0 || !channel_scale))
    HM_FAIL(HM_UNSUPPORTED, "W4A8 transform: int4 takes f16/bf16/f32 channel scales (%s, group %d)",
            hm_dtype_name(d->scale), d->group);
  return HM_OK;
}

static int64_t unit_count(const hm_transform_desc *d) {
  return d->experts * ((d->n + 63) / 64) * ((d->k + 31) / 32);
}

hm_status hm_transform_w4a8_sizes_of(const hm_transform_desc *d, hm_transform_sizes *out) {
  HM_CHECK(check_desc(d));
  const int64_t e = d->experts;
  out->weight_bytes = (size_t)unit_count(d) * 1024;
  out->in_weight_bytes = (size_t)(e * d->n * (d->k / 8)) * 4;
  if (fp4_unit_bytes(d) > 0) {
    out->scale_bytes = (size_t)unit_count(d) * (size_t)fp4_unit_bytes(d);
    out->in_scale_bytes = (size_t)(e * d->n * (d->k / d->group));
  } else {
    out->scale_bytes = (size_t)(e * d->n) * 4;
    out->in_scale_bytes = (size_t)(e * d->n) * (d->scale == HM_F32 ? 4 : 2);
  }
  return HM_OK;
}

static const hm_transform_template source_template = {"transform_w4a8.c", "transform_w4a8.cuh",
                                                      "hm_w4_transform_params", sizeof(w4_transform_params),
                                                      "hm_w4_transform_run"};

hm_status hm_transform_w4a8_gen(const hm_transform_desc *d, hm_gemm_source *out) {
  HM_CHECK(check_desc(d));
  static const char *const names[] = {[HM_W4_INT4] = "i4", [HM_W4_E2M1] = "mxfp4", [HM_W4_NVFP4] = "nvfp4"};
  const int fmt = format_of(d), scale_in = fmt == HM_W4_INT4 ? hm_transform_scale_code(d->scale) : 0;
  snprintf(out->name, sizeof(out->name), "hm_transform_w4a8_%s_s%d%s", names[fmt], scale_in,
           d->w4_f16 ? "_w16" : "");
  char targs[32];
  snprintf(targs, sizeof(targs), "%d, %d, %s", fmt, scale_in, d->w4_f16 ? "true" : "false");
  return hm_transform_source(&source_template, targs, d->arch, out);
}

hm_status hm_transform_w4a8_run(hm_engine *engine, const hm_transform_desc *d, const hm_transform_buffers *b,
                                hm_stream *stream) {
  HM_CHECK(check_desc(d));
  hm_kernel *k = NULL;
  HM_CHECK(hm_transform_kernel(engine, d, &k));
  w4_transform_params p = {b->in_weight, b->in_scales,  b->weight,     b->scales,
                           d->experts,   (int32_t)d->n, (int32_t)d->k, 0};
  /* Part 0 places the codes, part 1 the scales. */
  HM_CHECK(hm_transform_launch(k, &p, unit_count(d) * 32, engine->sm_count, stream));
  p.part = 1;
  const int64_t scales = fp4_unit_bytes(d) > 0 ? unit_count(d) * fp4_unit_bytes(d) : d->experts * d->n;
  return hm_transform_launch(k, &p, scales, engine->sm_count, stream);
}
