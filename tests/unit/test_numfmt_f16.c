/* SPDX-License-Identifier: Apache-2.0 */
/* All 65536 f16 and bf16 codes: decode by formula, re-encode bit-exactly (NaN payloads aside). */
#include <math.h>
#include <string.h>

#include "hm_test.h"
#include "numfmt.h"

static double ieee_formula(unsigned code, int exp_bits, int mant_bits) {
  int bias = (1 << (exp_bits - 1)) - 1;
  unsigned e = (code >> mant_bits) & ((1u << exp_bits) - 1u);
  unsigned m = code & ((1u << mant_bits) - 1u);
  double sign = (code >> (exp_bits + mant_bits)) ? -1.0 : 1.0;
  if (e == (1u << exp_bits) - 1u) return m ? NAN : sign * INFINITY;
  if (e == 0) return sign * ldexp((double)m, 1 - bias - mant_bits);
  return sign * ldexp((double)((1u << mant_bits) + m), (int)e - bias - mant_bits);
}

static void check_all_codes(const char *name, int exp_bits, int mant_bits, float (*decode)(uint16_t),
                            uint16_t (*encode)(float)) {
  unsigned nan_codes = 0;
  for (unsigned c = 0; c < 65536; c++) {
    float v = decode((uint16_t)c);
    double want = ieee_formula(c, exp_bits, mant_bits);
    if (isnan(want)) {
      nan_codes++;
      if (!isnan(v)) fail_msg("%s 0x%04x should decode to NaN, got %g", name, c, (double)v);
      uint16_t back = encode(v);
      unsigned exp_mask = ((1u << exp_bits) - 1u) << mant_bits;
      if ((back & exp_mask) != exp_mask || (back & ((1u << mant_bits) - 1u)) == 0 || (back ^ c) & 0x8000)
        fail_msg("%s NaN 0x%04x re-encodes to 0x%04x, not a NaN of the same sign", name, c, back);
      continue;
    }
    if ((double)v != want || !signbit(v) != !signbit(want))
      fail_msg("%s 0x%04x decodes to %.9g, want %.9g", name, c, (double)v, want);
    uint16_t back = encode(v);
    if (back != c) fail_msg("%s 0x%04x -> %.9g re-encodes to 0x%04x", name, c, (double)v, back);
  }
  /* Two signs times (2^mant_bits - 1) payloads. */
  assert_int_equal(nan_codes, 2u * ((1u << mant_bits) - 1u));
}

static void f16_all_codes(void **state) {
  (void)state;
  check_all_codes("f16", 5, 10, hm_f16_to_f32, hm_f16_from_f32);
}

static void bf16_all_codes(void **state) {
  (void)state;
  check_all_codes("bf16", 8, 7, hm_bf16_to_f32, hm_bf16_from_f32);
}

/* bf16 is the top half of an f32: any f32 whose low half is zero converts exactly. */
static void bf16_is_truncated_f32(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("bf16_is_truncated_f32"));
  for (int i = 0; i < 100000; i++) {
    uint32_t bits = (uint32_t)hm_rng_next(&rng);
    float x;
    memcpy(&x, &bits, sizeof(x));
    if (isnan(x)) continue;
    uint16_t b = hm_bf16_from_f32(x);
    double err = fabs((double)hm_bf16_to_f32(b) - (double)x);
    double ulp_half =
        isinf(x) ? 0.0 : ldexp(fabs((double)x) > ldexp(1.0, -126) ? fabs((double)x) : ldexp(1.0, -126), -8);
    if (isinf(hm_bf16_to_f32(b)) && !isinf(x)) continue; /* rounded past the top */
    if (err > ulp_half)
      fail_msg("bf16(%a) = %a is off by more than half an ulp", (double)x, (double)hm_bf16_to_f32(b));
    uint32_t low_zeroed = bits & 0xffff0000u;
    float y;
    memcpy(&y, &low_zeroed, sizeof(y));
    if (!isnan(y)) assert_int_equal(hm_bf16_from_f32(y), low_zeroed >> 16);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(f16_all_codes),
      cmocka_unit_test(bf16_all_codes),
      cmocka_unit_test(bf16_is_truncated_f32),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
