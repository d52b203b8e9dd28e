/* SPDX-License-Identifier: Apache-2.0 */
/* Generation and launch of the W8A8 weight transform (kernels/transform_w8.cuh). */
#include "kernels/transform_w8.h"

#include <stdio.h>

#include "check.h"
#include "engine.h"
#include "kernels/transform_w4a8.h"

/* Mirrors struct hm_w8_transform_params of transform_w8.cuh. */
typedef struct w8_transform_params {
  const void *qweight;
  const void *scales;
  void *out_weight;
  void *out_scales;
  int64_t experts;
  int32_t n, k, scales_per_expert, part;
} w8_transform_params;

bool hm_transform_is_w8(const hm_transform_desc *d) {
  return d->act == HM_F8E4M3 || d->act == HM_I8;
}

static hm_status check_desc(const hm_transform_desc *d) {
  if (d->weight != HM_I8 && d->weight != HM_F8E4M3)
    HM_FAIL(HM_UNSUPPORTED,
            "W8A8 transform: weight type %s with %s activations (i8 or f8e4m3; W4A8: i4 x i8, "
            "f4e2m1 x f8e4m3)",
            hm_dtype_name(d->weight), hm_dtype_name(d->act));
  if (d->scale != HM_F16 && d->scale != HM_BF16 && d->scale != HM_F32)
    HM_FAIL(HM_UNSUPPORTED, "W8A8 transform: scale type %s", hm_dtype_name(d->scale));
  if (d->n <= 0 || d->k <= 0 || d->experts <= 0 || d->k % 16 != 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "W8A8 transform: N=%lld K=%lld E=%lld (K a multiple of 16)", (long long)d->n,
            (long long)d->k, (long long)d->experts);
  if (d->n > INT32_MAX || d->k > INT32_MAX) HM_FAIL(HM_UNSUPPORTED, "W8A8 transform: N or K above 2^31");
  if (d->group_n != 0 && (d->group <= 0 || d->n % d->group_n != 0 || d->k % d->group != 0))
    HM_FAIL(HM_INVALID_ARGUMENT, "W8A8 transform: %dx%d blocks do not tile N=%lld K=%lld", d->group_n,
            d->group, (long long)d->n, (long long)d->k);
  if (d->group_n == 0 && d->group != 0)
    HM_FAIL(HM_UNSUPPORTED, "W8A8 transform: group scales (group %d)", d->group);
  return HM_OK;
}

static int64_t scales_per_expert(const hm_transform_desc *d) {
  return d->group_n ? (d->n / d->group_n) * (d->k / d->group) : d->n;
}

hm_status hm_transform_w8_sizes_of(const hm_transform_desc *d, hm_transform_sizes *out) {
  if (hm_transform_is_w4a8(d)) return hm_transform_w4a8_sizes_of(d, out);
  HM_CHECK(check_desc(d));
  const int64_t n_units = (d->n + 63) / 64, k32 = (d->k + 31) / 32, e = d->experts;
  out->weight_bytes = (size_t)(e * n_units * k32) * 2048;
  out->in_weight_bytes = (size_t)(e * d->n * d->k);
  out->scale_bytes = (size_t)(e * scales_per_expert(d)) * 4;
  out->in_scale_bytes = (size_t)(e * scales_per_expert(d)) * (d->scale == HM_F32 ? 4 : 2);
  return HM_OK;
}

static const hm_transform_template source_template = {"transform_w8.c", "transform_w8.cuh",
                                                      "hm_w8_transform_params", sizeof(w8_transform_params),
                                                      "hm_w8_transform_run"};

hm_status hm_transform_w8_gen(const hm_transform_desc *d, hm_gemm_source *out) {
  if (hm_transform_is_w4a8(d)) return hm_transform_w4a8_gen(d, out);
  HM_CHECK(check_desc(d));
  const int scale_in = hm_transform_scale_code(d->scale);
  snprintf(out->name, sizeof(out->name), "hm_transform_w8_s%d", scale_in);
  char targs[16];
  snprintf(targs, sizeof(targs), "%d", scale_in);
  return hm_transform_source(&source_template, targs, d->arch, out);
}

hm_status hm_transform_w8_run(hm_engine *engine, const hm_transform_desc *d, const hm_transform_buffers *b,
                              hm_stream *stream) {
  if (hm_transform_is_w4a8(d)) return hm_transform_w4a8_run(engine, d, b, stream);
  HM_CHECK(check_desc(d));
  hm_kernel *k = NULL;
  HM_CHECK(hm_transform_kernel(engine, d, &k));
  const int64_t n_units = (d->n + 63) / 64, k32 = (d->k + 31) / 32;
  w8_transform_params p = {b->in_weight,
                           b->in_scales,
                           b->weight,
                           b->scales,
                           d->experts,
                           (int32_t)d->n,
                           (int32_t)d->k,
                           (int32_t)scales_per_expert(d),
                           0};
  /* Part 0 places the codes, part 1 the scales. */
  p.part = 0;
  HM_CHECK(hm_transform_launch(k, &p, d->experts * n_units * k32 * 32, engine->sm_count, stream));
  p.part = 1;
  return hm_transform_launch(k, &p, d->experts * scales_per_expert(d), engine->sm_count, stream);
}
