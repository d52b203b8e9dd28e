/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Bit-exact host conversions between f32 and every element type. Encoders round to
 * nearest even. Saturation and NaN rules per format:
 *   f16, bf16, e5m2: IEEE-like; overflow -> Inf; NaN stays NaN (16-bit payloads kept).
 *   e4m3 (OCP "fn"): no Inf; largest finite 448; overflow and Inf saturate to +-448;
 *     NaN S.1111.111.
 *   e8m0: unsigned power of two 2^(e-127), e in 0..254; 255 is NaN; no zero (x <= 0 -> 0).
 *   e2m1: {0, 0.5, 1, 1.5, 2, 3, 4, 6} with sign; no Inf or NaN; saturates to +-6; NaN -> +0.
 */
#ifndef HM_NUMFMT_H
#define HM_NUMFMT_H

#include <stdint.h>

#include "humming.h"

uint16_t hm_f16_from_f32(float x);
float hm_f16_to_f32(uint16_t h);
uint16_t hm_bf16_from_f32(float x);
float hm_bf16_to_f32(uint16_t h);
uint8_t hm_e4m3_from_f32(float x);
float hm_e4m3_to_f32(uint8_t v);
uint8_t hm_e5m2_from_f32(float x);
float hm_e5m2_to_f32(uint8_t v);
/* Nearest power of two (ties to the larger), clamped to 2^-127..2^127. */
uint8_t hm_e8m0_from_f32(float x);
/* Largest power of two <= x (the OCP MX scale rule), clamped likewise. */
uint8_t hm_e8m0_from_f32_floor(float x);
float hm_e8m0_to_f32(uint8_t v);
uint8_t hm_e2m1_from_f32(float x); /* 4-bit code in the low nibble */
float hm_e2m1_to_f32(uint8_t v);
/* Round to nearest even and clamp to the type's range (I32, I8, I4, U1..U8); NaN and
 * float types give 0. */
int32_t hm_int_from_f32(hm_dtype dtype, float x);

/*
 * Converts n elements between f32 and a byte-addressed type (F32, F16, BF16, F8E4M3,
 * F8E5M2, E8M0, I8, I32). HM_INVALID_ARGUMENT for packed sub-byte types.
 */
hm_status hm_convert_from_f32(hm_dtype dtype, const float *src, void *dst, int64_t n);
hm_status hm_convert_to_f32(hm_dtype dtype, const void *src, float *dst, int64_t n);
/* One element of a byte-addressed type at index i, as f32. */
float hm_load_f32(hm_dtype dtype, const void *base, int64_t i);

#endif
