/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An independent reading of the canonical weight contract (DESIGN.md, engine/quant.h)
 * for the quantizer tests: indexes, bit positions and the dequantization formula are
 * written here from the contract, not taken from the library.
 */
#ifndef HM_TEST_QUANT_CHECK_H
#define HM_TEST_QUANT_CHECK_H

#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "hm_test.h"
#include "numfmt.h"
#include "quant.h"

/* Bits [index*bits, index*bits+bits) of a word stream, read one bit at a time. */
static inline unsigned qc_bits_at(const uint32_t *row, int64_t index, int bits) {
  unsigned v = 0;
  for (int t = 0; t < bits; t++) {
    int64_t p = index * bits + t;
    v |= ((row[p / 32] >> (p % 32)) & 1u) << t;
  }
  return v;
}

static inline int64_t qc_words(int bits, int64_t count) {
  return (count * bits + 31) / 32;
}

static inline float qc_scale(const hm_host_weights *w, int64_t e, int64_t n, int64_t k) {
  const hm_quant_format *f = &w->fmt;
  int64_t i;
  switch (f->scale_kind) {
    case HM_SCALE_GROUP: i = (e * w->n + n) * (w->k / f->group_k) + k / f->group_k; break;
    case HM_SCALE_CHANNEL: i = e * w->n + n; break;
    case HM_SCALE_BLOCK:
      i = (e * (w->n / f->group_n) + n / f->group_n) * (w->k / f->group_k) + k / f->group_k;
      break;
    default: i = e; break;
  }
  return hm_load_f32(f->scale, w->scales, i);
}

static inline unsigned qc_code(const hm_host_weights *w, int64_t e, int64_t n, int64_t k) {
  int bits = hm_dtype_bits(w->fmt.weight);
  return qc_bits_at(w->qweight + (e * w->n + n) * qc_words(bits, w->k), k, bits);
}

static inline float qc_zero(const hm_host_weights *w, int64_t e, int64_t n, int64_t k) {
  const hm_quant_format *f = &w->fmt;
  int bits = hm_dtype_bits(f->weight);
  bool is_uint = f->weight >= HM_U8 && f->weight <= HM_U1;
  if (!f->zero_point) return is_uint ? (float)(1 << (bits - 1)) : 0.0f;
  int64_t groups = f->scale_kind == HM_SCALE_GROUP ? w->k / f->group_k : 1;
  int64_t g = f->scale_kind == HM_SCALE_GROUP ? k / f->group_k : 0;
  return (float)qc_bits_at(w->zeros + (e * groups + g) * qc_words(bits, w->n), n, bits);
}

/* A code's value before zero and scales: decoded float or (sign-extended) integer. */
static inline float qc_code_value(hm_dtype d, unsigned code) {
  int bits = hm_dtype_bits(d);
  switch (d) {
    case HM_F8E4M3: return hm_e4m3_to_f32((uint8_t)code);
    case HM_F8E5M2: return hm_e5m2_to_f32((uint8_t)code);
    case HM_F4E2M1: return hm_e2m1_to_f32((uint8_t)code);
    case HM_I8:
    case HM_I4: return (float)(code < (1u << (bits - 1)) ? (int)code : (int)code - (1 << bits));
    default: return (float)code;
  }
}

/* w = (value(q) - z) * s * global, in that order, as the contract says. */
static inline float qc_weight(const hm_host_weights *w, int64_t e, float value, float zero, float scale) {
  float global = w->fmt.global_scale ? w->global_scale[e] : 1.0f;
  return (value - zero) * scale * global;
}

/* N(0,1) weights (E, N, K) times a magnitude per expert; free with free(). */
static inline float *qc_normal_weights(hm_rng *rng, int64_t experts, int64_t n, int64_t k,
                                       const float *magnitudes) {
  float *x = malloc((size_t)(experts * n * k) * sizeof(float));
  assert_non_null(x);
  for (int64_t e = 0; e < experts; e++)
    hm_rng_fill_normal(rng, x + e * n * k, (size_t)(n * k), magnitudes[e]);
  return x;
}

/*
 * Quantizes x (E, N, K) into w (allocated here; free with hm_host_weights_free), then
 * checks every element: the dequantized value follows the contract from the stored
 * arrays, and it is the nearest point of its group's grid. Returns ||deq - x|| / ||x||.
 */
static inline double qc_round_trip(const hm_quant_format *f, int64_t experts, int64_t n, int64_t k,
                                   const float *x, hm_host_weights *w) {
  int64_t count = experts * n * k;
  float *deq = malloc((size_t)count * sizeof(float));
  assert_non_null(deq);
  HM_ASSERT_OK(hm_host_weights_alloc(w, f, experts, n, k));
  HM_ASSERT_OK(hm_quantize_weights(x, w));
  for (int64_t e = 0; e < experts; e++) HM_ASSERT_OK(hm_dequantize_rows(w, e, 0, n, deq + e * n * k));
  int codes = 1 << hm_dtype_bits(f->weight);
  for (int64_t e = 0; e < experts; e++) {
    double global = f->global_scale ? (double)w->global_scale[e] : 1.0;
    for (int64_t r = 0; r < n; r++) {
      for (int64_t c = 0; c < k; c++) {
        int64_t i = (e * n + r) * k + c;
        float s = qc_scale(w, e, r, c), z = qc_zero(w, e, r, c);
        float want = qc_weight(w, e, qc_code_value(f->weight, qc_code(w, e, r, c)), z, s);
        if (deq[i] != want)
          fail_msg("(%lld, %lld, %lld): dequantized %.9g, contract gives %.9g", (long long)e, (long long)r,
                   (long long)c, (double)deq[i], (double)want);
        double best = INFINITY;
        for (int q = 0; q < codes; q++) {
          float v = qc_weight(w, e, qc_code_value(f->weight, (unsigned)q), z, s);
          if (isfinite(v)) best = fmin(best, fabs((double)v - (double)x[i]));
        }
        /* A tie may go either way: the quantizer decides on x/s rounded to float, whose
           error grows with |x|, so the slack is relative to x as well as to the scale. */
        double slack = 1e-5 * fabs((double)s * global) + 4.0 * FLT_EPSILON * fabs((double)x[i]);
        if (fabs((double)deq[i] - (double)x[i]) > best + slack)
          fail_msg("(%lld, %lld, %lld): %.9g quantized to %.9g, but a grid point is %.9g away", (long long)e,
                   (long long)r, (long long)c, (double)x[i], (double)deq[i], best);
      }
    }
  }
  double err = hm_rel_error(deq, x, (size_t)count);
  free(deq);
  return err;
}

/* Largest |x| over the elements of x (E, N, K) of expert e whose scale index matches (r, c)'s. */
static inline float qc_group_absmax(const hm_host_weights *w, const float *x, int64_t e, int64_t r,
                                    int64_t c) {
  const hm_quant_format *f = &w->fmt;
  int64_t r0 = 0, r1 = w->n, c0 = 0, c1 = w->k;
  if (f->scale_kind == HM_SCALE_GROUP || f->scale_kind == HM_SCALE_CHANNEL) r0 = r, r1 = r + 1;
  if (f->scale_kind == HM_SCALE_GROUP) c0 = c / f->group_k * f->group_k, c1 = c0 + f->group_k;
  if (f->scale_kind == HM_SCALE_BLOCK) {
    r0 = r / f->group_n * f->group_n, r1 = r0 + f->group_n;
    c0 = c / f->group_k * f->group_k, c1 = c0 + f->group_k;
  }
  float m = 0.0f;
  for (int64_t i = r0; i < r1; i++)
    for (int64_t j = c0; j < c1; j++) m = fmaxf(m, fabsf(x[(e * w->n + i) * w->k + j]));
  return m;
}

#endif
