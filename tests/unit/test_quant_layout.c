/* SPDX-License-Identifier: Apache-2.0 */
/* The canonical contract's literal words on hand-built weights whose quantization is exact. */
#include <string.h>

#include "hm_test.h"
#include "numfmt.h"
#include "quant.h"

#define E 2
#define N 3
#define K 64

/* Every K group holds all 16 codes, so min/max give s = 0.5 and the zero point z exactly. */
static unsigned code_at(int e, int r, int c) {
  return (unsigned)(c + r + e) % 16u;
}
static unsigned zero_at(int e, int r, int g) {
  return (unsigned)(r + 5 * g + 2 * e + 3) % 16u;
}

static void u4_zero_point_g32_words(void **state) {
  (void)state;
  hm_quant_format f = {HM_U4, HM_BF16, HM_SCALE_GROUP, 32, 0, true, false};
  float x[E * N * K], deq[N * K];
  for (int e = 0; e < E; e++)
    for (int r = 0; r < N; r++)
      for (int c = 0; c < K; c++)
        x[(e * N + r) * K + c] = ((float)code_at(e, r, c) - (float)zero_at(e, r, c / 32)) * 0.5f;
  hm_host_weights w;
  HM_ASSERT_OK(hm_host_weights_alloc(&w, &f, E, N, K));
  HM_ASSERT_OK(hm_quantize_weights(x, &w));
  /* qweight (E, N, K/8): eight nibbles a word, the lowest column in the lowest nibble. */
  for (int e = 0; e < E; e++)
    for (int r = 0; r < N; r++)
      for (int j = 0; j < K / 8; j++) {
        uint32_t want = 0;
        for (int i = 0; i < 8; i++) want |= code_at(e, r, 8 * j + i) << (4 * i);
        assert_int_equal(w.qweight[(e * N + r) * (K / 8) + j], want);
      }
  /* scales (E, N, K/32) bf16, all 0.5. */
  const uint16_t *scales = w.scales;
  for (int i = 0; i < E * N * K / 32; i++) assert_int_equal(scales[i], 0x3f00);
  /* zeros (E, K/32, words(N)) packed along N: the zero of row r in nibble r. */
  for (int e = 0; e < E; e++)
    for (int g = 0; g < K / 32; g++) {
      uint32_t want = 0;
      for (int r = 0; r < N; r++) want |= zero_at(e, r, g) << (4 * r);
      assert_int_equal(w.zeros[e * (K / 32) + g], want);
    }
  for (int e = 0; e < E; e++) {
    HM_ASSERT_OK(hm_dequantize_rows(&w, e, 0, N, deq));
    assert_memory_equal(deq, x + e * N * K, sizeof(deq));
  }
  hm_host_weights_free(&w);
}

/* Signed codes are two's complement in their field; -7..7 with s = 0.25. */
static void i4_channel_words(void **state) {
  (void)state;
  hm_quant_format f = {HM_I4, HM_F32, HM_SCALE_CHANNEL, 0, 0, false, false};
  float x[16];
  for (int c = 0; c < 16; c++) x[c] = (float)(c < 15 ? c - 7 : 0) * 0.25f;
  hm_host_weights w;
  HM_ASSERT_OK(hm_host_weights_alloc(&w, &f, 1, 1, 16));
  HM_ASSERT_OK(hm_quantize_weights(x, &w));
  assert_int_equal(w.qweight[0], 0x0fedcba9u);
  assert_int_equal(w.qweight[1], 0x07654321u);
  assert_true(((const float *)w.scales)[0] == 0.25f);
  hm_host_weights_free(&w);
}

/* Unsigned without zero points is centred: code = q + 2^(b-1). Ties round to even first. */
static void u4_symmetric_ties(void **state) {
  (void)state;
  hm_quant_format f = {HM_U4, HM_F32, HM_SCALE_CHANNEL, 0, 0, false, false};
  /* absmax 7 -> s = 1: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -2.5 -> -2, -7 -> -7, 7 -> 7. */
  float x[8] = {0.5f, 1.5f, 2.5f, -2.5f, -7.0f, 7.0f, -0.5f, 3.5f};
  hm_host_weights w;
  HM_ASSERT_OK(hm_host_weights_alloc(&w, &f, 1, 1, 8));
  HM_ASSERT_OK(hm_quantize_weights(x, &w));
  static const unsigned q[8] = {8 + 0, 8 + 2, 8 + 2, 8 - 2, 8 - 7, 8 + 7, 8 + 0, 8 + 4};
  uint32_t want = 0;
  for (int i = 0; i < 8; i++) want |= q[i] << (4 * i);
  assert_int_equal(w.qweight[0], want);
  hm_host_weights_free(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(u4_zero_point_g32_words),
      cmocka_unit_test(i4_channel_words),
      cmocka_unit_test(u4_symmetric_ties),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
