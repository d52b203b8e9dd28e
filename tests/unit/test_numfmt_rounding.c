/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Round to nearest even between every pair of neighbouring codes of each float format,
 * and the overflow rule at the top of each range (Inf or saturation).
 */
#include <float.h>
#include <math.h>

#include "check.h"
#include "hm_test.h"
#include "numfmt.h"

struct format {
  const char *name;
  uint32_t (*encode)(float);
  float (*decode)(uint32_t);
  uint32_t max_code; /* largest finite positive code */
  uint32_t sign_bit;
  bool has_inf; /* overflow -> max_code + 1, else saturate to max_code */
};

static uint32_t enc_f16(float x) {
  return hm_f16_from_f32(x);
}
static float dec_f16(uint32_t v) {
  return hm_f16_to_f32((uint16_t)v);
}
static uint32_t enc_bf16(float x) {
  return hm_bf16_from_f32(x);
}
static float dec_bf16(uint32_t v) {
  return hm_bf16_to_f32((uint16_t)v);
}
static uint32_t enc_e4m3(float x) {
  return hm_e4m3_from_f32(x);
}
static float dec_e4m3(uint32_t v) {
  return hm_e4m3_to_f32((uint8_t)v);
}
static uint32_t enc_e5m2(float x) {
  return hm_e5m2_from_f32(x);
}
static float dec_e5m2(uint32_t v) {
  return hm_e5m2_to_f32((uint8_t)v);
}
static uint32_t enc_e2m1(float x) {
  return hm_e2m1_from_f32(x);
}
static float dec_e2m1(uint32_t v) {
  return hm_e2m1_to_f32((uint8_t)v);
}

static const struct format formats[] = {
    {"f16", enc_f16, dec_f16, 0x7bff, 0x8000, true}, {"bf16", enc_bf16, dec_bf16, 0x7f7f, 0x8000, true},
    {"e4m3", enc_e4m3, dec_e4m3, 0x7e, 0x80, false}, {"e5m2", enc_e5m2, dec_e5m2, 0x7b, 0x80, true},
    {"e2m1", enc_e2m1, dec_e2m1, 0x7, 0x8, false},
};

static void expect_code(const struct format *f, float x, uint32_t want) {
  uint32_t got = f->encode(x);
  if (got != want) fail_msg("%s: %.9g encodes to 0x%x, want 0x%x", f->name, (double)x, got, want);
}

/* Neighbouring codes c, c+1 hold neighbouring values; their midpoint is exact in f32. */
static void ties_go_to_even_everywhere(void **state) {
  (void)state;
  for (size_t i = 0; i < HM_ARRAY_SIZE(formats); i++) {
    const struct format *f = &formats[i];
    for (uint32_t c = 0; c < f->max_code; c++) {
      float a = f->decode(c), b = f->decode(c + 1);
      float mid = (float)(((double)a + (double)b) / 2.0);
      assert_true((double)mid == ((double)a + (double)b) / 2.0);
      uint32_t even = (c & 1) ? c + 1 : c;
      expect_code(f, mid, even);
      expect_code(f, nextafterf(mid, INFINITY), c + 1);
      expect_code(f, nextafterf(mid, 0.0f), c);
      expect_code(f, -mid, even | f->sign_bit);
      expect_code(f, -nextafterf(mid, INFINITY), (c + 1) | f->sign_bit);
    }
  }
}

/* Half an ulp above the largest finite value: Inf for IEEE-like types, the max otherwise. */
static void overflow_rules(void **state) {
  (void)state;
  for (size_t i = 0; i < HM_ARRAY_SIZE(formats); i++) {
    const struct format *f = &formats[i];
    float top = f->decode(f->max_code);
    float ulp = top - f->decode(f->max_code - 1);
    float edge = top + ulp / 2;
    uint32_t over = f->has_inf ? f->max_code + 1 : f->max_code;
    expect_code(f, nextafterf(edge, 0.0f), f->max_code);
    expect_code(f, edge, over);
    expect_code(f, FLT_MAX, over);
    expect_code(f, INFINITY, over);
    expect_code(f, -INFINITY, over | f->sign_bit);
    expect_code(f, -FLT_MAX, over | f->sign_bit);
    expect_code(f, 0.0f, 0);
    expect_code(f, -0.0f, f->sign_bit);
  }
}

static void hand_picked_values(void **state) {
  (void)state;
  assert_int_equal(hm_f16_from_f32(65504.0f), 0x7bff);
  assert_int_equal(hm_f16_from_f32(65519.996f), 0x7bff);
  assert_int_equal(hm_f16_from_f32(65520.0f), 0x7c00);
  assert_int_equal(hm_f16_from_f32(1.0f + ldexpf(1.0f, -11)), 0x3c00);
  assert_int_equal(hm_f16_from_f32(1.0f + 3 * ldexpf(1.0f, -11)), 0x3c02);
  assert_int_equal(hm_f16_from_f32(ldexpf(1.0f, -24)), 0x0001);
  assert_int_equal(hm_f16_from_f32(ldexpf(1.0f, -25)), 0x0000);
  assert_int_equal(hm_f16_from_f32(ldexpf(1.5f, -25)), 0x0001);
  assert_int_equal(hm_f16_from_f32(-ldexpf(1.0f, -140)), 0x8000);
  assert_int_equal(hm_bf16_from_f32(1.0f + ldexpf(1.0f, -8)), 0x3f80);
  assert_int_equal(hm_bf16_from_f32(1.0f + 3 * ldexpf(1.0f, -8)), 0x3f82);
  assert_int_equal(hm_bf16_from_f32(ldexpf(1.0f, -149)), 0x0000);
  assert_int_equal(hm_bf16_from_f32(ldexpf(3.0f, -149)), 0x0000);
  assert_int_equal(hm_bf16_from_f32(ldexpf(1.0f, -133)), 0x0001);
  assert_int_equal(hm_e4m3_from_f32(449.0f), 0x7e);
  assert_int_equal(hm_e4m3_from_f32(480.0f), 0x7e);
  assert_int_equal(hm_e4m3_from_f32(-1e9f), 0xfe);
  assert_int_equal(hm_e4m3_from_f32(ldexpf(1.0f, -10)), 0x00);
  assert_int_equal(hm_e4m3_from_f32(ldexpf(1.01f, -10)), 0x01);
  assert_int_equal(hm_e4m3_from_f32(ldexpf(3.0f, -10)), 0x02);
  assert_int_equal(hm_e5m2_from_f32(61439.0f), 0x7b);
  assert_int_equal(hm_e5m2_from_f32(61440.0f), 0x7c);
  assert_int_equal(hm_e2m1_from_f32(5.0f), 0x6);
  assert_int_equal(hm_e2m1_from_f32(5.01f), 0x7);
  assert_int_equal(hm_e2m1_from_f32(0.25f), 0x0);
  assert_int_equal(hm_e2m1_from_f32(-0.75f), 0xa);
  assert_int_equal(hm_e2m1_from_f32(-100.0f), 0xf);
}

static void nan_rules(void **state) {
  (void)state;
  assert_int_equal(hm_e4m3_from_f32(NAN) & 0x7f, 0x7f);
  assert_true((hm_e5m2_from_f32(NAN) & 0x7f) > 0x7c);
  uint16_t h = hm_f16_from_f32(NAN);
  assert_true((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0);
  uint16_t b = hm_bf16_from_f32(-NAN);
  assert_true((b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0 && (b & 0x8000));
  /* e2m1 has no NaN: a NaN weight becomes zero rather than a large value. */
  assert_int_equal(hm_e2m1_from_f32(NAN), 0);
}

static void e8m0_rounding(void **state) {
  (void)state;
  assert_int_equal(hm_e8m0_from_f32(1.0f), 127);
  assert_int_equal(hm_e8m0_from_f32(1.4999f), 127);
  assert_int_equal(hm_e8m0_from_f32(1.5f), 128);
  assert_int_equal(hm_e8m0_from_f32(3.0f), 129);
  assert_int_equal(hm_e8m0_from_f32(0.75f), 127);
  assert_int_equal(hm_e8m0_from_f32_floor(1.99f), 127);
  assert_int_equal(hm_e8m0_from_f32_floor(3.0f), 128);
  assert_int_equal(hm_e8m0_from_f32_floor(0.75f), 126);
  assert_int_equal(hm_e8m0_from_f32_floor(ldexpf(1.0f, -127)), 0);
  assert_int_equal(hm_e8m0_from_f32_floor(ldexpf(1.0f, -140)), 0);
  assert_int_equal(hm_e8m0_from_f32(0.0f), 0);
  assert_int_equal(hm_e8m0_from_f32(-4.0f), 0);
  assert_int_equal(hm_e8m0_from_f32(FLT_MAX), 254);
  assert_int_equal(hm_e8m0_from_f32_floor(FLT_MAX), 254);
  assert_int_equal(hm_e8m0_from_f32(INFINITY), 254);
  assert_int_equal(hm_e8m0_from_f32(NAN), 255);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(ties_go_to_even_everywhere),
      cmocka_unit_test(overflow_rules),
      cmocka_unit_test(hand_picked_values),
      cmocka_unit_test(nan_rules),
      cmocka_unit_test(e8m0_rounding),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
