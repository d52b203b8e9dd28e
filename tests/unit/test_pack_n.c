/* SPDX-License-Identifier: Apache-2.0 */
/* Packing along N (the zero-point layout): (K/g, N) codes, one packed row per K group. */
#include <stdlib.h>
#include <string.h>

#include "hm_test.h"
#include "pack.h"

/* Zero points z[n][g] of a (N, K/g) grid land in row g at bit n*b, whatever N's parity. */
static void zero_point_grid_every_width(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("zero_point_grid_every_width"));
  static const int64_t ns[] = {1, 5, 33, 255};
  for (int bits = 1; bits <= 8; bits++) {
    for (size_t t = 0; t < sizeof(ns) / sizeof(ns[0]); t++) {
      int64_t n = ns[t], groups = 7;
      uint8_t *z = malloc((size_t)(n * groups)), *kn = malloc((size_t)(n * groups)),
              *back = malloc((size_t)(n * groups));
      for (int64_t i = 0; i < n * groups; i++) z[i] = (uint8_t)(hm_rng_next(&rng) & ((1u << bits) - 1u));
      for (int64_t r = 0; r < n; r++)
        for (int64_t g = 0; g < groups; g++) kn[g * n + r] = z[r * groups + g];
      int64_t row_words = hm_pack_row_words(bits, n);
      uint32_t *words = calloc((size_t)(groups * row_words), 4);
      HM_ASSERT_OK(hm_pack_along_n(kn, groups, n, bits, words));
      for (int64_t g = 0; g < groups; g++) {
        const uint32_t *row = words + g * row_words;
        for (int64_t r = 0; r < n; r++) {
          uint64_t bit = (uint64_t)(r * bits);
          uint64_t pair =
              row[bit / 32] | (bit / 32 + 1 < (uint64_t)row_words ? (uint64_t)row[bit / 32 + 1] << 32 : 0);
          unsigned code = (unsigned)((pair >> (bit % 32)) & ((1u << bits) - 1u));
          if (code != z[r * groups + g])
            fail_msg("bits %d: zero (%lld, %lld) reads %u", bits, (long long)r, (long long)g, code);
          assert_int_equal(hm_unpack_one(row, r, bits), z[r * groups + g]);
        }
      }
      HM_ASSERT_OK(hm_unpack_along_n(words, groups, n, bits, back));
      assert_memory_equal(kn, back, (size_t)(n * groups));
      free(z);
      free(kn);
      free(back);
      free(words);
    }
  }
}

static void along_n_literal_and_errors(void **state) {
  (void)state;
  /* Two K groups of N = 3 u4 zero points: each group is its own word. */
  uint8_t kn[6] = {8, 9, 10, 1, 2, 3};
  uint32_t w[2];
  HM_ASSERT_OK(hm_pack_along_n(kn, 2, 3, 4, w));
  assert_int_equal(w[0], 0xa98u);
  assert_int_equal(w[1], 0x321u);
  kn[0] = 200;
  assert_int_equal(hm_pack_along_n(kn, 2, 3, 4, w), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_unpack_along_n(NULL, 2, 3, 4, kn), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_pack_along_n(kn, 2, -3, 4, w), HM_INVALID_ARGUMENT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(zero_point_grid_every_width),
      cmocka_unit_test(along_n_literal_and_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
