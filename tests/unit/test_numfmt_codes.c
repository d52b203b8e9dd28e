/* SPDX-License-Identifier: Apache-2.0 */
/* Every code point of e4m3, e5m2, e8m0 and e2m1 against its formula, and back. */
#include <math.h>
#include <string.h>

#include "hm_test.h"
#include "numfmt.h"

/* Value of a sign/exponent/mantissa code by the textbook formula, computed in double. */
static double formula(unsigned code, int exp_bits, int mant_bits, int bias) {
  unsigned sign = code >> (exp_bits + mant_bits);
  unsigned e = (code >> mant_bits) & ((1u << exp_bits) - 1u);
  unsigned m = code & ((1u << mant_bits) - 1u);
  double v = e == 0 ? ldexp((double)m, 1 - bias - mant_bits)
                    : ldexp((double)((1u << mant_bits) + m), (int)e - bias - mant_bits);
  return sign ? -v : v;
}

static void assert_same_float(float got, double want, unsigned code) {
  if ((double)got != want || !signbit(got) != !signbit(want))
    fail_msg("code 0x%02x decodes to %.9g, want %.9g", code, (double)got, want);
}

static void e4m3_every_code(void **state) {
  (void)state;
  for (unsigned c = 0; c < 256; c++) {
    float v = hm_e4m3_to_f32((uint8_t)c);
    if ((c & 0x7f) == 0x7f) {
      assert_true(isnan(v));
      assert_int_equal(hm_e4m3_from_f32(v) & 0x7f, 0x7f);
      continue;
    }
    assert_same_float(v, formula(c, 4, 3, 7), c);
    assert_int_equal(hm_e4m3_from_f32(v), c);
  }
  assert_true(hm_e4m3_to_f32(0x7e) == 448.0f);
  assert_true(hm_e4m3_to_f32(0x01) == ldexpf(1.0f, -9));
}

static void e5m2_every_code(void **state) {
  (void)state;
  for (unsigned c = 0; c < 256; c++) {
    float v = hm_e5m2_to_f32((uint8_t)c);
    unsigned mag = c & 0x7f;
    if (mag > 0x7c) {
      assert_true(isnan(v));
      assert_true((hm_e5m2_from_f32(v) & 0x7f) > 0x7c);
      continue;
    }
    if (mag == 0x7c) {
      assert_true(isinf(v));
      assert_int_equal(signbit(v) != 0, (c & 0x80) != 0);
    } else {
      assert_same_float(v, formula(c, 5, 2, 15), c);
    }
    assert_int_equal(hm_e5m2_from_f32(v), c);
  }
  assert_true(hm_e5m2_to_f32(0x7b) == 57344.0f);
  assert_true(hm_e5m2_to_f32(0x01) == ldexpf(1.0f, -16));
}

static void e8m0_every_code(void **state) {
  (void)state;
  for (unsigned c = 0; c < 256; c++) {
    float v = hm_e8m0_to_f32((uint8_t)c);
    if (c == 255) {
      assert_true(isnan(v));
      assert_int_equal(hm_e8m0_from_f32(v), 255);
      assert_int_equal(hm_e8m0_from_f32_floor(v), 255);
      continue;
    }
    assert_same_float(v, ldexp(1.0, (int)c - 127), c);
    assert_int_equal(hm_e8m0_from_f32(v), c);
    assert_int_equal(hm_e8m0_from_f32_floor(v), c);
  }
}

static void e2m1_every_code(void **state) {
  (void)state;
  static const double magnitudes[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (unsigned c = 0; c < 16; c++) {
    float v = hm_e2m1_to_f32((uint8_t)c);
    assert_same_float(v, formula(c, 2, 1, 1), c);
    assert_true(fabs((double)v) == magnitudes[c & 7]);
    assert_int_equal(hm_e2m1_from_f32(v), c);
    /* Only the low nibble is a code. */
    assert_true(hm_e2m1_to_f32((uint8_t)(c | 0xa0)) == v);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(e4m3_every_code),
      cmocka_unit_test(e5m2_every_code),
      cmocka_unit_test(e8m0_every_code),
      cmocka_unit_test(e2m1_every_code),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
