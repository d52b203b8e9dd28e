/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The W4A8 codes (kernels/hm_w4a8_codes.cuh) on the host: every pair of 4-bit codes in
 * every byte of a word widens to the 8-bit fragment bytes the kernel feeds its MMA,
 * int4 q as the int8 16 q and e2m1 as the e4m3 code of its value times 2^-6, all 16 codes
 * (-0 and the subnormal 0.5 included); the f16 codes of sm_90 as the f16 pairs of each
 * code's value times 2^-14, in the k order of the MMA's f16 fragments; and the e8m0
 * scales as 2^(x - 126) in f32.
 */
#include <math.h>
#include <string.h>

#include "hm_test.h"
#include "kernels/hm_w4a8_codes.cuh"
#include "numfmt.h"

static unsigned byte_of(unsigned w, int i) {
  return (w >> (8 * i)) & 0xffu;
}

/* Four codes in one 16-bit field, code c at nibble i, the others set to fill. */
static unsigned nibbles(unsigned c, int i, unsigned fill) {
  unsigned v = 0;
  for (int p = 0; p < 4; p++) v |= (p == i ? c : fill) << (4 * p);
  return v;
}

static void int4_widens_to_16q(void **state) {
  (void)state;
  for (int i = 0; i < 4; i++)
    for (unsigned lo = 0; lo < 16; lo++)
      for (unsigned hi = 0; hi < 16; hi++) {
        const unsigned w = hm_w4_pack_word(HM_W4_INT4, nibbles(lo, i, 9), nibbles(hi, i, 6));
        unsigned b0, b1;
        hm_w4_widen_i4(w, &b0, &b1);
        const int q_lo = (int)lo - (lo >= 8 ? 16 : 0), q_hi = (int)hi - (hi >= 8 ? 16 : 0);
        assert_int_equal((int8_t)byte_of(b0, i), 16 * q_lo);
        assert_int_equal((int8_t)byte_of(b1, i), 16 * q_hi);
        assert_int_equal((int8_t)byte_of(b0, (i + 1) % 4), 16 * (9 - 16));
        assert_int_equal((int8_t)byte_of(b1, (i + 1) % 4), 16 * 6);
      }
}

static void e2m1_widens_to_e4m3_times_2_to_minus_6(void **state) {
  (void)state;
  for (int i = 0; i < 4; i++)
    for (unsigned lo = 0; lo < 16; lo++)
      for (unsigned hi = 0; hi < 16; hi++) {
        const unsigned w = hm_w4_pack_word(HM_W4_E2M1, nibbles(lo, i, 0xf), nibbles(hi, i, 0x7));
        unsigned b0, b1;
        hm_w4_widen_e2m1(w, &b0, &b1);
        const float want_lo = hm_e2m1_to_f32((uint8_t)lo) / 64.0f,
                    want_hi = hm_e2m1_to_f32((uint8_t)hi) / 64.0f;
        const float got_lo = hm_e4m3_to_f32((uint8_t)byte_of(b0, i)),
                    got_hi = hm_e4m3_to_f32((uint8_t)byte_of(b1, i));
        assert_true(got_lo == want_lo && signbit(got_lo) == signbit(want_lo));
        assert_true(got_hi == want_hi && signbit(got_hi) == signbit(want_hi));
        assert_true(hm_e4m3_to_f32((uint8_t)byte_of(b0, (i + 2) % 4)) == -6.0f / 64.0f);
        assert_true(hm_e4m3_to_f32((uint8_t)byte_of(b1, (i + 3) % 4)) == 6.0f / 64.0f);
      }
}

static void same_value(float got, float want) {
  assert_true(got == want && signbit(got) == signbit(want));
}

/* Every code at every one of the eight places, the others set: pair 2q + i, half h holds
 * code 2i + h of field q (b0 for q = 0, b1 for q = 1). */
static void e2m1_f16_codes_widen_to_value_times_2_to_minus_14(void **state) {
  (void)state;
  for (int place = 0; place < 8; place++)
    for (unsigned c = 0; c < 16; c++) {
      const int q = place / 4, i = place % 4;
      const unsigned fields[2] = {q == 0 ? nibbles(c, i, 0xf) : 0x7777u,
                                  q == 1 ? nibbles(c, i, 0x7) : 0xffffu};
      unsigned f[4];
      hm_w4_widen_e2m1_f16(hm_w4_pack_word_f16(fields[0], fields[1]), f);
      for (int p = 0; p < 4; p++)
        for (int h = 0; h < 2; h++) {
          const int fq = p / 2, nib = 2 * (p % 2) + h;
          const unsigned code = (fields[fq] >> (4 * nib)) & 0xfu;
          const float got = hm_f16_to_f32((uint16_t)(f[p] >> (16 * h)));
          same_value(got, ldexpf(hm_e2m1_to_f32((uint8_t)code), -14));
          if (fq == q && nib == i) assert_int_equal(code, c);
        }
    }
}

static void e8m0_scales_are_twice_the_power_of_two(void **state) {
  (void)state;
  for (unsigned x = 0; x < 254; x++) {
    const unsigned bits = hm_w4_e8m0_bits_x2(x);
    float f;
    memcpy(&f, &bits, sizeof(f));
    assert_true(f == 2.0f * hm_e8m0_to_f32((uint8_t)x));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(int4_widens_to_16q),
      cmocka_unit_test(e2m1_widens_to_e4m3_times_2_to_minus_6),
      cmocka_unit_test(e2m1_f16_codes_widen_to_value_times_2_to_minus_14),
      cmocka_unit_test(e8m0_scales_are_twice_the_power_of_two),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
