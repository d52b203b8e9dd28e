/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Timing of the dense W4A16 g128 GEMM at N = K = 8192 next to our own bf16 kernel and
 * the measured copy bandwidth: CUDA-event medians, one table. Each rep reads another
 * copy of the weights (cold in L2, and no dirty L2 lines from a memset flush to write
 * back). Checks rows of one M against the reference first, so a wrong kernel fails.
 * Then the swapped-operand decode kernels against the 16-row one at M = 1, 4, 8, 16, and
 * the wgmma kernels against mma.sync at M = 256 .. 16384.
 */
#include "gemm_test_util.h"
#include "kernels/gemm_gen.h"
#include "layer_internal.h"

static hm_engine *engine;
static hm_stream *stream;
#define REPS 20
#define COPIES 4

/* Median of REPS timed calls fn(ctx, call) after three warm-up ones; fn reads weight copy
 * call % COPIES. */
static float time_median(void (*fn)(void *ctx, int call), void *ctx) {
  return hm_test_median_ms(engine, stream, 3, REPS, fn, ctx);
}

typedef struct forward_ctx {
  hm_layer **l;
  const hm_gemm_args *args;
} forward_ctx;

static void timed_forward(void *ctx, int call) {
  const forward_ctx *f = ctx;
  HM_ASSERT_OK(hm_layer_forward(f->l[call % COPIES], f->args, stream));
}

/* Median of REPS timed forwards, rotating over COPIES layers of the same weights. */
static float time_forward(hm_layer **l, const hm_gemm_args *args) {
  forward_ctx f = {l, args};
  return time_median(timed_forward, &f);
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

/* Weight, scale and zero point bytes of W4A16 g128 with zero points (canonical sizes). */
static double w4a16_g128_bytes(int64_t n, int64_t k) {
  return (double)n * k / 2 + (double)n * (k / 128) * (2 + 0.5);
}

#define BENCH_N 8192
#define BENCH_K 8192

/* Dense W4A16 g128 at N = K = 8192 for the timing table and the tuning sweeps: COPIES
 * layers of the same weights, activations for max_m rows, and the reference of the first
 * check_m of them. */
typedef struct dense_bench {
  gt_case q;
  gt_layer_data d;
  hm_layer *l[COPIES];
  void *a_host, *a, *c, *out, *ref;
  hm_gemm_args host_args;
  int64_t check_m;
} dense_bench;

static void dense_bench_make(dense_bench *b, const char *test, int64_t max_m, int64_t check_m) {
  const int64_t n = BENCH_N, k = BENCH_K;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed(test));
  b->q = (gt_case){"w4a16", gt_format(HM_U4, 128, true, HM_BF16), HM_BF16, HM_BF16, false, n, k, 1, false};
  gt_layer_data_make(&rng, &b->q, &b->d);
  for (int i = 0; i < COPIES; i++) b->l[i] = gt_layer_make(engine, &b->q, &b->d);
  b->a_host = gt_random(&rng, HM_BF16, max_m * k, 1.0f);
  b->a = gt_upload(engine, b->a_host, (size_t)(max_m * k) * 2);
  b->c = NULL;
  HM_ASSERT_OK(hm_mem_alloc(engine, (size_t)(max_m * n) * 2, &b->c));
  b->out = gt_alloc((size_t)(check_m * n) * 2);
  b->ref = gt_alloc((size_t)(check_m * n) * 2);
  b->check_m = check_m;
  b->host_args = (hm_gemm_args){.type = HM_GEMM_DENSE, .m = check_m, .a = b->a_host};
  gt_reference(&b->q, &b->d, &b->host_args, check_m, b->ref);
}

static void dense_bench_free(dense_bench *b) {
  free(b->out), free(b->ref), free(b->a_host);
  hm_mem_free(engine, b->a);
  hm_mem_free(engine, b->c);
  for (int i = 0; i < COPIES; i++) hm_layer_destroy(b->l[i]);
  gt_layer_data_free(&b->d);
}

static void w4a16_timing_table(void **state) {
  (void)state;
  dense_bench w;
  dense_bench_make(&w, "w4a16_timing_table", 4096, 16);
  const int64_t n = BENCH_N, k = BENCH_K;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("w4a16_timing_table_bf16"));
  const gt_case b = {"bf16", gt_format(HM_BF16, 0, false, HM_BF16), HM_BF16, HM_BF16, false, n, k, 1, false};
  gt_layer_data db;
  gt_layer_data_make(&rng, &b, &db);
  hm_layer *lb[COPIES];
  for (int i = 0; i < COPIES; i++)
    lb[i] = i < 2 ? gt_layer_make(engine, &b, &db) : lb[i - 2]; /* 2 x 134 MB already exceed L2 */

  /* Correctness of the timed kernel at M = 16 first. */
  gt_device_run(engine, w.l[0], &w.host_args, w.check_m, k, w.check_m, n, 1, w.out);
  const double err = gt_compare(w.out, w.ref, w.check_m * n, HM_BF16, n, "w4a16 8192");
  printf("# w4a16 N=K=8192 M=16 rel_err %.2e\n", err);
  assert_true(err < gt_tolerance(&w.q));

  const double bw = copy_bandwidth();
  const double wbytes = w4a16_g128_bytes(n, k);
  printf("# device: %s; measured copy bandwidth %.0f GB/s\n", hm_engine_device_name(engine), bw);
  printf("# weight+scale+zero bytes %.1f MB (canonical sizes)\n", wbytes / 1e6);
  printf("#     M   w4a16_us   bf16_us   w4a16_GB/s  %%copy_bw  w4a16_TFLOP/s  bf16_TFLOP/s  speedup\n");
  const int64_t ms[] = {1, 16, 64, 256, 1024, 4096};
  for (size_t i = 0; i < HM_ARRAY_SIZE(ms); i++) {
    hm_gemm_args args = {.type = HM_GEMM_DENSE, .m = ms[i], .a = w.a, .c = w.c};
    const float tq = time_forward(w.l, &args), tb = time_forward(lb, &args);
    const double bytes = wbytes + (double)ms[i] * (k + n) * 2;
    const double flops = 2.0 * ms[i] * n * k;
    printf("%7lld %10.2f %9.2f %12.0f %9.1f %14.1f %13.1f %8.2fx\n", (long long)ms[i], tq * 1e3, tb * 1e3,
           bytes / (tq * 1e-3) / 1e9, 100.0 * bytes / (tq * 1e-3) / 1e9 / bw, flops / (tq * 1e-3) / 1e12,
           flops / (tb * 1e-3) / 1e12, tb / tq);
  }
  for (int i = 0; i < 2; i++) hm_layer_destroy(lb[i]);
  gt_layer_data_free(&db);
  dense_bench_free(&w);
}

/* One tuning of the dense kernel, forced, over the weights of the COPIES layers. */
typedef struct forced_kernel {
  hm_gemm_config cfg;
  hm_kernel *kernel;
  hm_gemm_operands ops[COPIES];
  void *workspace;
  const hm_gemm_args *args;
} forced_kernel;

static void timed_launch(void *ctx, int call) {
  const forced_kernel *f = ctx;
  HM_ASSERT_OK(
      hm_gemm_launch(f->kernel, &f->cfg, engine->sm_count, &f->ops[call % COPIES], f->args, f->workspace, stream));
}

static void checked_launch(void *ctx, const hm_gemm_args *device_args) {
  const forced_kernel *f = ctx;
  HM_ASSERT_OK(hm_gemm_launch(f->kernel, &f->cfg, engine->sm_count, &f->ops[0], device_args, f->workspace, NULL));
}

#define MAX_TUNINGS 16

/* The tunings of a sweep that this device runs (wgmma only on sm_90), compiled in one
 * batch and bound to the bench's layers, with one workspace that fits each. */
typedef struct forced_set {
  forced_kernel f[MAX_TUNINGS];
  hm_gemm_source src[MAX_TUNINGS];
  int count;
  void *ws;
} forced_set;

static void forced_set_make(forced_set *s, const dense_bench *b, const hm_gemm_tuning *tunings, int n) {
  assert_true(n <= MAX_TUNINGS);
  hm_kernel_source ks[MAX_TUNINGS];
  const hm_cubin *cubins[MAX_TUNINGS];
  hm_gemm_config base;
  HM_ASSERT_OK(hm_layer_gemm_base(b->l[0], HM_GEMM_DENSE, &base));
  size_t ws_bytes = 0;
  s->count = 0;
  for (int i = 0; i < n; i++) {
    if (tunings[i].mma == HM_MMA_WGMMA && engine->arch != 90) continue;
    forced_kernel *f = &s->f[s->count];
    f->cfg = base;
    f->cfg.tuning = tunings[i];
    HM_ASSERT_OK(hm_gemm_gen(&f->cfg, &s->src[s->count]));
    ks[s->count] = s->src[s->count].src;
    const size_t bytes = hm_gemm_workspace_bytes(&f->cfg, engine->sm_count);
    if (bytes > ws_bytes) ws_bytes = bytes;
    s->count++;
  }
  HM_ASSERT_OK(hm_jit_get_cubins(ks, s->count, cubins));
  s->ws = NULL;
  HM_ASSERT_OK(hm_mem_alloc(engine, ws_bytes, &s->ws));
  HM_ASSERT_OK(hm_engine_memset(engine, s->ws, 0, ws_bytes, NULL));
  for (int i = 0; i < s->count; i++) {
    forced_kernel *f = &s->f[i];
    HM_ASSERT_OK(hm_kernel_get(engine, &ks[i], &f->kernel));
    for (int j = 0; j < COPIES; j++) f->ops[j] = hm_layer_operands(b->l[j]);
    f->workspace = s->ws;
  }
}

static void forced_set_free(forced_set *s) {
  for (int i = 0; i < s->count; i++) hm_gemm_source_free(&s->src[i]);
  hm_mem_free(engine, s->ws);
}

#define MAX_SWEEP_M 4

/* What one forced kernel of a sweep measured: its error at the bench's check rows, then its
 * median time (us) at each M. */
typedef struct forced_run {
  double err;
  bool ok;
  int regs;
  float us[MAX_SWEEP_M];
} forced_run;

static forced_run run_forced(forced_set *s, int i, dense_bench *b, const int64_t *ms, int nms) {
  forced_kernel *f = &s->f[i];
  forced_run r = {0};
  assert_true(nms <= MAX_SWEEP_M);
  gt_device_run_with(engine, checked_launch, f, &b->host_args, b->check_m, BENCH_K, b->check_m, BENCH_N, 1,
                     b->out);
  r.err = gt_compare(b->out, b->ref, b->check_m * BENCH_N, HM_BF16, BENCH_N, s->src[i].name);
  r.ok = r.err < gt_tolerance(&b->q);
  int shared = 0, threads = 0;
  HM_ASSERT_OK(hm_kernel_attributes(f->kernel, &r.regs, &shared, &threads));
  for (int j = 0; j < nms; j++) {
    const hm_gemm_args args = {.type = HM_GEMM_DENSE, .m = ms[j], .a = b->a, .c = b->c};
    f->args = &args;
    r.us[j] = time_median(timed_launch, f) * 1e3f;
  }
  return r;
}

/* The times of what the layer's plan runs at each M of the sweep, ending the row. */
static void print_plan_times(dense_bench *b, const int64_t *ms, int nms, const char *fmt) {
  for (int j = 0; j < nms; j++) {
    const hm_gemm_args args = {.type = HM_GEMM_DENSE, .m = ms[j], .a = b->a, .c = b->c};
    printf(fmt, time_forward(b->l, &args) * 1e3f);
  }
  printf("\n");
}

/* bm bn bk warps_m warps_n warps_k stages stream_k min_iters ctas_per_sm mma ws */
static const hm_gemm_tuning decode_tunings[] = {
    {16, 256, 128, 1, 4, 2, 4, true, 4, 1, HM_MMA_SYNC, false}, /* the 16-row decode tile */
    {8, 256, 128, 1, 4, 2, 4, true, 4, 1, HM_MMA_SYNC,
     false}, /* swapped operands, same shape (the default) */
    {8, 256, 128, 1, 4, 2, 4, true, 4, 2, HM_MMA_SYNC,
     false}, /* the default, two CTAs an SM (<= 128 registers) */
    {8, 256, 256, 1, 4, 4, 4, true, 2, 1, HM_MMA_SYNC,
     false}, /* swapped, bk 256: half the barriers per weight byte */
    {8, 128, 128, 1, 1, 2, 6, true, 4, 2, HM_MMA_SYNC, false}, /* swapped, two units a warp, two CTAs an SM */
    {8, 256, 128, 1, 4, 1, 6, true, 4, 2, HM_MMA_SYNC, false}, /* swapped, no k split, two CTAs an SM */
    {8, 256, 256, 1, 4, 2, 3, true, 4, 2, HM_MMA_SYNC,
     false}, /* swapped, bk 256, two CTAs an SM: the tuned MoE decode kernel */
};
#define DECODE_TUNINGS ((int)HM_ARRAY_SIZE(decode_tunings))

/*
 * Dense W4A16 g128 at N = K = 8192 and decode M: the swapped 8-row kernels next to the
 * 16-row one and to what the layer's plan runs. Each kernel is checked at M = 16 (two
 * 8-row tiles for the swapped ones) before it is timed.
 */
static void swapped_vs_standard_decode(void **state) {
  (void)state;
  dense_bench b;
  forced_set s;
  dense_bench_make(&b, "swapped_vs_standard_decode", 16, 16);
  forced_set_make(&s, &b, decode_tunings, DECODE_TUNINGS);

  const double bw = copy_bandwidth(), wbytes = w4a16_g128_bytes(BENCH_N, BENCH_K);
  const int64_t ms[] = {1, 4, 8, 16};
  printf("# device: %s; copy bandwidth %.0f GB/s; w4a16 g128 N=K=8192, %.1f MB\n", hm_engine_device_name(engine), bw,
         wbytes / 1e6);
  printf("# %-44s %8s %8s %8s %8s %8s %8s %5s %9s\n", "kernel (tuning)", "M=1_us", "M=4_us", "M=8_us", "M=16_us",
         "%bw_M=1", "%bw_M=8", "regs", "rel_err");
  int failed = 0;
  for (int i = 0; i < s.count; i++) {
    const forced_run r = run_forced(&s, i, &b, ms, (int)HM_ARRAY_SIZE(ms));
    const hm_gemm_tuning *t = &s.f[i].cfg.tuning;
    char name[64];
    snprintf(name, sizeof(name), "%s bm%d bn%d bk%d w%dx%dx%d s%d c%d", t->bm == 8 ? "swapped " : "standard",
             t->bm, t->bn, t->bk, t->warps_m, t->warps_n, t->warps_k, t->stages, t->ctas_per_sm);
    const double bytes1 = wbytes + (double)(BENCH_K + BENCH_N) * 2,
                 bytes8 = wbytes + 8.0 * (BENCH_K + BENCH_N) * 2;
    printf("# %-44s %8.2f %8.2f %8.2f %8.2f %8.1f %8.1f %5d %9.2e%s\n", name, r.us[0], r.us[1], r.us[2],
           r.us[3], 100.0 * bytes1 / (r.us[0] * 1e-6) / 1e9 / bw,
           100.0 * bytes8 / (r.us[2] * 1e-6) / 1e9 / bw, r.regs, r.err, r.ok ? "" : "  WRONG");
    failed += !r.ok;
  }
  printf("# %-44s", "the layer's plan");
  print_plan_times(&b, ms, (int)HM_ARRAY_SIZE(ms), " %8.2f");
  forced_set_free(&s);
  dense_bench_free(&b);
  if (failed) fail_msg("%d decode kernels wrong", failed);
}

/* bm bn bk warps_m warps_n warps_k stages stream_k min_iters ctas_per_sm mma ws */
static const hm_gemm_tuning large_tunings[] = {
    {128, 256, 128, 2, 4, 1, 3, true, 4, 1, HM_MMA_SYNC, false},  /* the mma.sync large-M default */
    {128, 256, 64, 2, 4, 1, 4, true, 4, 1, HM_MMA_SYNC, false},   /* mma.sync, bk 64, deeper ring */
    {128, 256, 64, 1, 8, 1, 6, true, 4, 1, HM_MMA_WGMMA, false},  /* the wgmma large-M default */
    {128, 256, 64, 1, 8, 1, 6, false, 0, 1, HM_MMA_WGMMA, false}, /* the same, data-parallel only */
    {256, 128, 64, 1, 8, 1, 5, true, 4, 1, HM_MMA_WGMMA,
     false}, /* N = 256 a warpgroup: half the dequant a flop */
    {128, 256, 128, 1, 8, 1, 4, true, 4, 1, HM_MMA_WGMMA, false}, /* bk 128: half the barriers */
    {64, 256, 128, 1, 8, 1, 4, true, 4, 1, HM_MMA_WGMMA, false},  /* the 33..64-rows-per-expert default */
    /* Warp-specialized (gemm_ws_wgmma.cuh): the output tile has its own bytes beside the ring. */
    {128, 256, 128, 1, 8, 1, 3, true, 4, 1, HM_MMA_WGMMA, true},  /* ws, bk 128 over 3 stages */
    {128, 256, 128, 1, 8, 1, 3, false, 0, 1, HM_MMA_WGMMA, true}, /* the same, data-parallel only */
    {128, 256, 64, 1, 8, 1, 6, true, 4, 1, HM_MMA_WGMMA, true},   /* ws, bk 64 over 6 stages */
    {256, 128, 64, 1, 8, 1, 4, true, 4, 1, HM_MMA_WGMMA, true}, /* ws, 256 tokens: half the dequant a flop */
    {64, 256, 128, 1, 8, 1, 4, true, 4, 1, HM_MMA_WGMMA, true}, /* ws, the 33..64-row shape */
};
#define LARGE_TUNINGS ((int)HM_ARRAY_SIZE(large_tunings))

/*
 * Dense W4A16 g128 at N = K = 8192 and prefill M: the wgmma kernels (sm_90 only) next to
 * mma.sync and to what the layer's plan runs. Each kernel is checked at M = 160 (a
 * partial last tile for every bm) before it is timed.
 */
static void wgmma_vs_mma_sync_large_m(void **state) {
  (void)state;
  dense_bench b;
  forced_set s;
  dense_bench_make(&b, "wgmma_vs_mma_sync_large_m", 16384, 160);
  forced_set_make(&s, &b, large_tunings, LARGE_TUNINGS);

  const int64_t ms[] = {256, 1024, 4096, 16384};
  printf("# device: %s (sm_%d); w4a16 u4z g128 N=K=8192; wgmma only on sm_90\n", hm_engine_device_name(engine),
         engine->arch);
  printf("# %-46s %9s %9s %9s %9s %9s %9s %5s %9s\n", "kernel (tuning)", "M=256_us", "M=1024_us", "M=4096_us",
         "M=16384_us", "TF/s_4096", "TF/s_16K", "regs", "rel_err");
  int failed = 0;
  for (int i = 0; i < s.count; i++) {
    const forced_run r = run_forced(&s, i, &b, ms, (int)HM_ARRAY_SIZE(ms));
    const hm_gemm_tuning *t = &s.f[i].cfg.tuning;
    char name[64];
    snprintf(name, sizeof(name), "%s bm%d bn%d bk%d w%dx%dx%d s%d %s",
             t->mma == HM_MMA_WGMMA ? (t->ws ? "wgmma-ws" : "wgmma") : "mma.sync", t->bm, t->bn, t->bk,
             t->warps_m, t->warps_n, t->warps_k, t->stages, t->stream_k ? "sk" : "dp");
    const double flops4k = 2.0 * 4096 * BENCH_N * BENCH_K, flops16k = 2.0 * 16384 * BENCH_N * BENCH_K;
    printf("  %-46s %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %5d %9.2e%s\n", name, r.us[0], r.us[1], r.us[2],
           r.us[3], flops4k / (r.us[2] * 1e-6) / 1e12, flops16k / (r.us[3] * 1e-6) / 1e12, r.regs, r.err,
           r.ok ? "" : "  WRONG");
    failed += !r.ok;
  }
  printf("  %-46s", "the layer's plan");
  print_plan_times(&b, ms, (int)HM_ARRAY_SIZE(ms), " %9.1f");
  forced_set_free(&s);
  dense_bench_free(&b);
  if (failed) fail_msg("%d large-M kernels wrong", failed);
}

int main(void) {
  engine = hm_test_cuda_engine_or_skip();
  if (engine == NULL) return HM_TEST_SKIP;
  if (hm_stream_create(engine, &stream) != HM_OK) return 1;
  const struct CMUnitTest tests[] = {cmocka_unit_test(w4a16_timing_table),
                                     cmocka_unit_test(swapped_vs_standard_decode),
                                     cmocka_unit_test(wgmma_vs_mma_sync_large_m)};
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_stream_destroy(stream);
  hm_engine_destroy(engine);
  hm_shutdown();
  return rc;
}
