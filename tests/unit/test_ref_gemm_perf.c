/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The reference stays usable at model sizes: M = 256, N = K = 4096 W4A16 on the default
 * thread count, checked on sampled outputs against a double product.
 */
#include <stdio.h>
#include <time.h>

#include "test_ref_gemm_util.h"

#define M 256
#define N 4096
#define K 4096
/* Generous: the target is well under 2 s on 2 cores, but the machine is shared. */
#define LIMIT_S 20.0

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Random codes, zeros and scales straight into the contract: quantizing 16M weights would dominate. */
static void random_w4a16(hm_rng *rng, hm_host_weights *w) {
  hm_quant_format f = rg_format(HM_U4, HM_BF16, HM_SCALE_GROUP, 128, true);
  HM_ASSERT_OK(hm_host_weights_alloc(w, &f, 1, N, K));
  for (int64_t i = 0; i < hm_quant_qweight_words(&f, N, K); i++) w->qweight[i] = (uint32_t)hm_rng_next(rng);
  for (int64_t i = 0; i < hm_quant_zero_words(&f, N, K); i++) w->zeros[i] = (uint32_t)hm_rng_next(rng);
  uint16_t *scales = w->scales;
  for (int64_t i = 0; i < hm_quant_scale_count(&f, N, K); i++)
    scales[i] = hm_bf16_from_f32(hm_rng_uniform(rng, 0.001f, 0.01f));
}

static void w4a16_4096_is_fast_and_right(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("ref_gemm_perf"));
  hm_host_weights w = {0};
  random_w4a16(&rng, &w);
  rg_acts a;
  rg_acts_make(&rng, HM_BF16, HM_ACT_SCALE_NONE, M, K, &a);
  float *c = rg_alloc((size_t)M * N * sizeof(float));
  hm_ref_gemm_problem p = {.w = &w, .act = HM_BF16, .out = HM_F32};
  p.args = (hm_gemm_args){.type = HM_GEMM_DENSE, .m = M, .a = a.q, .c = c};

  double t0 = now_s();
  HM_ASSERT_OK(hm_ref_gemm(&p));
  double elapsed = now_s() - t0;
  printf("# M=%d N=%d K=%d w4a16: %.3f s, %.2f GFLOP/s\n", M, N, K, elapsed,
         2.0 * M * N * K / elapsed * 1e-9);
  assert_true(elapsed < LIMIT_S);

  float *b = rg_alloc((size_t)K * sizeof(float));
  for (int s = 0; s < 64; s++) {
    int64_t i = (int64_t)(hm_rng_next(&rng) % M), j = (int64_t)(hm_rng_next(&rng) % N);
    HM_ASSERT_OK(hm_dequantize_rows(&w, 0, j, 1, b));
    double ref = 0, mag = 0;
    for (int64_t kk = 0; kk < K; kk++) {
      ref += (double)a.f32[i * K + kk] * b[kk];
      mag += fabs((double)a.f32[i * K + kk] * b[kk]);
    }
    /* f32 partial sums: error within a few ulps of the sum of magnitudes. */
    double err = fabs(c[i * N + j] - ref);
    if (err > 1e-5 * mag)
      fail_msg("C[%lld][%lld] = %g, double %g", (long long)i, (long long)j, c[i * N + j], ref);
  }
  free(b);
  free(c);
  rg_acts_free(&a);
  hm_host_weights_free(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(w4a16_4096_is_fast_and_right),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
