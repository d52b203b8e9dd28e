/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host quantizers and dequantizers for the canonical weight contract (DESIGN.md),
 * with an expert dimension, and for activations. Round to nearest everywhere.
 */
#ifndef HM_QUANT_H
#define HM_QUANT_H

#include <stdint.h>

#include "humming.h"

/*
 * Weights of one layer on the host, canonical contract:
 *   qweight       uint32 (E, N, row_words(K)) codes of fmt.weight, K-contiguous, LSB-first;
 *                 for unquantized F16/BF16 weights the 16-bit values, two per word
 *   scales        (E, N, K/group_k) GROUP | (E, N) CHANNEL | f32 (E, N/group_n, K/group_k)
 *                 BLOCK | (E) TENSOR, in fmt.scale
 *   zeros         uint32 (E, K/group_k, row_words(N)) packed along N (zero_point only;
 *                 CHANNEL: one group spanning K)
 *   global_scale  f32 (E) (global_scale only)
 */
typedef struct hm_host_weights {
  hm_quant_format fmt;
  int64_t experts, n, k;
  uint32_t *qweight;
  void *scales;
  uint32_t *zeros;
  float *global_scale;
} hm_host_weights;

/*
 * Checks a format against the support matrix and the shape; HM_INVALID_ARGUMENT with
 * the reason otherwise. Integer weights (U1..U8, I4, I8) and fp8 take f16/bf16/f32
 * scales per channel, group (group_k 16/32/64/128 dividing K), 128x128 block (f32, N
 * and K multiples of 128) or tensor; zero points only on unsigned types with group or
 * channel scales; f4e2m1 only as mxfp4 (e8m0 g32) or nvfp4 (f8e4m3 g16); F16/BF16
 * weights only with scale_kind NONE. Any quantized format may add a global scale.
 */
hm_status hm_quant_format_check(const hm_quant_format *fmt, int64_t n, int64_t k);
/* Element counts of each array for one expert (0 where the array is absent). */
int64_t hm_quant_qweight_words(const hm_quant_format *fmt, int64_t n, int64_t k);
int64_t hm_quant_scale_count(const hm_quant_format *fmt, int64_t n, int64_t k);
int64_t hm_quant_zero_words(const hm_quant_format *fmt, int64_t n, int64_t k);
/* Bytes of one scale element. */
int hm_quant_scale_bytes(const hm_quant_format *fmt);

/* Allocates the arrays for fmt and shape; free with hm_host_weights_free. */
hm_status hm_host_weights_alloc(hm_host_weights *w, const hm_quant_format *fmt, int64_t experts, int64_t n,
                                int64_t k);
void hm_host_weights_free(hm_host_weights *w);
/* A view of w for hm_layer_load. */
hm_weights_view hm_host_weights_view(const hm_host_weights *w);

/*
 * Quantizes finite f32 weights (E, N, K) into w (allocated for the same shape), round
 * to nearest. Scales: symmetric absmax/qmax (unsigned types without zero points are
 * centred at 2^(bits-1)); with zero points (max - min)/(2^bits - 1), zero range
 * included, z = rint(-min/s) clamped; fp8 absmax/max_finite; mxfp4 the OCP rule
 * 2^(floor(log2 absmax) - 2); nvfp4 absmax/6. The global scale maps the largest group
 * scale onto 448 for e4m3 scales (nvfp4: absmax/(448*6)), onto 1 otherwise. Scales are
 * rounded to fmt.scale before the weights are divided by them; an all-zero group gets
 * scale 1. A scale beyond its type's range is HM_INVALID_ARGUMENT.
 */
hm_status hm_quantize_weights(const float *src, hm_host_weights *w);
/* Dequantizes rows [n0, n0+rows) of expert e into out (rows, K) f32:
 * ((value(q) - z) * s) * global, value(q) the decoded float or (signed) integer. */
hm_status hm_dequantize_rows(const hm_host_weights *w, int64_t e, int64_t n0, int64_t rows, float *out);

/*
 * Activations (m, k) f32 -> act dtype (F8E4M3, I8: scaled; F16, BF16: plain) with
 * scales f32 (m) for TOKEN or (m, ceil(k/128)) for GROUP128: s = absmax/qmax (448 or
 * 127), so a group's largest element lands on +-qmax; an all-zero group gets s = 1.
 * Scales may be NULL for F16/BF16. Non-finite inputs are HM_INVALID_ARGUMENT.
 */
hm_status hm_quantize_activations(const float *x, int64_t m, int64_t k, hm_dtype act, hm_act_scale_kind kind,
                                  void *q, float *scales);
/* The inverse: (m, k) of act dtype with its scales -> f32. */
hm_status hm_dequantize_activations(const void *q, const float *scales, int64_t m, int64_t k, hm_dtype act,
                                    hm_act_scale_kind kind, float *out);
/* Relative error bound ||dequant(quant(x)) - x|| / ||x|| for N(0,1) weights in a
 * format (measured, with margin); negative for a format hm_quant_format_check refuses. */
double hm_quant_error_bound(const hm_quant_format *fmt);

#endif
