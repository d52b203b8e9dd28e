/* SPDX-License-Identifier: Apache-2.0 */
/* Weight formats: the support matrix, array sizes of the canonical contract, host storage. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dtype.h"
#include "pack.h"
#include "quant.h"

static bool is_uint(hm_dtype d) {
  const struct hm_dtype_info *info = hm_dtype_info(d);
  return info != NULL && !info->is_float && !info->is_signed;
}

static bool is_int_weight(hm_dtype d) {
  return is_uint(d) || d == HM_I4 || d == HM_I8;
}
static bool is_16bit_float(hm_dtype d) {
  return d == HM_F16 || d == HM_BF16;
}
static bool is_wide_scale(hm_dtype d) {
  return d == HM_F16 || d == HM_BF16 || d == HM_F32;
}

static hm_status check_group_k(const hm_quant_format *f, int64_t k) {
  if (f->group_k != 16 && f->group_k != 32 && f->group_k != 64 && f->group_k != 128)
    HM_FAIL(HM_INVALID_ARGUMENT, "group_k %d is not one of 16, 32, 64, 128", f->group_k);
  if (k % f->group_k != 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "group_k %d does not divide K = %lld", f->group_k, (long long)k);
  return HM_OK;
}

static hm_status check_block(const hm_quant_format *f, int64_t n, int64_t k) {
  if (f->group_n != 128 || f->group_k != 128)
    HM_FAIL(HM_INVALID_ARGUMENT, "block scales are 128x128, not %dx%d", f->group_n, f->group_k);
  if (n % 128 != 0 || k % 128 != 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "128x128 block scales need N and K multiples of 128 (N = %lld, K = %lld)",
            (long long)n, (long long)k);
  if (f->scale != HM_F32)
    HM_FAIL(HM_INVALID_ARGUMENT, "block scales are f32, not %s", hm_dtype_name(f->scale));
  return HM_OK;
}

/* Unquantized 16-bit weights go through the same contract with no scales at all. */
static hm_status check_unquantized(const hm_quant_format *f) {
  if (f->scale_kind != HM_SCALE_NONE)
    HM_FAIL(HM_INVALID_ARGUMENT, "%s weights are unquantized and take scale_kind NONE",
            hm_dtype_name(f->weight));
  if (f->zero_point || f->global_scale)
    HM_FAIL(HM_INVALID_ARGUMENT, "unquantized %s weights take no zero points or global scale",
            hm_dtype_name(f->weight));
  return HM_OK;
}

/* Which scale dtypes go with which weight type (microscaling formats are fixed pairs). */
static hm_status check_scale_dtype(const hm_quant_format *f) {
  if (f->weight == HM_F4E2M1) {
    if (f->scale == HM_E8M0 && f->scale_kind == HM_SCALE_GROUP && f->group_k == 32) return HM_OK;
    if (f->scale == HM_F8E4M3 && f->scale_kind == HM_SCALE_GROUP && f->group_k == 16) return HM_OK;
    HM_FAIL(HM_INVALID_ARGUMENT,
            "f4e2m1 weights take e8m0 scales per 32 (mxfp4) or f8e4m3 scales per 16 "
            "(nvfp4), not %s scales",
            hm_dtype_name(f->scale));
  }
  if (!is_wide_scale(f->scale))
    HM_FAIL(HM_INVALID_ARGUMENT,
            "%s scales go only with f4e2m1 weights; %s weights take f16, bf16 or f32 scales",
            hm_dtype_name(f->scale), hm_dtype_name(f->weight));
  return HM_OK;
}

static hm_status check_zero_point(const hm_quant_format *f) {
  if (!f->zero_point) return HM_OK;
  if (!is_uint(f->weight))
    HM_FAIL(HM_INVALID_ARGUMENT, "zero points need an unsigned integer weight type, not %s",
            hm_dtype_name(f->weight));
  if (f->scale_kind != HM_SCALE_GROUP && f->scale_kind != HM_SCALE_CHANNEL)
    HM_FAIL(HM_INVALID_ARGUMENT, "zero points go with group or channel scales only");
  return HM_OK;
}

hm_status hm_quant_format_check(const hm_quant_format *fmt, int64_t n, int64_t k) {
  HM_CHECK_NOT_NULL(fmt);
  if (n <= 0 || k <= 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "weight shape N = %lld, K = %lld is not positive", (long long)n,
            (long long)k);
  if (is_16bit_float(fmt->weight)) return check_unquantized(fmt);
  if (!is_int_weight(fmt->weight) && fmt->weight != HM_F8E4M3 && fmt->weight != HM_F8E5M2 &&
      fmt->weight != HM_F4E2M1)
    HM_FAIL(HM_INVALID_ARGUMENT, "%s is not a weight type", hm_dtype_name(fmt->weight));
  switch (fmt->scale_kind) {
    case HM_SCALE_NONE:
      HM_FAIL(HM_INVALID_ARGUMENT, "%s weights need scales (scale_kind NONE is for f16/bf16)",
              hm_dtype_name(fmt->weight));
    case HM_SCALE_GROUP: HM_CHECK(check_group_k(fmt, k)); break;
    case HM_SCALE_BLOCK: HM_CHECK(check_block(fmt, n, k)); break;
    case HM_SCALE_CHANNEL:
    case HM_SCALE_TENSOR: break;
    default: HM_FAIL(HM_INVALID_ARGUMENT, "scale_kind %d is not a scale layout", (int)fmt->scale_kind);
  }
  HM_CHECK(check_scale_dtype(fmt));
  return check_zero_point(fmt);
}

static int64_t scale_groups_k(const hm_quant_format *f, int64_t k) {
  switch (f->scale_kind) {
    case HM_SCALE_GROUP:
    case HM_SCALE_BLOCK: return f->group_k > 0 ? k / f->group_k : 0;
    case HM_SCALE_CHANNEL:
    case HM_SCALE_TENSOR: return 1;
    default: return 0;
  }
}

int64_t hm_quant_qweight_words(const hm_quant_format *fmt, int64_t n, int64_t k) {
  if (fmt == NULL || n <= 0) return 0;
  return n * hm_pack_row_words(hm_dtype_bits(fmt->weight), k);
}

int64_t hm_quant_scale_count(const hm_quant_format *fmt, int64_t n, int64_t k) {
  if (fmt == NULL || n <= 0 || k <= 0) return 0;
  switch (fmt->scale_kind) {
    case HM_SCALE_GROUP: return n * scale_groups_k(fmt, k);
    case HM_SCALE_CHANNEL: return n;
    case HM_SCALE_BLOCK: return fmt->group_n > 0 ? (n / fmt->group_n) * scale_groups_k(fmt, k) : 0;
    case HM_SCALE_TENSOR: return 1;
    default: return 0;
  }
}

int64_t hm_quant_zero_words(const hm_quant_format *fmt, int64_t n, int64_t k) {
  if (fmt == NULL || !fmt->zero_point || k <= 0) return 0;
  return scale_groups_k(fmt, k) * hm_pack_row_words(hm_dtype_bits(fmt->weight), n);
}

int hm_quant_scale_bytes(const hm_quant_format *fmt) {
  if (fmt == NULL || fmt->scale_kind == HM_SCALE_NONE) return 0;
  return hm_dtype_bits(fmt->scale) / 8;
}

void hm_host_weights_free(hm_host_weights *w) {
  if (w == NULL) return;
  free(w->qweight);
  free(w->scales);
  free(w->zeros);
  free(w->global_scale);
  w->qweight = NULL;
  w->scales = NULL;
  w->zeros = NULL;
  w->global_scale = NULL;
}

/* calloc of count elements of size bytes, NULL for count 0 (an absent array). */
static hm_status alloc_array(void **out, int64_t count, size_t size, const char *what) {
  *out = NULL;
  if (count == 0) return HM_OK;
  *out = calloc((size_t)count, size);
  if (*out == NULL)
    HM_FAIL(HM_OUT_OF_MEMORY, "cannot allocate %lld x %zu bytes for %s", (long long)count, size, what);
  return HM_OK;
}

hm_status hm_host_weights_alloc(hm_host_weights *w, const hm_quant_format *fmt, int64_t experts, int64_t n,
                                int64_t k) {
  HM_CHECK_NOT_NULL(w);
  memset(w, 0, sizeof(*w));
  HM_CHECK(hm_quant_format_check(fmt, n, k));
  if (experts <= 0) HM_FAIL(HM_INVALID_ARGUMENT, "expert count %lld is not positive", (long long)experts);
  hm_status ret = HM_OK;
  w->fmt = *fmt;
  w->experts = experts;
  w->n = n;
  w->k = k;
  void *qweight = NULL, *zeros = NULL, *global_scale = NULL;
  HM_CHECK_GOTO(alloc_array(&qweight, experts * hm_quant_qweight_words(fmt, n, k), 4, "qweight"), fail);
  w->qweight = qweight;
  HM_CHECK_GOTO(alloc_array(&w->scales, experts * hm_quant_scale_count(fmt, n, k),
                            (size_t)hm_quant_scale_bytes(fmt), "scales"),
                fail);
  HM_CHECK_GOTO(alloc_array(&zeros, experts * hm_quant_zero_words(fmt, n, k), 4, "zeros"), fail);
  w->zeros = zeros;
  HM_CHECK_GOTO(alloc_array(&global_scale, fmt->global_scale ? experts : 0, sizeof(float), "global_scale"),
                fail);
  w->global_scale = global_scale;
  return HM_OK;
fail:
  hm_host_weights_free(w);
  return ret;
}

hm_weights_view hm_host_weights_view(const hm_host_weights *w) {
  hm_weights_view view;
  memset(&view, 0, sizeof(view));
  if (w == NULL) return view;
  view.qweight = w->qweight;
  view.scales = w->scales;
  view.zeros = w->zeros;
  view.global_scale = w->global_scale;
  return view;
}

/* Expected largest |w| in a scale group of N(0,1) weights, by group size. */
static double expected_group_absmax(const hm_quant_format *f) {
  if (f->scale_kind != HM_SCALE_GROUP) return 4.5; /* thousands of elements or more */
  switch (f->group_k) {
    case 16: return 2.2;
    case 32: return 2.5;
    case 64: return 2.75;
    default: return 3.0;
  }
}

double hm_quant_error_bound(const hm_quant_format *fmt) {
  if (hm_quant_format_check(fmt, 128, 128) != HM_OK) return -1.0;
  switch (fmt->weight) {
    case HM_F16: return 4e-4;
    case HM_BF16: return 3e-3;
    case HM_F8E4M3: return 0.04;
    case HM_F8E5M2: return 0.08;
    case HM_F4E2M1: return fmt->scale == HM_E8M0 ? 0.18 : 0.15;
    default: break;
  }
  int bits = hm_dtype_bits(fmt->weight);
  double absmax = expected_group_absmax(fmt);
  double levels =
      fmt->zero_point ? (double)((1 << bits) - 1) / 2.0 : fmax((double)((1 << (bits - 1)) - 1), 1.0);
  /* Uniform rounding noise of one step, step = absmax / levels, with a margin of 1.5. */
  double bound = 1.5 * (absmax / levels) / sqrt(12.0);
  return fmin(bound, 1.0);
}
