/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Bit-exact conversions between f32 and the small float and integer types. All float
 * types share one encoder over the f32 bit pattern, parameterized by the target's
 * exponent and mantissa widths, so that rounding and overflow are written once.
 */
#include <math.h>
#include <string.h>

#include "check.h"
#include "dtype.h"
#include "numfmt.h"

/* A binary float format of at most 16 bits without the sign. */
struct minifloat {
  int exp_bits, mant_bits, bias;
  uint32_t max_code; /* largest finite magnitude code */
  bool has_inf;      /* overflow -> max_code + 1 (Inf); otherwise saturate to max_code */
  bool has_nan;      /* NaN -> nan_code; otherwise NaN encodes as +0 */
  uint32_t nan_code;
};

static const struct minifloat fmt_f16 = {5, 10, 15, 0x7bff, true, true, 0x7e00};
static const struct minifloat fmt_bf16 = {8, 7, 127, 0x7f7f, true, true, 0x7fc0};
static const struct minifloat fmt_e4m3 = {4, 3, 7, 0x7e, false, true, 0x7f};
static const struct minifloat fmt_e5m2 = {5, 2, 15, 0x7b, true, true, 0x7f};
static const struct minifloat fmt_e2m1 = {2, 1, 1, 0x7, false, false, 0};

static uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
  return u;
}

static float f32_from_bits(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof(x));
  return x;
}

/* m / 2^shift rounded to nearest even; shift >= 0. */
static uint32_t shift_right_rne(uint32_t m, int shift) {
  if (shift == 0) return m;
  if (shift > 31) return 0;
  uint32_t q = m >> shift;
  uint32_t rem = m & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) q++;
  return q;
}

/* The magnitude code of |x| (finite, non-NaN) before overflow handling. */
static uint32_t encode_magnitude(uint32_t a, const struct minifloat *f) {
  int32_t exp_field = (int32_t)(a >> 23);
  uint32_t mant = a & 0x7fffffu;
  /* Unbiased exponent of the leading bit position of mant (with the implicit bit). */
  int32_t e = exp_field == 0 ? -126 : exp_field - 127;
  uint32_t m = exp_field == 0 ? mant : (mant | 0x800000u);
  int32_t emin = 1 - f->bias;
  if (exp_field != 0 && e >= emin) {
    /* Normal in the target: round the mantissa, a carry moves into the exponent. */
    uint32_t code = shift_right_rne(m, 23 - f->mant_bits);
    /* code holds the implicit bit at 2^mant_bits (or 2^(mant_bits+1) after a carry). */
    uint32_t biased = (uint32_t)(e - emin + 1);
    return (biased << f->mant_bits) + code - (1u << f->mant_bits);
  }
  /* Subnormal in the target: units of 2^(emin - mant_bits). */
  int32_t shift = (emin - f->mant_bits) - (e - 23);
  return shift_right_rne(m, shift);
}

static uint32_t encode_float(float x, const struct minifloat *f) {
  uint32_t u = f32_bits(x);
  int width = f->exp_bits + f->mant_bits;
  uint32_t sign = (u >> 31) << width;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) {
    if (!f->has_nan) return 0;
    /* Keep the payload's top bits so that a 16-bit NaN survives a round trip. */
    uint32_t payload = (a & 0x7fffffu) >> (23 - f->mant_bits);
    return sign | f->nan_code | payload;
  }
  uint32_t code = a == 0x7f800000u ? f->max_code + 1u : encode_magnitude(a, f);
  if (code > f->max_code) code = f->has_inf ? f->max_code + 1u : f->max_code;
  return sign | code;
}

static float decode_float(uint32_t v, const struct minifloat *f) {
  int width = f->exp_bits + f->mant_bits;
  uint32_t mag = v & ((1u << width) - 1u);
  float sign = (v >> width) & 1u ? -1.0f : 1.0f;
  uint32_t exp_field = mag >> f->mant_bits;
  uint32_t mant = mag & ((1u << f->mant_bits) - 1u);
  uint32_t exp_max = (1u << f->exp_bits) - 1u;
  if (f->has_nan && mag > f->max_code && !(f->has_inf && mag == f->max_code + 1u)) {
    /* A quiet NaN of the same sign, carrying the payload into the top of the f32 mantissa. */
    uint32_t payload = (mag & ((1u << f->mant_bits) - 1u)) << (23 - f->mant_bits);
    return f32_from_bits(((v >> width) & 1u) << 31 | 0x7fc00000u | payload);
  }
  if (f->has_inf && exp_field == exp_max) return sign * INFINITY;
  int emin = 1 - f->bias;
  if (exp_field == 0) return sign * ldexpf((float)mant, emin - f->mant_bits);
  float frac = (float)((1u << f->mant_bits) | mant);
  return sign * ldexpf(frac, (int)exp_field - f->bias - f->mant_bits);
}

uint16_t hm_f16_from_f32(float x) {
  return (uint16_t)encode_float(x, &fmt_f16);
}

float hm_f16_to_f32(uint16_t h) {
  return decode_float(h, &fmt_f16);
}

uint16_t hm_bf16_from_f32(float x) {
  return (uint16_t)encode_float(x, &fmt_bf16);
}

/* bf16 is the top half of f32, so decoding is a shift (NaN payloads included). */
float hm_bf16_to_f32(uint16_t h) {
  return f32_from_bits((uint32_t)h << 16);
}

uint8_t hm_e4m3_from_f32(float x) {
  return (uint8_t)encode_float(x, &fmt_e4m3);
}

float hm_e4m3_to_f32(uint8_t v) {
  return decode_float(v, &fmt_e4m3);
}

uint8_t hm_e5m2_from_f32(float x) {
  return (uint8_t)encode_float(x, &fmt_e5m2);
}

float hm_e5m2_to_f32(uint8_t v) {
  return decode_float(v, &fmt_e5m2);
}

uint8_t hm_e2m1_from_f32(float x) {
  return (uint8_t)encode_float(x, &fmt_e2m1);
}

float hm_e2m1_to_f32(uint8_t v) {
  return decode_float(v & 0xfu, &fmt_e2m1);
}

#define HM_E8M0_NAN 255u
#define HM_E8M0_MAX 254u

/* Biased exponent of the largest power of two <= |x|, clamped to the e8m0 range. */
static uint8_t e8m0_code(float x, bool round_up_from_1_5) {
  if (isnan(x)) return HM_E8M0_NAN;
  if (!(x > 0.0f)) return 0;
  if (isinf(x)) return HM_E8M0_MAX;
  int e;
  float frac = frexpf(x, &e); /* x = frac * 2^e, frac in [0.5, 1) */
  int log2_floor = e - 1;
  if (round_up_from_1_5 && frac >= 0.75f) log2_floor++;
  int code = log2_floor + 127;
  if (code < 0) return 0;
  if (code > (int)HM_E8M0_MAX) return HM_E8M0_MAX;
  return (uint8_t)code;
}

uint8_t hm_e8m0_from_f32(float x) {
  return e8m0_code(x, true);
}
uint8_t hm_e8m0_from_f32_floor(float x) {
  return e8m0_code(x, false);
}

float hm_e8m0_to_f32(uint8_t v) {
  if (v == HM_E8M0_NAN) return NAN;
  return ldexpf(1.0f, (int)v - 127);
}

/* The range of an integer type (I32, I8, I4, U1..U8); false for float types. */
static bool int_range(hm_dtype dtype, double *lo, double *hi) {
  const struct hm_dtype_info *info = hm_dtype_info(dtype);
  if (info == NULL || info->is_float) return false;
  int64_t span = (int64_t)1 << info->bits;
  *lo = info->is_signed ? (double)(-span / 2) : 0.0;
  *hi = info->is_signed ? (double)(span / 2 - 1) : (double)(span - 1);
  return true;
}

int32_t hm_int_from_f32(hm_dtype dtype, float x) {
  double lo, hi;
  if (!int_range(dtype, &lo, &hi) || isnan(x)) return 0;
  /* rint rounds half to even in the default rounding mode; clamp after, so ties at
   * the range's edge land on the edge. */
  double r = rint((double)x);
  if (r < lo) r = lo;
  if (r > hi) r = hi;
  return (int32_t)r;
}

static bool byte_addressed(hm_dtype dtype) {
  switch (dtype) {
    case HM_F32:
    case HM_F16:
    case HM_BF16:
    case HM_F8E4M3:
    case HM_F8E5M2:
    case HM_E8M0:
    case HM_I8:
    case HM_I32: return true;
    default: return false;
  }
}

float hm_load_f32(hm_dtype dtype, const void *base, int64_t i) {
  switch (dtype) {
    case HM_F32: return ((const float *)base)[i];
    case HM_F16: return hm_f16_to_f32(((const uint16_t *)base)[i]);
    case HM_BF16: return hm_bf16_to_f32(((const uint16_t *)base)[i]);
    case HM_F8E4M3: return hm_e4m3_to_f32(((const uint8_t *)base)[i]);
    case HM_F8E5M2: return hm_e5m2_to_f32(((const uint8_t *)base)[i]);
    case HM_E8M0: return hm_e8m0_to_f32(((const uint8_t *)base)[i]);
    case HM_I8: return (float)((const int8_t *)base)[i];
    case HM_I32: return (float)((const int32_t *)base)[i];
    default: return NAN;
  }
}

static void store_f32(hm_dtype dtype, void *base, int64_t i, float x) {
  switch (dtype) {
    case HM_F32: ((float *)base)[i] = x; break;
    case HM_F16: ((uint16_t *)base)[i] = hm_f16_from_f32(x); break;
    case HM_BF16: ((uint16_t *)base)[i] = hm_bf16_from_f32(x); break;
    case HM_F8E4M3: ((uint8_t *)base)[i] = hm_e4m3_from_f32(x); break;
    case HM_F8E5M2: ((uint8_t *)base)[i] = hm_e5m2_from_f32(x); break;
    case HM_E8M0: ((uint8_t *)base)[i] = hm_e8m0_from_f32(x); break;
    case HM_I8: ((int8_t *)base)[i] = (int8_t)hm_int_from_f32(HM_I8, x); break;
    case HM_I32: ((int32_t *)base)[i] = hm_int_from_f32(HM_I32, x); break;
    default: break;
  }
}

static hm_status check_convert_args(hm_dtype dtype, const void *src, const void *dst, int64_t n) {
  if (!byte_addressed(dtype))
    HM_FAIL(HM_INVALID_ARGUMENT, "conversion to or from %s: only byte-addressed types are converted",
            hm_dtype_name(dtype));
  if (n < 0) HM_FAIL(HM_INVALID_ARGUMENT, "element count %lld is negative", (long long)n);
  if (n > 0) {
    HM_CHECK_NOT_NULL(src);
    HM_CHECK_NOT_NULL(dst);
  }
  return HM_OK;
}

hm_status hm_convert_from_f32(hm_dtype dtype, const float *src, void *dst, int64_t n) {
  HM_CHECK(check_convert_args(dtype, src, dst, n));
  for (int64_t i = 0; i < n; i++) store_f32(dtype, dst, i, src[i]);
  return HM_OK;
}

hm_status hm_convert_to_f32(hm_dtype dtype, const void *src, float *dst, int64_t n) {
  HM_CHECK(check_convert_args(dtype, src, dst, n));
  for (int64_t i = 0; i < n; i++) dst[i] = hm_load_f32(dtype, src, i);
  return HM_OK;
}
