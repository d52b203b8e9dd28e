/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A sweep of candidate tunings of the dense W4A16 g128 kernel at N = K = 8192: each
 * candidate is checked against the reference (M = 16 rows) and timed (CUDA events,
 * median) at decode and large M, so defaults come from measurements. Each rep reads
 * another of COPIES transformed weight copies, so the weights come cold from DRAM; a
 * memset flush would leave L2 dirty and charge its write-back to the kernel.
 */
#include "gemm_test_util.h"
#include "kernels/gemm_gen.h"
#include "layer_internal.h"

static hm_engine *engine;
static hm_stream *stream;
#define REPS 16
#define COPIES 4

/* bm bn bk warps_m warps_n warps_k stages stream_k min_iters ctas_per_sm mma ws */
static const hm_gemm_tuning decode[] = {
    {16, 256, 128, 1, 4, 2, 4, true, 4, 1, HM_MMA_SYNC, false},
    {16, 256, 128, 1, 4, 2, 6, true, 4, 1, HM_MMA_SYNC, false},
    {16, 128, 128, 1, 2, 2, 4, true, 4, 2, HM_MMA_SYNC, false},
    {16, 128, 128, 1, 2, 2, 6, true, 4, 2, HM_MMA_SYNC, false},
    {16, 128, 256, 1, 2, 4, 4, true, 2, 2, HM_MMA_SYNC, false},
    {16, 64, 256, 1, 1, 4, 6, true, 2, 3, HM_MMA_SYNC, false},
    {16, 128, 64, 1, 2, 1, 8, true, 4, 3, HM_MMA_SYNC, false},
    {16, 256, 64, 1, 4, 1, 8, true, 4, 2, HM_MMA_SYNC, false},
    {16, 64, 128, 1, 1, 2, 8, true, 4, 4, HM_MMA_SYNC, false},
    {16, 256, 256, 1, 4, 4, 3, true, 2, 1, HM_MMA_SYNC, false},
    {16, 256, 128, 1, 4, 2, 4, true, 4, 2, HM_MMA_SYNC, false},
    {16, 128, 128, 1, 2, 2, 4, true, 4, 3, HM_MMA_SYNC, false},
    {16, 256, 128, 1, 4, 2, 4, true, 16, 1, HM_MMA_SYNC, false},
};
static const hm_gemm_tuning large[] = {
    {128, 256, 64, 2, 4, 1, 4, true, 4, 1, HM_MMA_SYNC, false},
    {128, 256, 128, 2, 4, 1, 3, true, 4, 1, HM_MMA_SYNC, false},
    {128, 128, 64, 2, 2, 1, 4, true, 4, 2, HM_MMA_SYNC, false},
    {64, 256, 64, 1, 4, 1, 4, true, 4, 2, HM_MMA_SYNC, false},
    {256, 128, 64, 4, 2, 1, 4, true, 4, 1, HM_MMA_SYNC, false},
    {128, 128, 128, 2, 2, 1, 3, true, 4, 2, HM_MMA_SYNC, false},
    {64, 128, 64, 1, 2, 1, 6, true, 4, 3, HM_MMA_SYNC, false},
    {128, 256, 64, 4, 4, 1, 4, true, 4, 1, HM_MMA_SYNC, false},
};

typedef struct launch_ctx {
  hm_kernel *k;
  const hm_gemm_config *cfg;
  const hm_gemm_operands *ops; /* COPIES of them */
  const hm_gemm_args *args;
  void *ws;
} launch_ctx;

static void timed_launch(void *ctx, int call) {
  const launch_ctx *l = ctx;
  HM_ASSERT_OK(hm_gemm_launch(l->k, l->cfg, engine->sm_count, &l->ops[call % COPIES], l->args, l->ws, stream));
}

static float time_launch(hm_kernel *k, const hm_gemm_config *cfg, const hm_gemm_operands *ops,
                         const hm_gemm_args *args, void *ws) {
  launch_ctx l = {k, cfg, ops, args, ws};
  return hm_test_median_ms(engine, stream, 3, REPS, timed_launch, &l);
}

static void sweep(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("sweep"));
  const int64_t n = 8192, k = 8192, max_m = 4096, check_m = 16;
  const gt_case q = {"w4a16", {HM_U4, HM_BF16, HM_SCALE_GROUP, 128, 0, true, false}, HM_BF16, HM_BF16, false,
                     n, k, 1, false};
  gt_layer_data d;
  gt_layer_data_make(&rng, &q, &d);
  hm_layer *copies[COPIES];
  for (int i = 0; i < COPIES; i++) copies[i] = gt_layer_make(engine, &q, &d);
  hm_layer *l = copies[0];
  void *a_host = gt_random(&rng, HM_BF16, max_m * k, 1.0f);
  void *ref = gt_alloc((size_t)(check_m * n) * 2), *out = gt_alloc((size_t)(check_m * n) * 2);
  hm_gemm_args host_args = {.type = HM_GEMM_DENSE, .m = check_m, .a = a_host};
  gt_reference(&q, &d, &host_args, check_m, ref);
  void *a = gt_upload(engine, a_host, (size_t)(max_m * k) * 2), *c = NULL, *ws = NULL;
  HM_ASSERT_OK(hm_mem_alloc(engine, (size_t)(max_m * n) * 2, &c));

  enum { COUNT = HM_ARRAY_SIZE(decode) + HM_ARRAY_SIZE(large) };
  hm_gemm_config cfg[COUNT];
  hm_gemm_source src[COUNT];
  hm_kernel_source ks[COUNT];
  const hm_cubin *cubins[COUNT];
  size_t ws_bytes = 0;
  hm_gemm_config base;
  HM_ASSERT_OK(hm_layer_gemm_base(l, HM_GEMM_DENSE, &base));
  for (int i = 0; i < COUNT; i++) {
    cfg[i] = base;
    cfg[i].tuning = i < (int)HM_ARRAY_SIZE(decode) ? decode[i] : large[i - HM_ARRAY_SIZE(decode)];
    HM_ASSERT_OK(hm_gemm_gen(&cfg[i], &src[i]));
    ks[i] = src[i].src;
    size_t b = hm_gemm_workspace_bytes(&cfg[i], engine->sm_count);
    if (b > ws_bytes) ws_bytes = b;
  }
  HM_ASSERT_OK(hm_jit_get_cubins(ks, COUNT, cubins));
  HM_ASSERT_OK(hm_mem_alloc(engine, ws_bytes, &ws));
  HM_ASSERT_OK(hm_engine_memset(engine, ws, 0, ws_bytes, NULL));
  hm_gemm_operands all_ops[COPIES];
  for (int i = 0; i < COPIES; i++) all_ops[i] = hm_layer_operands(copies[i]);
  const hm_gemm_operands ops = all_ops[0];
  printf("# %s; candidates checked at M=16 against the reference\n", hm_engine_device_name(engine));
  printf("# %-58s %9s %9s %9s %9s %7s\n", "kernel", "M=1_us", "M=16_us", "M=256_us", "M=4096_us", "regs");
  int failed = 0;
  for (int i = 0; i < COUNT; i++) {
    hm_kernel *kern = NULL;
    HM_ASSERT_OK(hm_kernel_get(engine, &ks[i], &kern));
    int regs = 0, shared = 0, threads = 0;
    HM_ASSERT_OK(hm_kernel_attributes(kern, &regs, &shared, &threads));
    hm_gemm_args args = {.type = HM_GEMM_DENSE, .m = check_m, .a = a, .c = c};
    HM_ASSERT_OK(hm_engine_memset(engine, c, 0xff, (size_t)(check_m * n) * 2, NULL));
    HM_ASSERT_OK(hm_gemm_launch(kern, &cfg[i], engine->sm_count, &ops, &args, ws, NULL));
    HM_ASSERT_OK(hm_mem_download(engine, out, c, (size_t)(check_m * n) * 2));
    const double err = gt_compare(out, ref, check_m * n, HM_BF16, n, src[i].name);
    if (!(err < gt_tolerance(&q))) {
      printf("FAIL %s rel_err %.2e\n", src[i].name, err);
      failed++;
      continue;
    }
    const int64_t ms[] = {1, 16, 256, 4096};
    float t[4];
    const bool is_decode = i < (int)HM_ARRAY_SIZE(decode);
    for (int j = 0; j < 4; j++) {
      args.m = ms[j];
      t[j] = (is_decode == (j < 2)) ? time_launch(kern, &cfg[i], all_ops, &args, ws) * 1e3f : 0.0f;
    }
    printf("  %-58s %9.2f %9.2f %9.2f %9.2f %7d\n", src[i].name + 8, t[0], t[1], t[2], t[3], regs);
  }
  for (int i = 0; i < COUNT; i++) hm_gemm_source_free(&src[i]);
  free(a_host), free(ref), free(out);
  hm_mem_free(engine, a);
  hm_mem_free(engine, c);
  hm_mem_free(engine, ws);
  for (int i = 0; i < COPIES; i++) hm_layer_destroy(copies[i]);
  gt_layer_data_free(&d);
  if (failed) fail_msg("%d candidates wrong", failed);
}

int main(void) {
  engine = hm_test_cuda_engine_or_skip();
  if (engine == NULL) return HM_TEST_SKIP;
  if (hm_stream_create(engine, &stream) != HM_OK) return 1;
  const struct CMUnitTest tests[] = {cmocka_unit_test(sweep)};
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_stream_destroy(stream);
  hm_engine_destroy(engine);
  hm_shutdown();
  return rc;
}
