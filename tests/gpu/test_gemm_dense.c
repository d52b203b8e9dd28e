/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Dense weight-only GEMM on the device against the host reference: every weight
 * format, group size, activation and output type, bias, at M = 1, 7, 64, 333 (and
 * 4096 for the main format) with N and K that are not powers of two, two layers
 * chained on one stream, and runs right after a kernel that leaves shared memory full of
 * NaNs. All cases run and print before the test fails, so one run shows every broken case.
 */
#include "gemm_test_util.h"
#include "kernels/gemm_config.h"
#include "kernels/jit.h"

static hm_engine *engine;

#define FS(w, g, zp, s) {HM_##w, HM_##s, (g) ? HM_SCALE_GROUP : HM_SCALE_CHANNEL, g, 0, zp, false}
#define F(w, g, zp) FS(w, g, zp, BF16)
#define UNQ(w) {HM_##w, HM_##w, HM_SCALE_NONE, 0, 0, false, false}

static const gt_case cases[] = {
    {"w4a16 u4z g128 bf16", F(U4, 128, true), HM_BF16, HM_BF16, false, 1000, 1408, 1, false},
    {"u4z g64 f16 bias", FS(U4, 64, true, F16), HM_F16, HM_F16, true, 576, 1344, 1, false},
    {"u4z g32 bf16->f16", F(U4, 32, true), HM_BF16, HM_F16, false, 832, 1056, 1, false},
    {"u4z channel f16", FS(U4, 0, true, F16), HM_F16, HM_F16, false, 704, 1000, 1, false},
    {"i4 g128 bf16 bias", F(I4, 128, false), HM_BF16, HM_BF16, true, 1000, 1408, 1, false},
    {"u4 g128 f16 (no zp)", FS(U4, 128, false, F16), HM_F16, HM_BF16, false, 640, 768, 1, false},
    {"u8 g128 bf16", F(U8, 128, false), HM_BF16, HM_BF16, false, 1000, 1408, 1, false},
    {"u8z g64 f16", FS(U8, 64, true, F16), HM_F16, HM_F16, false, 576, 1344, 1, false},
    {"i8 channel bf16 f32-scales", FS(I8, 0, false, F32), HM_BF16, HM_BF16, true, 832, 1056, 1, false},
    {"i8 g32 f16", FS(I8, 32, false, F16), HM_F16, HM_F16, false, 520, 992, 1, false},
    {"u3z g128 bf16", F(U3, 128, true), HM_BF16, HM_BF16, false, 1000, 1408, 1, false},
    {"u3 g64 f16", FS(U3, 64, false, F16), HM_F16, HM_F16, true, 576, 1344, 1, false},
    {"u2z g64 bf16", F(U2, 64, true), HM_BF16, HM_BF16, false, 704, 1024, 1, false},
    {"u2z g32 f16", FS(U2, 32, true, F16), HM_F16, HM_F16, false, 704, 1024, 1, false},
    {"u5z g128 bf16", F(U5, 128, true), HM_BF16, HM_BF16, false, 640, 1280, 1, false},
    {"u6 g64 f16", FS(U6, 64, false, F16), HM_F16, HM_F16, false, 640, 1280, 1, false},
    {"u7z channel bf16", F(U7, 0, true), HM_BF16, HM_BF16, false, 640, 1280, 1, false},
    {"bf16 unquantized", UNQ(BF16), HM_BF16, HM_BF16, true, 1000, 1400, 1, false},
    {"f16 unquantized", UNQ(F16), HM_F16, HM_F16, false, 576, 1344, 1, false},
    {"u4z g128 bf16 batch-invariant", F(U4, 128, true), HM_BF16, HM_BF16, true, 1000, 1408, 1, true},
};

static const int64_t m_list[] = {1, 7, 64, 333};

/* Runs one M of a case through run (its layer's forward, with what comes before it);
 * returns false (after printing) if it is wrong. */
static bool run_m_with(hm_rng *rng, const gt_case *c, const gt_layer_data *d, gt_run_fn run, void *ctx,
                       int64_t m) {
  void *a = gt_random(rng, c->act, m * c->k, 1.0f);
  void *out = gt_alloc((size_t)(m * c->n) * 2), *ref = gt_alloc((size_t)(m * c->n) * 2);
  hm_gemm_args args = {.type = HM_GEMM_DENSE, .m = m, .a = a};
  gt_reference(c, d, &args, m, ref);
  gt_device_run_with(engine, run, ctx, &args, m, c->k, m, c->n, c->experts, out);
  const double err = gt_compare(out, ref, m * c->n, c->out, c->n, c->name);
  const bool ok = err <= gt_tolerance(c);
  printf("%-34s N=%-5lld K=%-5lld M=%-5lld rel_err %.2e %s\n", c->name, (long long)c->n, (long long)c->k,
         (long long)m, err, ok ? "ok" : "FAIL");
  free(a);
  free(out);
  free(ref);
  return ok;
}

static bool run_m(hm_rng *rng, const gt_case *c, const gt_layer_data *d, hm_layer *l, int64_t m) {
  return run_m_with(rng, c, d, gt_forward, l, m);
}

static void dense_formats_match_reference(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("dense_formats_match_reference"));
  int failed = 0;
  for (size_t i = 0; i < HM_ARRAY_SIZE(cases); i++) {
    const gt_case *c = &cases[i];
    gt_layer_data d;
    gt_layer_data_make(&rng, c, &d);
    hm_layer *l = gt_layer_make(engine, c, &d);
    for (size_t j = 0; j < HM_ARRAY_SIZE(m_list); j++) failed += !run_m(&rng, c, &d, l, m_list[j]);
    if (i == 0) failed += !run_m(&rng, c, &d, l, 4096);
    hm_layer_destroy(l);
    gt_layer_data_free(&d);
  }
  if (failed) fail_msg("%d dense cases out of bound", failed);
}

/* Batch invariance: a row's bits do not depend on M (nor on which kernel M picks). */
static void batch_invariant_rows_do_not_depend_on_m(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("batch_invariant_rows_do_not_depend_on_m"));
  const gt_case *c = &cases[HM_ARRAY_SIZE(cases) - 1];
  gt_layer_data d;
  gt_layer_data_make(&rng, c, &d);
  hm_layer *l = gt_layer_make(engine, c, &d);
  const int64_t big = 2048;
  void *a = gt_random(&rng, c->act, big * c->k, 1.0f);
  void *full = gt_alloc((size_t)(big * c->n) * 2), *part = gt_alloc((size_t)(big * c->n) * 2);
  hm_gemm_args args = {.type = HM_GEMM_DENSE, .m = big, .a = a};
  gt_device_run(engine, l, &args, big, c->k, big, c->n, 1, full);
  const int64_t ms[] = {1, 7, 64, 333};
  for (size_t i = 0; i < HM_ARRAY_SIZE(ms); i++) {
    args.m = ms[i];
    gt_device_run(engine, l, &args, ms[i], c->k, ms[i], c->n, 1, part);
    if (memcmp(part, full, (size_t)(ms[i] * c->n) * 2) != 0)
      fail_msg("rows at M=%lld differ from the same rows at M=%lld", (long long)ms[i], (long long)big);
  }
  printf("batch-invariant rows identical at M = 1, 7, 64, 333, 2048\n");
  free(a);
  free(full);
  free(part);
  hm_layer_destroy(l);
  gt_layer_data_free(&d);
}

/* Stream-K sums its partials in k order: two runs give the same bits. */
static void stream_k_is_deterministic(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("stream_k_is_deterministic"));
  const gt_case *c = &cases[0];
  gt_layer_data d;
  gt_layer_data_make(&rng, c, &d);
  hm_layer *l = gt_layer_make(engine, c, &d);
  const int64_t m = 96;
  void *a = gt_random(&rng, c->act, m * c->k, 1.0f);
  void *x = gt_alloc((size_t)(m * c->n) * 2), *y = gt_alloc((size_t)(m * c->n) * 2);
  hm_gemm_args args = {.type = HM_GEMM_DENSE, .m = m, .a = a};
  gt_device_run(engine, l, &args, m, c->k, m, c->n, 1, x);
  gt_device_run(engine, l, &args, m, c->k, m, c->n, 1, y);
  assert_memory_equal(x, y, (size_t)(m * c->n) * 2);
  free(a);
  free(x);
  free(y);
  hm_layer_destroy(l);
  gt_layer_data_free(&d);
}

/*
 * Two layers back to back on one stream, the second reading the first's output: on
 * sm_90 the second launches programmatically (HUMMING_PDL) and may start before the
 * first ends, so this fails if a kernel reads its input before griddepcontrol.wait.
 * The first output is poisoned before the pair runs. The first is 8192 columns wide, so
 * that at one token it runs the decode tile alone on its SM, and names the second as the
 * layer after it (next_layer): it warms the second's weights in L2 on its way out.
 */
static void chained_layers_wait_for_their_input(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("chained_layers_wait_for_their_input"));
  const gt_case c1 = {"chain first", F(U4, 128, true), HM_BF16, HM_BF16, false, 8192, 1408, 1, false};
  const gt_case c2 = {"chain second", F(U4, 128, true), HM_BF16, HM_BF16, false, 1000, 8192, 1, false};
  gt_layer_data d1, d2;
  gt_layer_data_make(&rng, &c1, &d1);
  gt_layer_data_make(&rng, &c2, &d2);
  hm_layer *l1 = gt_layer_make(engine, &c1, &d1), *l2 = gt_layer_make(engine, &c2, &d2);
  hm_stream *s = NULL;
  HM_ASSERT_OK(hm_stream_create(engine, &s));
  const int64_t ms[] = {1, 64, 333};
  int failed = 0;
  for (size_t i = 0; i < HM_ARRAY_SIZE(ms); i++) {
    const int64_t m = ms[i];
    void *a = gt_random(&rng, c1.act, m * c1.k, 1.0f);
    const size_t mid_bytes = (size_t)(m * c1.n) * 2, out_bytes = (size_t)(m * c2.n) * 2;
    void *mid = gt_alloc(mid_bytes), *out = gt_alloc(out_bytes), *ref = gt_alloc(out_bytes);
    void *da = gt_upload(engine, a, (size_t)(m * c1.k) * 2), *dmid = NULL, *dout = NULL;
    HM_ASSERT_OK(hm_mem_alloc(engine, mid_bytes, &dmid));
    HM_ASSERT_OK(hm_mem_alloc(engine, out_bytes, &dout));
    HM_ASSERT_OK(hm_engine_memset(engine, dmid, 0xff, mid_bytes, s));
    HM_ASSERT_OK(hm_engine_memset(engine, dout, 0xff, out_bytes, s));
    hm_gemm_args first = {.type = HM_GEMM_DENSE, .m = m, .a = da, .c = dmid, .next_layer = l2};
    hm_gemm_args second = {.type = HM_GEMM_DENSE, .m = m, .a = dmid, .c = dout};
    HM_ASSERT_OK(hm_layer_forward(l1, &first, s));
    HM_ASSERT_OK(hm_layer_forward(l2, &second, s));
    HM_ASSERT_OK(hm_stream_synchronize(s));
    HM_ASSERT_OK(hm_mem_download(engine, mid, dmid, mid_bytes));
    HM_ASSERT_OK(hm_mem_download(engine, out, dout, out_bytes));
    hm_gemm_args host = {.type = HM_GEMM_DENSE, .m = m, .a = mid};
    gt_reference(&c2, &d2, &host, m, ref);
    const double err = gt_compare(out, ref, m * c2.n, c2.out, c2.n, c2.name);
    const bool ok = err <= gt_tolerance(&c2);
    printf("%-34s M=%-5lld rel_err %.2e %s\n", "chained layers", (long long)m, err, ok ? "ok" : "FAIL");
    failed += !ok;
    hm_mem_free(engine, da);
    hm_mem_free(engine, dmid);
    hm_mem_free(engine, dout);
    free(a);
    free(mid);
    free(out);
    free(ref);
  }
  hm_stream_destroy(s);
  hm_layer_destroy(l1);
  hm_layer_destroy(l2);
  gt_layer_data_free(&d1);
  gt_layer_data_free(&d2);
  if (failed) fail_msg("%d chained cases out of bound", failed);
}

/*
 * Shared memory left full of NaNs by the kernel before: the 8-row mma.sync tiles do not
 * copy the A rows a tile lacks (hm_skips_missing_rows), so those rows read whatever an
 * earlier kernel left, which must stay in rows no output takes. Every SM's shared memory
 * is filled with 0xff (NaN in bf16, f16 and fp8) right before each GEMM, on its stream,
 * at M = 1 and 7 (8-row tiles) and 9 (a 16-row one), through the copy plan (K a multiple
 * of bk) and the checked loads (K = 1408).
 */
static const char poison_source[] =
    "extern \"C\" __global__ void hm_poison_shared(unsigned bytes) {\n"
    "  extern __shared__ __align__(16) unsigned char smem[];\n"
    "  for (unsigned i = threadIdx.x * 16; i + 16 <= bytes; i += blockDim.x * 16)\n"
    "    *(uint4 *)(smem + i) = make_uint4(~0u, ~0u, ~0u, ~0u);\n"
    "}\n";

typedef struct poisoned_run {
  hm_kernel *poison;
  hm_layer *layer;
  hm_stream *stream;
} poisoned_run;

static void poison_then_forward(void *ctx, const hm_gemm_args *device_args) {
  const poisoned_run *r = ctx;
  unsigned bytes = (unsigned)hm_gemm_arch_smem_limit(engine->arch);
  void *args[] = {&bytes};
  /* Twice as many CTAs as SMs, each holding a whole SM's shared memory: every SM runs one. */
  const hm_launch_dims dims = {{(unsigned)engine->sm_count * 2, 1, 1}, {256, 1, 1}, bytes, {0}};
  HM_ASSERT_OK(hm_kernel_launch(r->poison, &dims, args, r->stream));
  HM_ASSERT_OK(hm_layer_forward(r->layer, device_args, r->stream));
  HM_ASSERT_OK(hm_stream_synchronize(r->stream));
}

static void stale_shared_memory_stays_out_of_live_rows(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("stale_shared_memory_stays_out_of_live_rows"));
  const gt_case cs[] = {
      {"stale smem, K tail", F(U4, 128, true), HM_BF16, HM_BF16, false, 1000, 1408, 1, false},
      {"stale smem, planned copies", F(U4, 128, true), HM_BF16, HM_BF16, true, 1024, 2048, 1, false},
      {"stale smem, u8 f16", FS(U8, 64, true, F16), HM_F16, HM_F16, false, 576, 1536, 1, false},
  };
  const hm_kernel_source src = {.name = "hm_poison_shared", .source = poison_source};
  poisoned_run r = {0};
  HM_ASSERT_OK(hm_kernel_get(engine, &src, &r.poison));
  HM_ASSERT_OK(hm_stream_create(engine, &r.stream));
  const int64_t ms[] = {1, 7, 9};
  int failed = 0;
  for (size_t i = 0; i < HM_ARRAY_SIZE(cs); i++) {
    const gt_case *c = &cs[i];
    gt_layer_data d;
    gt_layer_data_make(&rng, c, &d);
    r.layer = gt_layer_make(engine, c, &d);
    for (size_t j = 0; j < HM_ARRAY_SIZE(ms); j++)
      failed += !run_m_with(&rng, c, &d, poison_then_forward, &r, ms[j]);
    hm_layer_destroy(r.layer);
    gt_layer_data_free(&d);
  }
  hm_stream_destroy(r.stream);
  if (failed) fail_msg("%d runs after stale shared memory out of bound", failed);
}

int main(void) {
  engine = hm_test_cuda_engine_or_skip();
  if (engine == NULL) return HM_TEST_SKIP;
  printf("# device: %s\n", hm_engine_device_name(engine));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(dense_formats_match_reference),
      cmocka_unit_test(batch_invariant_rows_do_not_depend_on_m),
      cmocka_unit_test(stream_k_is_deterministic),
      cmocka_unit_test(chained_layers_wait_for_their_input),
      cmocka_unit_test(stale_shared_memory_stays_out_of_live_rows),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_engine_destroy(engine);
  hm_shutdown();
  return rc;
}
