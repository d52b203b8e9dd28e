/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The combine on the host backend: bf16 expert rows in a shuffled order summed back per
 * token with the top-k weights and the shared output; bit-exact against the documented
 * order (f32 fma in slot order, one bf16 rounding), close to a double sum, -1 skipped;
 * an appended expert's row (the layer's fused shared expert) summed as the shared output.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hm_test.h"
#include "moe/moe_internal.h"
#include "numfmt.h"

static void weighted_sum_in_token_order(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_combine"));
  const int64_t T = 29, H = 200;
  const int K = 3;
  int64_t n = T * K, rows = n + 5;
  float *f = malloc((size_t)(rows * H) * sizeof(float));
  uint16_t *expert_out = malloc((size_t)(rows * H) * 2), *shared = malloc((size_t)(T * H) * 2);
  uint16_t *y = malloc((size_t)(T * H) * 2);
  hm_rng_fill_normal(&rng, f, (size_t)(rows * H), 1.0f);
  HM_ASSERT_OK(hm_convert_from_f32(HM_BF16, f, expert_out, rows * H));
  hm_rng_fill_normal(&rng, f, (size_t)(T * H), 1.0f);
  HM_ASSERT_OK(hm_convert_from_f32(HM_BF16, f, shared, T * H));
  int32_t *row_of = malloc((size_t)n * sizeof(int32_t));
  float *w = malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++) {
    row_of[i] = (int32_t)((i * 7 + 3) % rows); /* a permutation of the rows (7 and 92 are coprime) */
    w[i] = hm_rng_uniform(&rng, 0.0f, 1.0f);
    if (i % 5 == 2) row_of[i] = -1;
  }
  hm_engine *eng = hm_test_host_engine();
  for (int with_shared = 0; with_shared < 2; with_shared++) {
    hm_moe_combine_args a = {.tokens = T,
                             .hidden = H,
                             .top_k = K,
                             .expert_out = expert_out,
                             .row_of = row_of,
                             .topk_weights = w,
                             .shared = with_shared ? shared : NULL,
                             .y = y};
    HM_ASSERT_OK(hm_moe_combine(eng, &a, NULL));
    double num = 0, den = 0;
    for (int64_t t = 0; t < T; t++)
      for (int64_t c = 0; c < H; c++) {
        float acc = 0.0f;
        double exact = 0;
        for (int k = 0; k < K; k++) {
          int32_t r = row_of[t * K + k];
          if (r < 0) continue;
          float v = hm_bf16_to_f32(expert_out[r * H + c]);
          acc = fmaf(w[t * K + k], v, acc);
          exact += (double)w[t * K + k] * v;
        }
        if (with_shared) {
          acc += hm_bf16_to_f32(shared[t * H + c]);
          exact += hm_bf16_to_f32(shared[t * H + c]);
        }
        assert_int_equal(y[t * H + c], hm_bf16_from_f32(acc));
        double d = hm_bf16_to_f32(y[t * H + c]) - exact;
        num += d * d;
        den += exact * exact;
      }
    assert_true(sqrt(num / den) < 4e-3);
  }
  hm_moe_combine_args bad = {.tokens = T,
                             .hidden = H,
                             .top_k = 0,
                             .expert_out = expert_out,
                             .row_of = row_of,
                             .topk_weights = w,
                             .y = y};
  assert_int_equal(hm_moe_combine(eng, &bad, NULL), HM_INVALID_ARGUMENT);
  bad.top_k = K;
  bad.y = NULL;
  assert_int_equal(hm_moe_combine(eng, &bad, NULL), HM_INVALID_ARGUMENT);
  bad.tokens = 0; /* nothing to do, nothing to check */
  HM_ASSERT_OK(hm_moe_combine(eng, &bad, NULL));
  hm_engine_destroy(eng);
  free(f), free(expert_out), free(shared), free(y), free(row_of), free(w);
}

/* Row t*(K+1)+K of row_of names token t's shared output among the expert rows: same bits as a->shared. */
static void appended_row_sums_as_the_shared_output(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_combine_appended"));
  const int64_t T = 13, H = 136;
  const int K = 4;
  int64_t n = T * K, rows = n + T;
  float *f = malloc((size_t)(rows * H) * sizeof(float));
  uint16_t *expert_out = malloc((size_t)(rows * H) * 2), *want = malloc((size_t)(T * H) * 2);
  uint16_t *got = malloc((size_t)(T * H) * 2);
  hm_rng_fill_normal(&rng, f, (size_t)(rows * H), 1.0f);
  HM_ASSERT_OK(hm_convert_from_f32(HM_BF16, f, expert_out, rows * H));
  int32_t *row_of = malloc((size_t)n * sizeof(int32_t)), *wide = malloc((size_t)(n + T) * sizeof(int32_t));
  float *w = malloc((size_t)n * sizeof(float));
  for (int64_t t = 0; t < T; t++) {
    for (int k = 0; k < K; k++) {
      int64_t i = t * K + k;
      row_of[i] = i % 7 == 3 ? -1 : (int32_t)(T + (i * 5 + 1) % n);
      w[i] = hm_rng_uniform(&rng, 0.0f, 1.0f);
      wide[t * (K + 1) + k] = row_of[i];
    }
    wide[t * (K + 1) + K] = (int32_t)(T - 1 - t); /* the shared rows are rows [0, T), reversed */
  }
  uint16_t *shared = malloc((size_t)(T * H) * 2);
  for (int64_t t = 0; t < T; t++) memcpy(shared + t * H, expert_out + (T - 1 - t) * H, (size_t)H * 2);
  hm_engine *eng = hm_test_host_engine();
  hm_moe_combine_args a = {.tokens = T,
                           .hidden = H,
                           .top_k = K,
                           .expert_out = expert_out,
                           .row_of = row_of,
                           .topk_weights = w,
                           .shared = shared,
                           .y = want};
  HM_ASSERT_OK(hm_moe_combine(eng, &a, NULL));
  hm_moe_exec x = {.engine = eng};
  assert_int_equal(hm_moe_combine_run(&x, NULL, &a, true), HM_INVALID_ARGUMENT); /* both at once */
  a.shared = NULL;
  a.row_of = wide;
  a.y = got;
  HM_ASSERT_OK(hm_moe_combine_run(&x, NULL, &a, true));
  assert_memory_equal(got, want, (size_t)(T * H) * 2);
  assert_int_equal(x.launches, 1);
  hm_engine_destroy(eng);
  free(f), free(expert_out), free(want), free(got), free(row_of), free(wide), free(w), free(shared);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(weighted_sum_in_token_order),
      cmocka_unit_test(appended_row_sums_as_the_shared_output),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
