/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Timing of the dense W4A16 g128 GEMM at N = K = 8192 next to our own bf16 kernel and
 * the measured copy bandwidth: CUDA-event medians, one table. Each rep reads another
 * copy of the weights (cold in L2, and no dirty L2 lines from a memset flush to write
 * back). Checks rows of one M against the reference first, so a wrong kernel fails.
 */
#include "gemm_test_util.h"

static hm_engine *engine;
static hm_stream *stream;
#define REPS 20
#define COPIES 4

static int cmp_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Median of REPS timed forwards, rotating over COPIES layers of the same weights. */
static float time_forward(hm_layer **l, const hm_gemm_args *args) {
  hm_event *t0, *t1;
  HM_ASSERT_OK(hm_event_create(engine, &t0));
  HM_ASSERT_OK(hm_event_create(engine, &t1));
  float ms[REPS];
  for (int i = -3; i < REPS; i++) {
    HM_ASSERT_OK(hm_event_record(t0, stream));
    HM_ASSERT_OK(hm_layer_forward(l[(i + 3) % COPIES], args, stream));
    HM_ASSERT_OK(hm_event_record(t1, stream));
    float t;
    HM_ASSERT_OK(hm_event_elapsed_ms(t0, t1, &t));
    if (i >= 0) ms[i] = t;
  }
  hm_event_destroy(t0);
  hm_event_destroy(t1);
  qsort(ms, REPS, sizeof(float), cmp_float);
  return ms[REPS / 2];
}

static double copy_bandwidth(void) {
  void *src = NULL, *dst = NULL;
  const size_t bytes = (size_t)1 << 30;
  HM_ASSERT_OK(hm_mem_alloc(engine, bytes, &src));
  HM_ASSERT_OK(hm_mem_alloc(engine, bytes, &dst));
  hm_event *t0, *t1;
  HM_ASSERT_OK(hm_event_create(engine, &t0));
  HM_ASSERT_OK(hm_event_create(engine, &t1));
  float best = 1e30f;
  for (int i = 0; i < 5; i++) {
    HM_ASSERT_OK(hm_event_record(t0, stream));
    HM_ASSERT_OK(hm_engine_copy(engine, dst, src, bytes, HM_COPY_D2D, stream));
    HM_ASSERT_OK(hm_event_record(t1, stream));
    float t;
    HM_ASSERT_OK(hm_event_elapsed_ms(t0, t1, &t));
    if (t < best) best = t;
  }
  hm_event_destroy(t0);
  hm_event_destroy(t1);
  hm_mem_free(engine, src);
  hm_mem_free(engine, dst);
  return 2.0 * bytes / (best * 1e-3) / 1e9; /* read + write */
}

static void w4a16_timing_table(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("w4a16_timing_table"));
  const int64_t n = 8192, k = 8192, max_m = 4096;
  const gt_case q = {"w4a16", gt_format(HM_U4, 128, true, HM_BF16), HM_BF16, HM_BF16, false, n, k, 1, false};
  const gt_case b = {"bf16", gt_format(HM_BF16, 0, false, HM_BF16), HM_BF16, HM_BF16, false, n, k, 1, false};
  gt_layer_data dq, db;
  gt_layer_data_make(&rng, &q, &dq);
  gt_layer_data_make(&rng, &b, &db);
  hm_layer *lq[COPIES], *lb[COPIES];
  for (int i = 0; i < COPIES; i++) {
    lq[i] = gt_layer_make(engine, &q, &dq);
    lb[i] = i < 2 ? gt_layer_make(engine, &b, &db) : lb[i - 2]; /* 2 x 134 MB already exceed L2 */
  }
  void *a_host = gt_random(&rng, HM_BF16, max_m * k, 1.0f);
  void *a = gt_upload(engine, a_host, (size_t)(max_m * k) * 2), *c = NULL;
  HM_ASSERT_OK(hm_mem_alloc(engine, (size_t)(max_m * n) * 2, &c));

  /* Correctness of the timed kernel at M = 16 first. */
  const int64_t check_m = 16;
  void *out = gt_alloc((size_t)(check_m * n) * 2), *ref = gt_alloc((size_t)(check_m * n) * 2);
  hm_gemm_args host_args = {.type = HM_GEMM_DENSE, .m = check_m, .a = a_host};
  gt_reference(&q, &dq, &host_args, check_m, ref);
  gt_device_run(engine, lq[0], &host_args, check_m, k, check_m, n, 1, out);
  const double err = gt_compare(out, ref, check_m * n, HM_BF16, n, "w4a16 8192");
  printf("# w4a16 N=K=8192 M=16 rel_err %.2e\n", err);
  assert_true(err < gt_tolerance(&q));

  const double bw = copy_bandwidth();
  const double wbytes = (double)n * k / 2 + (double)n * (k / 128) * (2 + 0.5);
  printf("# device: %s; measured copy bandwidth %.0f GB/s\n", hm_engine_device_name(engine), bw);
  printf("# weight+scale+zero bytes %.1f MB (canonical sizes)\n", wbytes / 1e6);
  printf("#     M   w4a16_us   bf16_us   w4a16_GB/s  %%copy_bw  w4a16_TFLOP/s  bf16_TFLOP/s  speedup\n");
  const int64_t ms[] = {1, 16, 64, 256, 1024, 4096};
  for (size_t i = 0; i < HM_ARRAY_SIZE(ms); i++) {
    hm_gemm_args args = {.type = HM_GEMM_DENSE, .m = ms[i], .a = a, .c = c};
    const float tq = time_forward(lq, &args), tb = time_forward(lb, &args);
    const double bytes = wbytes + (double)ms[i] * (k + n) * 2;
    const double flops = 2.0 * ms[i] * n * k;
    printf("%7lld %10.2f %9.2f %12.0f %9.1f %14.1f %13.1f %8.2fx\n", (long long)ms[i], tq * 1e3, tb * 1e3,
           bytes / (tq * 1e-3) / 1e9, 100.0 * bytes / (tq * 1e-3) / 1e9 / bw, flops / (tq * 1e-3) / 1e12,
           flops / (tb * 1e-3) / 1e12, tb / tq);
  }
  free(out), free(ref), free(a_host);
  hm_mem_free(engine, a);
  hm_mem_free(engine, c);
  for (int i = 0; i < COPIES; i++) {
    hm_layer_destroy(lq[i]);
    if (i < 2) hm_layer_destroy(lb[i]);
  }
  gt_layer_data_free(&dq);
  gt_layer_data_free(&db);
}

int main(void) {
  engine = hm_test_cuda_engine_or_skip();
  if (engine == NULL) return HM_TEST_SKIP;
  if (hm_stream_create(engine, &stream) != HM_OK) return 1;
  const struct CMUnitTest tests[] = {cmocka_unit_test(w4a16_timing_table)};
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_stream_destroy(stream);
  hm_engine_destroy(engine);
  hm_shutdown();
  return rc;
}
