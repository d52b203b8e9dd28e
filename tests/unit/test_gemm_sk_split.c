/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How persistent launches share tiles among CTAs (kernels/hm_sk_split.cuh), the rules the
 * kernels and the cost model both follow: the data-parallel waves, the Stream-K ranges
 * covering every iteration once, and the tile-aligned CTA counts keeping each range
 * inside one tile at no more than an eighth of the CTAs idle.
 */
#include "hm_test.h"
#include "kernels/hm_sk_split.cuh"

static void data_parallel_waves(void **state) {
  (void)state;
  assert_int_equal(hm_sk_dp_tiles(200, 132, 0), 200); /* no Stream-K: every tile whole */
  assert_int_equal(hm_sk_dp_tiles(264, 132, 1), 264); /* full waves */
  assert_int_equal(hm_sk_dp_tiles(32, 132, 1), 0);    /* fewer tiles than CTAs: all split */
  assert_int_equal(hm_sk_dp_tiles(330, 132, 1), 132); /* the last wave and a half split */
}

static void decode_shapes(void **state) {
  (void)state;
  /* Dense N = K = 8192, bn 256, bk 128: 32 tiles of 64 iterations, 16 a CTA on 128. */
  assert_int_equal(hm_sk_ctas(32, 64, 132, 4), 128);
  /* DeepSeek-V3 gate_up at one token: 8 experts x 16 tiles of 56 iterations, one a CTA. */
  assert_int_equal(hm_sk_ctas(128, 56, 132, 4), 128);
  /* Two CTAs an SM: 32 tiles split eight ways. */
  assert_int_equal(hm_sk_ctas(32, 64, 264, 4), 256);
  /* 100 tiles of 3 iterations: aligned would leave 32 of 132 idle, so all take a share. */
  assert_int_equal(hm_sk_ctas(100, 3, 132, 1), 132);
  /* min_iters caps the CTAs before alignment: 35 iterations at 4 or more a CTA. */
  assert_int_equal(hm_sk_ctas(5, 7, 132, 4), 8);
  /* More tiles than CTAs: ranges cross tiles anyway. */
  assert_int_equal(hm_sk_ctas(150, 10, 132, 4), 132);
}

/* Nothing to split takes no CTA, and a data-parallel kernel's min_iters of 0 counts as 1:
 * a division by it ran a decode prefetch's spare CTAs for minutes (hm_sk_split.cuh). */
static void no_tiles_and_no_min_iters(void **state) {
  (void)state;
  assert_int_equal(hm_sk_ctas(0, 16, 114, 0), 0);
  assert_int_equal(hm_sk_ctas(0, 2, 110, 4), 0);
  assert_int_equal(hm_sk_ctas(3, 0, 132, 4), 0);
  assert_int_equal(hm_sk_ctas(5, 7, 132, 0), hm_sk_ctas(5, 7, 132, 1));
  assert_int_equal(hm_sk_ctas(32, 64, 132, 0), 128);
}

/* The ranges of ctas CTAs cover iterations [0, iters) once, in order, each owned by its CTA. */
static void check_cover(int iters, int ctas) {
  assert_true(hm_sk_begin(0, iters, ctas) == 0);
  assert_true(hm_sk_begin(ctas, iters, ctas) == iters);
  for (int c = 0; c < ctas; c++) {
    const int b = hm_sk_begin(c, iters, ctas), e = hm_sk_begin(c + 1, iters, ctas);
    assert_true(b <= e && e - b <= iters / ctas + 1); /* equal shares, give or take one */
    if (b < e) {
      assert_int_equal(hm_sk_owner(b, iters, ctas), c);
      assert_int_equal(hm_sk_owner(e - 1, iters, ctas), c);
    }
  }
}

static void ranges_cover_and_align(void **state) {
  (void)state;
  const int grids[] = {66, 78, 132, 264}, mins[] = {1, 2, 4};
  int aligned = 0;
  for (int g = 0; g < 4; g++)
    for (int mi = 0; mi < 3; mi++)
      for (int tiles = 1; tiles <= 300; tiles += 7)
        for (int k_iters = 1; k_iters <= 130; k_iters += 3) {
          const int grid = grids[g], min_iters = mins[mi];
          const int ctas = hm_sk_ctas(tiles, k_iters, grid, min_iters);
          const int iters = tiles * k_iters;
          const int cap = iters / min_iters;
          const int plain = cap < 1 ? 1 : (cap < grid ? cap : grid);
          assert_true(ctas >= 1 && ctas <= plain);
          check_cover(iters, ctas);
          if (ctas == plain) continue;
          /* Fewer CTAs only when each range stays inside one tile, for at most 1/8 idle. */
          aligned++;
          assert_int_equal(ctas % tiles, 0);
          assert_int_equal(k_iters % (ctas / tiles), 0);
          assert_true(8 * ctas >= 7 * plain);
          for (int c = 0; c < ctas; c++) {
            const int b = hm_sk_begin(c, iters, ctas), e = hm_sk_begin(c + 1, iters, ctas);
            assert_true(b / k_iters == (e - 1) / k_iters);
          }
        }
  assert_true(aligned > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(data_parallel_waves),
      cmocka_unit_test(no_tiles_and_no_min_iters),
      cmocka_unit_test(decode_shapes),
      cmocka_unit_test(ranges_cover_and_align),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
