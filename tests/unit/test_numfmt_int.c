/* SPDX-License-Identifier: Apache-2.0 */
/* Integer rounding and clamping, and the array conversions of byte-addressed types. */
#include <math.h>
#include <stdlib.h>

#include "hm_test.h"
#include "numfmt.h"

static void int_rounds_half_to_even(void **state) {
  (void)state;
  assert_int_equal(hm_int_from_f32(HM_I8, 0.5f), 0);
  assert_int_equal(hm_int_from_f32(HM_I8, 1.5f), 2);
  assert_int_equal(hm_int_from_f32(HM_I8, 2.5f), 2);
  assert_int_equal(hm_int_from_f32(HM_I8, -2.5f), -2);
  assert_int_equal(hm_int_from_f32(HM_I8, -3.5f), -4);
  assert_int_equal(hm_int_from_f32(HM_I8, 2.5000002f), 3);
  assert_int_equal(hm_int_from_f32(HM_U4, 6.5f), 6);
  assert_int_equal(hm_int_from_f32(HM_U4, 7.4999995f), 7);
  assert_int_equal(hm_int_from_f32(HM_I8, NAN), 0);
}

static void int_clamps_to_each_range(void **state) {
  (void)state;
  static const hm_dtype types[] = {HM_I8, HM_I4, HM_U8, HM_U7, HM_U6, HM_U5, HM_U4, HM_U3, HM_U2, HM_U1};
  for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
    hm_dtype d = types[i];
    int bits = hm_dtype_bits(d);
    bool is_signed = d == HM_I8 || d == HM_I4;
    int lo = is_signed ? -(1 << (bits - 1)) : 0;
    int hi = is_signed ? (1 << (bits - 1)) - 1 : (1 << bits) - 1;
    assert_int_equal(hm_int_from_f32(d, (float)hi + 0.49f), hi);
    assert_int_equal(hm_int_from_f32(d, (float)hi + 0.5f), hi);
    assert_int_equal(hm_int_from_f32(d, 1e30f), hi);
    assert_int_equal(hm_int_from_f32(d, INFINITY), hi);
    assert_int_equal(hm_int_from_f32(d, (float)lo - 0.5f), lo);
    assert_int_equal(hm_int_from_f32(d, -1e30f), lo);
    assert_int_equal(hm_int_from_f32(d, -INFINITY), lo);
    for (int v = lo; v <= hi; v++) {
      assert_int_equal(hm_int_from_f32(d, (float)v), v);
      assert_int_equal(hm_int_from_f32(d, (float)v + 0.25f), v);
      assert_int_equal(hm_int_from_f32(d, (float)v - 0.25f), v);
    }
  }
  assert_int_equal(hm_int_from_f32(HM_I32, 3e9f), 2147483647);
  assert_int_equal(hm_int_from_f32(HM_I32, -3e9f), (int32_t)-2147483648LL);
  assert_int_equal(hm_int_from_f32(HM_F16, 3.0f), 0);
}

/* Each byte-addressed type converts like its scalar functions, in both directions. */
static void arrays_match_scalar_conversions(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("arrays_match_scalar_conversions"));
  enum { n = 1001 };
  float src[n], back[n];
  hm_rng_fill_normal(&rng, src, n, 40.0f);
  uint8_t bytes[n * 4];
  static const hm_dtype types[] = {HM_F32, HM_F16, HM_BF16, HM_F8E4M3, HM_F8E5M2, HM_E8M0, HM_I8, HM_I32};
  for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
    hm_dtype d = types[t];
    HM_ASSERT_OK(hm_convert_from_f32(d, src, bytes, n));
    HM_ASSERT_OK(hm_convert_to_f32(d, bytes, back, n));
    for (int i = 0; i < n; i++) {
      float want;
      switch (d) {
        case HM_F32: want = src[i]; break;
        case HM_F16: want = hm_f16_to_f32(hm_f16_from_f32(src[i])); break;
        case HM_BF16: want = hm_bf16_to_f32(hm_bf16_from_f32(src[i])); break;
        case HM_F8E4M3: want = hm_e4m3_to_f32(hm_e4m3_from_f32(src[i])); break;
        case HM_F8E5M2: want = hm_e5m2_to_f32(hm_e5m2_from_f32(src[i])); break;
        case HM_E8M0: want = hm_e8m0_to_f32(hm_e8m0_from_f32(src[i])); break;
        default: want = (float)hm_int_from_f32(d, src[i]); break;
      }
      if (back[i] != want)
        fail_msg("%s: %g converts back to %g, want %g", hm_dtype_name(d), (double)src[i], (double)back[i],
                 (double)want);
      assert_true(back[i] == hm_load_f32(d, bytes, i));
    }
  }
}

static void packed_types_are_refused(void **state) {
  (void)state;
  float x[4] = {0};
  uint32_t w[4];
  assert_int_equal(hm_convert_from_f32(HM_U4, x, w, 4), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_convert_to_f32(HM_F4E2M1, w, x, 4), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_convert_from_f32(HM_F16, NULL, w, 4), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_convert_from_f32(HM_F16, x, w, -1), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_convert_from_f32((hm_dtype)99, x, w, 1), HM_INVALID_ARGUMENT);
  HM_ASSERT_OK(hm_convert_from_f32(HM_F16, NULL, NULL, 0));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(int_rounds_half_to_even),
      cmocka_unit_test(int_clamps_to_each_range),
      cmocka_unit_test(arrays_match_scalar_conversions),
      cmocka_unit_test(packed_types_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
