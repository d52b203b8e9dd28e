/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers of the reference GEMM tests: random weights and activations of a format,
 * one expert's view of a weight set, and a naive double-precision product.
 */
#ifndef TEST_REF_GEMM_UTIL_H
#define TEST_REF_GEMM_UTIL_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "hm_test.h"
#include "numfmt.h"
#include "quant.h"
#include "ref_gemm.h"

static inline void *rg_alloc(size_t bytes) {
  void *p = malloc(bytes > 0 ? bytes : 1);
  assert_non_null(p);
  return p;
}

static inline hm_quant_format rg_format(hm_dtype weight, hm_dtype scale, hm_scale_kind kind, int group_k,
                                        bool zero_point) {
  hm_quant_format f = {weight, scale, kind, group_k, kind == HM_SCALE_BLOCK ? 128 : 0, zero_point, false};
  return f;
}

/* Quantized random weights (E, N, K) of fmt. */
static inline void rg_weights(hm_rng *rng, const hm_quant_format *fmt, int64_t e, int64_t n, int64_t k,
                              hm_host_weights *w) {
  float *src = rg_alloc((size_t)(e * n * k) * sizeof(float));
  hm_rng_fill_normal(rng, src, (size_t)(e * n * k), 0.05f);
  HM_ASSERT_OK(hm_host_weights_alloc(w, fmt, e, n, k));
  HM_ASSERT_OK(hm_quantize_weights(src, w));
  free(src);
}

/* Expert e of w alone, as a one-expert weight set sharing w's arrays. */
static inline hm_host_weights rg_expert_view(const hm_host_weights *w, int64_t e) {
  const hm_quant_format *f = &w->fmt;
  hm_host_weights v = *w;
  v.experts = 1;
  v.qweight = w->qweight + e * hm_quant_qweight_words(f, w->n, w->k);
  if (w->scales != NULL)
    v.scales = (char *)w->scales + e * hm_quant_scale_count(f, w->n, w->k) * hm_quant_scale_bytes(f);
  if (w->zeros != NULL) v.zeros = w->zeros + e * hm_quant_zero_words(f, w->n, w->k);
  if (w->global_scale != NULL) v.global_scale = w->global_scale + e;
  return v;
}

/* Activations of one type: what the GEMM reads and the f32 values it should see. */
typedef struct rg_acts {
  hm_dtype act;
  hm_act_scale_kind kind;
  int64_t m, k;
  void *q;       /* (m, k) of act */
  float *scales; /* per row, or per row x 128 columns */
  float *f32;    /* (m, k) dequantized */
} rg_acts;

static inline int64_t rg_scales_per_row(hm_act_scale_kind kind, int64_t k) {
  return kind == HM_ACT_SCALE_GROUP128 ? (k + 127) / 128 : 1;
}

static inline void rg_acts_make(hm_rng *rng, hm_dtype act, hm_act_scale_kind kind, int64_t m, int64_t k,
                                rg_acts *a) {
  *a = (rg_acts){.act = act, .kind = kind, .m = m, .k = k};
  float *x = rg_alloc((size_t)(m * k) * sizeof(float));
  hm_rng_fill_normal(rng, x, (size_t)(m * k), 1.0f);
  a->q = rg_alloc((size_t)(m * k) * (size_t)hm_dtype_bits(act) / 8);
  a->scales = rg_alloc((size_t)(m * rg_scales_per_row(kind, k)) * sizeof(float));
  a->f32 = rg_alloc((size_t)(m * k) * sizeof(float));
  if (kind == HM_ACT_SCALE_NONE) {
    HM_ASSERT_OK(hm_convert_from_f32(act, x, a->q, m * k));
    HM_ASSERT_OK(hm_convert_to_f32(act, a->q, a->f32, m * k));
  } else {
    HM_ASSERT_OK(hm_quantize_activations(x, m, k, act, kind, a->q, a->scales));
    HM_ASSERT_OK(hm_dequantize_activations(a->q, a->scales, m, k, act, kind, a->f32));
  }
  free(x);
}

static inline void rg_acts_free(rg_acts *a) {
  free(a->q);
  free(a->scales);
  free(a->f32);
}

/* Copies row src_row of src (codes, scales, f32) to row dst_row of dst (same type and K). */
static inline void rg_acts_copy_row(const rg_acts *src, int64_t src_row, rg_acts *dst, int64_t dst_row) {
  size_t row_bytes = (size_t)src->k * (size_t)hm_dtype_bits(src->act) / 8;
  int64_t spr = rg_scales_per_row(src->kind, src->k);
  memcpy((char *)dst->q + (size_t)dst_row * row_bytes, (const char *)src->q + (size_t)src_row * row_bytes,
         row_bytes);
  memcpy(dst->scales + dst_row * spr, src->scales + src_row * spr, (size_t)spr * sizeof(float));
  memcpy(dst->f32 + dst_row * src->k, src->f32 + src_row * src->k, (size_t)src->k * sizeof(float));
}

/* A random bias of count elements in the output type; f32 receives its exact values. */
static inline void *rg_bias_make(hm_rng *rng, hm_dtype out, int64_t count, float *f32) {
  hm_rng_fill_normal(rng, f32, (size_t)count, 0.5f);
  void *bias = rg_alloc((size_t)count * (size_t)hm_dtype_bits(out) / 8);
  HM_ASSERT_OK(hm_convert_from_f32(out, f32, bias, count));
  HM_ASSERT_OK(hm_convert_to_f32(out, bias, f32, count));
  return bias;
}

/*
 * ref (m, N) = a_f32 (m, K) . W_e^T (+ bias_e) in double, W_e from hm_dequantize_rows;
 * bias (E, N) f32 or NULL.
 */
static inline void rg_naive(const hm_host_weights *w, int64_t e, const float *a_f32, int64_t m,
                            const float *bias, double *ref) {
  float *b = rg_alloc((size_t)(w->n * w->k) * sizeof(float));
  HM_ASSERT_OK(hm_dequantize_rows(w, e, 0, w->n, b));
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < w->n; j++) {
      double sum = bias != NULL ? bias[e * w->n + j] : 0.0;
      for (int64_t kk = 0; kk < w->k; kk++) sum += (double)a_f32[i * w->k + kk] * (double)b[j * w->k + kk];
      ref[i * w->n + j] = sum;
    }
  free(b);
}

/* ||out - ref|| / ||ref|| with out in f32, f16 or bf16. */
static inline double rg_rel_error(hm_dtype out, const void *c, const double *ref, int64_t count) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < count; i++) {
    double v = hm_load_f32(out, c, i);
    if (!isfinite(v)) return INFINITY;
    num += (v - ref[i]) * (v - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Tolerance of rg_rel_error for an output type (f32 sums over K up to a few thousand). */
static inline double rg_tolerance(hm_dtype out) {
  return out == HM_F32 ? 2e-6 : out == HM_F16 ? 1e-3 : 6e-3;
}

/* All-ones bytes are NaN in f32, f16 and bf16, which no finite input produces: unwritten output. */
static inline void rg_fill_untouched(void *c, size_t bytes) {
  memset(c, 0xff, bytes);
}

static inline bool rg_untouched(const void *c, size_t bytes) {
  const unsigned char *p = c;
  for (size_t i = 0; i < bytes; i++)
    if (p[i] != 0xff) return false;
  return true;
}

#endif
