/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Round-to-nearest weight quantization into the canonical contract, and its inverse.
 * Scales are rounded to their storage type before the weights are divided by them, so
 * that dequantization here reproduces exactly what a kernel reads.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dtype.h"
#include "numfmt.h"
#include "pack.h"
#include "quant.h"

/* Per-expert working state: range statistics and the chosen scale and zero per scale group. */
struct expert_quant {
  const hm_quant_format *fmt;
  int64_t n, k, groups;
  float *lo, *hi; /* (groups) min and max of the weights of each scale group */
  float *scale;   /* (groups) stored scale, decoded, times the global scale */
  uint8_t *zero;  /* (groups) zero point codes (zero_point only) */
  float global;   /* 1 without a global scale */
};

static bool is_uint(hm_dtype d) {
  const struct hm_dtype_info *info = hm_dtype_info(d);
  return !info->is_float && !info->is_signed;
}

static bool is_float_weight(hm_dtype d) {
  return hm_dtype_info(d)->is_float;
}

/* Index of the scale group of element (row, col) within one expert. */
static int64_t scale_index(const hm_quant_format *f, int64_t k, int64_t row, int64_t col) {
  switch (f->scale_kind) {
    case HM_SCALE_GROUP: return row * (k / f->group_k) + col / f->group_k;
    case HM_SCALE_CHANNEL: return row;
    case HM_SCALE_BLOCK: return (row / f->group_n) * (k / f->group_k) + col / f->group_k;
    default: return 0;
  }
}

/* Columns of a row that share one scale along K: group_k for GROUP and BLOCK, all of K otherwise. */
static int64_t group_width(const hm_quant_format *f, int64_t k) {
  return f->scale_kind == HM_SCALE_GROUP || f->scale_kind == HM_SCALE_BLOCK ? f->group_k : k;
}

/* Largest magnitude a code can take, in units of the scale (qmax of the format). */
static float code_max(const hm_quant_format *f) {
  int bits = hm_dtype_bits(f->weight);
  switch (f->weight) {
    case HM_F8E4M3: return 448.0f;
    case HM_F8E5M2: return 57344.0f;
    case HM_F4E2M1: return 6.0f;
    default: break;
  }
  if (f->zero_point) return (float)((1 << bits) - 1);
  /* Unsigned without zero points is centred at 2^(bits-1); u1 keeps one step below zero. */
  return bits > 1 ? (float)((1 << (bits - 1)) - 1) : 1.0f;
}

/* The zero that w = (q - z) * s subtracts for integer types without stored zero points. */
static int implicit_zero(const hm_quant_format *f) {
  return is_uint(f->weight) ? 1 << (hm_dtype_bits(f->weight) - 1) : 0;
}

/* The scale a group needs before the global scale and before rounding to storage. */
static float raw_scale(const hm_quant_format *f, float lo, float hi) {
  if (f->zero_point) {
    /* Asymmetric: the range must hold zero so that the zero point is a valid code. */
    return (fmaxf(hi, 0.0f) - fminf(lo, 0.0f)) / code_max(f);
  }
  return fmaxf(-lo, hi) / code_max(f);
}

static float scale_dtype_max(hm_dtype d) {
  switch (d) {
    case HM_F16: return 65504.0f;
    case HM_F8E4M3: return 448.0f;
    case HM_E8M0: return ldexpf(1.0f, 127);
    default: return FLT_MAX;
  }
}

/* The smallest positive value of a scale type. */
static float scale_dtype_tiny(hm_dtype d) {
  switch (d) {
    case HM_F16: return ldexpf(1.0f, -24);
    case HM_BF16: return ldexpf(1.0f, -133);
    case HM_F8E4M3: return ldexpf(1.0f, -9);
    default: return FLT_TRUE_MIN;
  }
}

/* Writes scale i in the storage type and returns its decoded value in *decoded. A scale
 * that would round to zero keeps the smallest positive step, so its group survives. */
static hm_status store_scale(const hm_quant_format *f, float s, float absmax, void *scales, int64_t i,
                             float *decoded) {
  if (f->scale == HM_E8M0) {
    /* OCP MX rule: 2^(floor(log2(absmax)) - emax(e2m1)), emax = 2. */
    uint8_t code = 127;
    if (absmax > 0.0f) {
      int c = (int)hm_e8m0_from_f32_floor(absmax) - 2;
      code = (uint8_t)(c < 0 ? 0 : c);
    }
    ((uint8_t *)scales)[i] = code;
    *decoded = hm_e8m0_to_f32(code);
    return HM_OK;
  }
  if (s == 0.0f) s = 1.0f; /* an all-zero group: any scale gives zero codes */
  /* A group holding the expert's absmax lands on the top of the range up to rounding. */
  float top = scale_dtype_max(f->scale);
  if (s > top && s <= top * 1.0001f) s = top;
  if (!(s <= top))
    HM_FAIL(HM_INVALID_ARGUMENT, "scale %g of group %lld exceeds the %s range (use a global scale)",
            (double)s, (long long)i, hm_dtype_name(f->scale));
  float tiny = scale_dtype_tiny(f->scale);
  if (s < tiny) s = tiny;
  HM_CHECK(hm_convert_from_f32(f->scale, &s, (char *)scales + i * (hm_dtype_bits(f->scale) / 8), 1));
  *decoded = hm_load_f32(f->scale, scales, i);
  return HM_OK;
}

static hm_status gather_ranges(struct expert_quant *q, const float *src) {
  for (int64_t g = 0; g < q->groups; g++) {
    q->lo[g] = 0.0f;
    q->hi[g] = 0.0f;
  }
  int64_t width = group_width(q->fmt, q->k);
  for (int64_t r = 0; r < q->n; r++) {
    for (int64_t c0 = 0; c0 < q->k; c0 += width) {
      int64_t g = scale_index(q->fmt, q->k, r, c0);
      float lo = q->lo[g], hi = q->hi[g];
      for (int64_t c = c0; c < c0 + width; c++) {
        float x = src[r * q->k + c];
        if (!isfinite(x))
          HM_FAIL(HM_INVALID_ARGUMENT, "weight (%lld, %lld) is %g; weights must be finite", (long long)r,
                  (long long)c, (double)x);
        if (x < lo) lo = x;
        if (x > hi) hi = x;
      }
      q->lo[g] = lo;
      q->hi[g] = hi;
    }
  }
  return HM_OK;
}

/* The second-level scale: maps the largest group scale onto the storage type's top
 * (448 for e4m3, which gives the nvfp4 rule absmax / (448 * 6)), or onto 1. */
static float choose_global(const struct expert_quant *q) {
  float top = 0.0f;
  for (int64_t g = 0; g < q->groups; g++) top = fmaxf(top, raw_scale(q->fmt, q->lo[g], q->hi[g]));
  float target = q->fmt->scale == HM_F8E4M3 ? 448.0f : 1.0f;
  return top > 0.0f ? top / target : 1.0f;
}

static hm_status choose_scales(struct expert_quant *q, void *scales) {
  const hm_quant_format *f = q->fmt;
  for (int64_t g = 0; g < q->groups; g++) {
    float absmax = fmaxf(-q->lo[g], q->hi[g]);
    float stored = 1.0f;
    HM_CHECK(
        store_scale(f, raw_scale(f, q->lo[g], q->hi[g]) / q->global, absmax / q->global, scales, g, &stored));
    q->scale[g] = stored * q->global;
    if (f->zero_point) {
      int32_t z = hm_int_from_f32(f->weight, -fminf(q->lo[g], 0.0f) / q->scale[g]);
      q->zero[g] = (uint8_t)z;
    }
  }
  return HM_OK;
}

static uint8_t quantize_one(const struct expert_quant *q, float x, int64_t g) {
  const hm_quant_format *f = q->fmt;
  float v = x / q->scale[g];
  if (is_float_weight(f->weight)) {
    /* A scale rounded down to its storage type may push the largest element past the
     * top code; weights saturate there (e5m2 alone would overflow to Inf). */
    float top = code_max(f);
    v = fminf(fmaxf(v, -top), top);
  }
  switch (f->weight) {
    case HM_F8E4M3: return hm_e4m3_from_f32(v);
    case HM_F8E5M2: return hm_e5m2_from_f32(v);
    case HM_F4E2M1: return hm_e2m1_from_f32(v);
    default: break;
  }
  int bits = hm_dtype_bits(f->weight);
  if (!is_uint(f->weight)) return (uint8_t)(hm_int_from_f32(f->weight, v) & ((1 << bits) - 1));
  int zero = f->zero_point ? q->zero[g] : implicit_zero(f);
  /* Round before adding the zero so ties go to even in the signed domain. */
  float shifted = rintf(v) + (float)zero;
  return (uint8_t)hm_int_from_f32(f->weight, shifted);
}

static void pack_zeros(const struct expert_quant *q, uint8_t *codes, uint32_t *zeros) {
  int64_t groups_k = q->fmt->scale_kind == HM_SCALE_GROUP ? q->k / q->fmt->group_k : 1;
  for (int64_t r = 0; r < q->n; r++)
    for (int64_t gk = 0; gk < groups_k; gk++) codes[gk * q->n + r] = q->zero[r * groups_k + gk];
  /* Codes come from hm_int_from_f32 of the weight type, so they always fit. */
  (void)hm_pack_along_n(codes, groups_k, q->n, hm_dtype_bits(q->fmt->weight), zeros);
}

static void store_16bit_rows(const float *src, int64_t n, int64_t k, hm_dtype d, uint32_t *qweight) {
  int64_t row_words = hm_pack_row_words(16, k);
  for (int64_t r = 0; r < n; r++) {
    uint32_t *row = qweight + r * row_words;
    memset(row, 0, (size_t)row_words * sizeof(*row));
    for (int64_t c = 0; c < k; c++) {
      float x = src[r * k + c];
      uint32_t h = d == HM_F16 ? hm_f16_from_f32(x) : hm_bf16_from_f32(x);
      row[c / 2] |= h << (16 * (c % 2));
    }
  }
}

static hm_status quantize_expert(struct expert_quant *q, const float *src, int64_t e, hm_host_weights *w,
                                 uint8_t *codes) {
  const hm_quant_format *f = q->fmt;
  HM_CHECK(gather_ranges(q, src));
  q->global = f->global_scale ? choose_global(q) : 1.0f;
  if (f->global_scale) w->global_scale[e] = q->global;
  void *scales = (char *)w->scales + e * q->groups * hm_quant_scale_bytes(f);
  HM_CHECK(choose_scales(q, scales));
  int bits = hm_dtype_bits(f->weight);
  int64_t row_words = hm_pack_row_words(bits, q->k);
  uint32_t *qweight = w->qweight + e * q->n * row_words;
  int64_t width = group_width(f, q->k);
  for (int64_t r = 0; r < q->n; r++) {
    for (int64_t c0 = 0; c0 < q->k; c0 += width) {
      int64_t g = scale_index(f, q->k, r, c0);
      for (int64_t c = c0; c < c0 + width; c++) codes[c] = quantize_one(q, src[r * q->k + c], g);
    }
    HM_CHECK(hm_pack_rows(codes, 1, q->k, bits, qweight + r * row_words));
  }
  if (f->zero_point) pack_zeros(q, codes, w->zeros + e * hm_quant_zero_words(f, q->n, q->k));
  return HM_OK;
}

static hm_status check_weights(const hm_host_weights *w) {
  HM_CHECK_NOT_NULL(w);
  HM_CHECK(hm_quant_format_check(&w->fmt, w->n, w->k));
  if (w->experts <= 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "expert count %lld is not positive", (long long)w->experts);
  HM_CHECK_NOT_NULL(w->qweight);
  if (w->fmt.scale_kind != HM_SCALE_NONE) HM_CHECK_NOT_NULL(w->scales);
  if (w->fmt.zero_point) HM_CHECK_NOT_NULL(w->zeros);
  if (w->fmt.global_scale) HM_CHECK_NOT_NULL(w->global_scale);
  return HM_OK;
}

hm_status hm_quantize_weights(const float *src, hm_host_weights *w) {
  HM_CHECK_NOT_NULL(src);
  HM_CHECK(check_weights(w));
  const hm_quant_format *f = &w->fmt;
  if (f->scale_kind == HM_SCALE_NONE) {
    int64_t row_words = hm_pack_row_words(16, w->k);
    for (int64_t e = 0; e < w->experts; e++)
      store_16bit_rows(src + e * w->n * w->k, w->n, w->k, f->weight, w->qweight + e * w->n * row_words);
    return HM_OK;
  }
  hm_status ret = HM_OK;
  struct expert_quant q = {.fmt = f, .n = w->n, .k = w->k, .groups = hm_quant_scale_count(f, w->n, w->k)};
  q.lo = malloc((size_t)q.groups * sizeof(float));
  q.hi = malloc((size_t)q.groups * sizeof(float));
  q.scale = malloc((size_t)q.groups * sizeof(float));
  q.zero = malloc((size_t)q.groups);
  /* One buffer serves a row of weight codes and then the (groups_k, N) zero codes. */
  uint8_t *codes = malloc((size_t)(w->k > q.groups ? w->k : q.groups));
  if (!q.lo || !q.hi || !q.scale || !q.zero || !codes)
    HM_FAIL_GOTO(HM_OUT_OF_MEMORY, done, "cannot allocate quantization buffers for %lld scale groups",
                 (long long)q.groups);
  for (int64_t e = 0; e < w->experts; e++)
    HM_CHECK_GOTO(quantize_expert(&q, src + e * w->n * w->k, e, w, codes), done);
done:
  free(q.lo);
  free(q.hi);
  free(q.scale);
  free(q.zero);
  free(codes);
  return ret;
}

/* Value of each code before the zero and the scales: decoded floats, signed integers. */
static void build_code_table(hm_dtype d, float *table) {
  int bits = hm_dtype_bits(d);
  for (int code = 0; code < (1 << bits); code++) {
    switch (d) {
      case HM_F8E4M3: table[code] = hm_e4m3_to_f32((uint8_t)code); break;
      case HM_F8E5M2: table[code] = hm_e5m2_to_f32((uint8_t)code); break;
      case HM_F4E2M1: table[code] = hm_e2m1_to_f32((uint8_t)code); break;
      default:
        /* Sign-extend signed codes; unsigned codes are their own value. */
        table[code] = (float)(is_uint(d) || code < (1 << (bits - 1)) ? code : code - (1 << bits));
        break;
    }
  }
}

static void dequantize_16bit_rows(const hm_host_weights *w, int64_t e, int64_t n0, int64_t rows, float *out) {
  int64_t row_words = hm_pack_row_words(16, w->k);
  for (int64_t r = 0; r < rows; r++) {
    const uint32_t *row = w->qweight + (e * w->n + n0 + r) * row_words;
    for (int64_t c = 0; c < w->k; c++) {
      uint16_t h = (uint16_t)(row[c / 2] >> (16 * (c % 2)));
      out[r * w->k + c] = w->fmt.weight == HM_F16 ? hm_f16_to_f32(h) : hm_bf16_to_f32(h);
    }
  }
}

/* The zero subtracted from the codes of element (row, col) of expert e. */
static float zero_of(const hm_host_weights *w, int64_t e, int64_t row, int64_t col) {
  const hm_quant_format *f = &w->fmt;
  if (!f->zero_point) return (float)implicit_zero(f);
  int bits = hm_dtype_bits(f->weight);
  int64_t zero_row_words = hm_pack_row_words(bits, w->n);
  int64_t gk = f->scale_kind == HM_SCALE_GROUP ? col / f->group_k : 0;
  const uint32_t *zeros = w->zeros + e * hm_quant_zero_words(f, w->n, w->k) + gk * zero_row_words;
  return (float)hm_unpack_one(zeros, row, bits);
}

static hm_status check_row_range(const hm_host_weights *w, int64_t e, int64_t n0, int64_t rows) {
  if (e < 0 || e >= w->experts)
    HM_FAIL(HM_INVALID_ARGUMENT, "expert %lld is outside 0..%lld", (long long)e, (long long)w->experts - 1);
  if (n0 < 0 || rows < 0 || n0 + rows > w->n)
    HM_FAIL(HM_INVALID_ARGUMENT, "rows [%lld, %lld) are outside N = %lld", (long long)n0,
            (long long)(n0 + rows), (long long)w->n);
  return HM_OK;
}

hm_status hm_dequantize_rows(const hm_host_weights *w, int64_t e, int64_t n0, int64_t rows, float *out) {
  HM_CHECK(check_weights(w));
  HM_CHECK(check_row_range(w, e, n0, rows));
  if (rows == 0) return HM_OK;
  HM_CHECK_NOT_NULL(out);
  const hm_quant_format *f = &w->fmt;
  if (f->scale_kind == HM_SCALE_NONE) {
    dequantize_16bit_rows(w, e, n0, rows, out);
    return HM_OK;
  }
  uint8_t *codes = malloc((size_t)w->k);
  if (codes == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "cannot allocate a row of %lld codes", (long long)w->k);
  float table[256];
  build_code_table(f->weight, table);
  int bits = hm_dtype_bits(f->weight);
  int64_t row_words = hm_pack_row_words(bits, w->k);
  int64_t groups = hm_quant_scale_count(f, w->n, w->k);
  const char *scales = (const char *)w->scales + e * groups * hm_quant_scale_bytes(f);
  float global = f->global_scale ? w->global_scale[e] : 1.0f;
  int64_t width = group_width(f, w->k);
  for (int64_t r = 0; r < rows; r++) {
    int64_t row = n0 + r;
    (void)hm_unpack_rows(w->qweight + (e * w->n + row) * row_words, 1, w->k, bits, codes);
    for (int64_t c0 = 0; c0 < w->k; c0 += width) {
      float s = hm_load_f32(f->scale, scales, scale_index(f, w->k, row, c0));
      float z = zero_of(w, e, row, c0);
      for (int64_t c = c0; c < c0 + width; c++) out[r * w->k + c] = (table[codes[c]] - z) * s * global;
    }
  }
  free(codes);
  return HM_OK;
}
