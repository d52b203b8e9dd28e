/* SPDX-License-Identifier: Apache-2.0 */
/* Packing along K: every width 1..8, odd lengths, bit positions checked one by one. */
#include <stdlib.h>
#include <string.h>

#include "hm_test.h"
#include "pack.h"

static unsigned stream_bit(const uint32_t *row, int64_t p) {
  return (row[p / 32] >> (p % 32)) & 1u;
}

static void fill_codes(hm_rng *rng, uint8_t *codes, int64_t n, int bits) {
  for (int64_t i = 0; i < n; i++) codes[i] = (uint8_t)(hm_rng_next(rng) & ((1u << bits) - 1u));
}

/* Code j occupies stream bits j*b .. j*b+b-1, LSB first; the tail of the last word is zero. */
static void check_layout(const uint8_t *codes, const uint32_t *words, int64_t rows, int64_t count, int bits) {
  int64_t row_words = hm_pack_row_words(bits, count);
  for (int64_t r = 0; r < rows; r++) {
    const uint32_t *row = words + r * row_words;
    for (int64_t j = 0; j < count; j++)
      for (int t = 0; t < bits; t++)
        if (stream_bit(row, j * bits + t) != ((codes[r * count + j] >> t) & 1u))
          fail_msg("bits %d: bit %d of code (%lld, %lld) misplaced", bits, t, (long long)r, (long long)j);
    for (int64_t p = count * bits; p < row_words * 32; p++)
      if (stream_bit(row, p))
        fail_msg("bits %d: padding bit %lld of row %lld is set", bits, (long long)p, (long long)r);
  }
}

static void round_trip_every_width(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("pack_round_trip_every_width"));
  static const int64_t counts[] = {1, 7, 31, 32, 33, 97, 101, 4097};
  for (int bits = 1; bits <= 8; bits++) {
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
      int64_t rows = 3, count = counts[c];
      int64_t row_words = hm_pack_row_words(bits, count);
      assert_int_equal(row_words, (count * bits + 31) / 32);
      uint8_t *codes = malloc((size_t)(rows * count)), *back = malloc((size_t)(rows * count));
      uint32_t *words = malloc((size_t)(rows * row_words) * 4);
      fill_codes(&rng, codes, rows * count, bits);
      memset(words, 0xa5, (size_t)(rows * row_words) * 4); /* packing must not depend on old contents */
      HM_ASSERT_OK(hm_pack_rows(codes, rows, count, bits, words));
      check_layout(codes, words, rows, count, bits);
      HM_ASSERT_OK(hm_unpack_rows(words, rows, count, bits, back));
      assert_memory_equal(codes, back, (size_t)(rows * count));
      for (int64_t j = 0; j < count; j++)
        assert_int_equal(hm_unpack_one(words + row_words, j, bits), codes[count + j]);
      free(codes);
      free(back);
      free(words);
    }
  }
}

static void literal_words(void **state) {
  (void)state;
  uint8_t nibbles[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint32_t w[2];
  HM_ASSERT_OK(hm_pack_rows(nibbles, 1, 8, 4, w));
  assert_int_equal(w[0], 0x87654321u);
  /* Eleven 3-bit codes: the last one straddles the first word's top two bits and bit 0 of the next. */
  uint8_t sevens[11];
  memset(sevens, 7, sizeof(sevens));
  HM_ASSERT_OK(hm_pack_rows(sevens, 1, 11, 3, w));
  assert_int_equal(w[0], 0xffffffffu);
  assert_int_equal(w[1], 0x1u);
  uint8_t straddle[11] = {0};
  straddle[10] = 5; /* 0b101: bit 30 set, bit 31 clear, bit 32 set */
  HM_ASSERT_OK(hm_pack_rows(straddle, 1, 11, 3, w));
  assert_int_equal(w[0], 0x40000000u);
  assert_int_equal(w[1], 0x1u);
  assert_int_equal(hm_unpack_one(w, 10, 3), 5);
  assert_int_equal(hm_pack_row_words(16, 3), 2);
  assert_int_equal(hm_pack_row_words(4, 0), 0);
}

static void bad_arguments(void **state) {
  (void)state;
  uint8_t codes[4] = {1, 2, 3, 16};
  uint32_t w[4];
  assert_int_equal(hm_pack_rows(codes, 1, 4, 4, w), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "does not fit in 4 bits"));
  assert_int_equal(hm_pack_rows(codes, 1, 3, 0, w), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_pack_rows(codes, 1, 3, 9, w), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_pack_rows(NULL, 1, 3, 4, w), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_unpack_rows(w, 1, 3, 4, NULL), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_unpack_rows(w, -1, 3, 4, codes), HM_INVALID_ARGUMENT);
  HM_ASSERT_OK(hm_pack_rows(NULL, 0, 3, 4, NULL));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(round_trip_every_width),
      cmocka_unit_test(literal_words),
      cmocka_unit_test(bad_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
