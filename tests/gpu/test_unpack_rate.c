/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How fast an SM turns 8-bit and 4-bit weight codes into the f16 operands of mma.sync, the
 * work that bounds W4A8 decode on sm_90 (docs/PERF.md, nineteenth session): sm_90 has no
 * 8-bit mma.sync, so ptxas unpacks each fp8 register with two cvt.rn.f16x2.e4m3x2
 * (F2FP.UNPACK_B), four codes a word; the alternative widens eight e2m1 codes a word
 * straight into f16 pairs with shifts and LOP3s, each code's sign at bit 15 and its
 * exponent and mantissa at bits 11-9 (the value times 2^-14), from nibbles or from the
 * f16 codes the W4A8 kernel reads (hm_w4_widen_e2m1_f16; e2m1_code). Each thread converts a
 * stream of words (an LCG) on eight independent chains and XORs what it made into one
 * word; a small launch is checked against the host's conversion of every word, then a
 * large one is timed, beside the same loop converting nothing (its LCG and XORs alone).
 * Codes a us an SM, side by side, say which conversion a kernel should build on.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "engine.h"
#include "hm_test.h"
#include "kernels/jit.h"
#include "numfmt.h"

#define THREADS 256
#define CHAINS 8
#define LCG_A 1664525u
#define LCG_C 1013904223u
/* e4m3 codes without the NaN pattern (S.1111.111): the unpack's input mask. */
#define E4M3_FINITE 0x7e7e7e7eu

static const char unpack_text[] =
    "#include \"hm_mma8.cuh\"\n"
    "#include \"hm_w4a8_codes.cuh\"\n"
    "__device__ __forceinline__ unsigned hm_convert(unsigned w) {\n"
    "#if HM_CONVERSION == 0\n"
    "  return w;\n"
    "#elif HM_CONVERSION == 2\n"
    "  return (((w << 12) & 0x80008000u) | ((w << 9) & 0x0e000e00u)) ^\n"
    "         (((w << 8) & 0x80008000u) | ((w << 5) & 0x0e000e00u)) ^\n"
    "         (((w << 4) & 0x80008000u) | ((w << 1) & 0x0e000e00u)) ^\n"
    "         ((w & 0x80008000u) | ((w >> 3) & 0x0e000e00u));\n"
    "#elif HM_CONVERSION == 3\n"
    "  unsigned f[4];\n"
    "  hm_w4_widen_e2m1_f16(w, f);\n"
    "  return f[0] ^ f[1] ^ f[2] ^ f[3];\n"
    "#else\n"
    "  w &= HM_E4M3_FINITE;\n"
    "  return hm_e4m3x2_to_f16x2(w) ^ hm_e4m3x2_to_f16x2(w >> 16);\n"
    "#endif\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(HM_THREADS) hm_unpack_rate(int iters, unsigned *out) {\n"
    "  const unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  unsigned x[HM_CHAINS], acc = 0;\n"
    "#pragma unroll\n"
    "  for (int c = 0; c < HM_CHAINS; ++c) x[c] = tid * HM_CHAINS + c;\n"
    "  for (int i = 0; i < iters; ++i) {\n"
    "#pragma unroll\n"
    "    for (int c = 0; c < HM_CHAINS; ++c) {\n"
    "      acc ^= hm_convert(x[c]);\n"
    "      x[c] = x[c] * HM_LCG_A + HM_LCG_C;\n"
    "    }\n"
    "  }\n"
    "  out[tid] = acc;\n"
    "}\n";

typedef enum { CONVERT_NONE, CONVERT_E4M3, CONVERT_E2M1, CONVERT_E2M1_LANES } conversion_kind;

typedef struct conversion {
  const char *name;
  conversion_kind kind; /* the kernel's HM_CONVERSION */
  int codes;            /* codes a word yields */
} conversion;

static const conversion conversions[] = {
    {"none (the loop alone)", CONVERT_NONE, 0},
    {"fp8 unpack (cvt e4m3x2)", CONVERT_E4M3, 4},
    {"e2m1 -> f16 (shift, lop3)", CONVERT_E2M1, 8},
    {"e2m1 -> f16 (f16 codes)", CONVERT_E2M1_LANES, 8},
};

static hm_engine *engine;
static hm_stream *stream;

static uint16_t f16_of_e4m3(unsigned byte) {
  return hm_f16_from_f32(hm_e4m3_to_f32((uint8_t)byte));
}

/* The e2m1 code's value times 2^-14 in f16: what the widening puts in each half. */
static uint16_t f16_of_e2m1(unsigned code) {
  const unsigned e = (code >> 1) & 3u, m = code & 1u;
  const float v = e == 0 ? 0.5f * (float)m : ldexpf(1.0f + 0.5f * (float)m, (int)e - 1);
  return hm_f16_from_f32(ldexpf(code & 8u ? -v : v, -14));
}

/*
 * Code p of the low half of w: a nibble (sign at bit 3), or in 3-bit lanes, the magnitude
 * at bits 9-3p..11-3p and the sign at bit 15-p, so that the f16 pair p is w shifted left by
 * 3p and by p under two masks, and pair 0 is w under one.
 */
static unsigned e2m1_code(const conversion *c, unsigned w, int p) {
  if (c->kind == CONVERT_E2M1) return (w >> (4 * p)) & 0xfu;
  return ((w >> (15 - p)) & 1u) << 3 | ((w >> (9 - 3 * p)) & 7u);
}

/* The host's hm_convert: the f16 pairs of word w, XORed. */
static unsigned host_convert(const conversion *c, unsigned w) {
  unsigned acc = 0;
  if (c->kind == CONVERT_NONE) return w;
  if (c->kind == CONVERT_E4M3) {
    w &= E4M3_FINITE;
    for (int h = 0; h < 2; h++) {
      const unsigned pair = w >> (16 * h);
      acc ^= (unsigned)f16_of_e4m3(pair & 0xffu) | (unsigned)f16_of_e4m3((pair >> 8) & 0xffu) << 16;
    }
    return acc;
  }
  for (int p = 0; p < 4; p++)
    acc ^= (unsigned)f16_of_e2m1(e2m1_code(c, w, p)) | (unsigned)f16_of_e2m1(e2m1_code(c, w >> 16, p)) << 16;
  return acc;
}

static hm_kernel *conversion_kernel(const conversion *c) {
  char options[192];
  snprintf(
      options, sizeof(options),
      "-DHM_CONVERSION=%d -DHM_THREADS=%d -DHM_CHAINS=%du -DHM_LCG_A=%uu -DHM_LCG_C=%uu -DHM_E4M3_FINITE=%uu",
      (int)c->kind, THREADS, CHAINS, LCG_A, LCG_C, E4M3_FINITE);
  const hm_kernel_source src = {.name = "hm_unpack_rate", .source = unpack_text, .options = options};
  hm_kernel *k = NULL;
  HM_ASSERT_OK(hm_kernel_get(engine, &src, &k));
  return k;
}

typedef struct rate_run {
  hm_kernel *k;
  unsigned ctas;
  int iters;
  unsigned *out;
} rate_run;

static void launch(void *ctx, int call) {
  (void)call;
  rate_run *r = ctx;
  void *args[] = {&r->iters, &r->out};
  const hm_launch_dims dims = {{r->ctas, 1, 1}, {THREADS, 1, 1}, 0, {0}};
  HM_ASSERT_OK(hm_kernel_launch(r->k, &dims, args, stream));
}

/* Every thread's XOR of a small launch against the host's. */
static void check_outputs(const conversion *c, rate_run *r) {
  const size_t threads = (size_t)r->ctas * THREADS;
  launch(r, 0);
  unsigned *got = malloc(threads * sizeof(unsigned));
  assert_non_null(got);
  HM_ASSERT_OK(hm_stream_synchronize(stream));
  HM_ASSERT_OK(hm_mem_download(engine, got, r->out, threads * sizeof(unsigned)));
  size_t wrong = 0;
  for (size_t t = 0; t < threads; t++) {
    unsigned x[CHAINS], acc = 0;
    for (int ch = 0; ch < CHAINS; ch++) x[ch] = (unsigned)t * CHAINS + (unsigned)ch;
    for (int i = 0; i < r->iters; i++)
      for (int ch = 0; ch < CHAINS; ch++) {
        acc ^= host_convert(c, x[ch]);
        x[ch] = x[ch] * LCG_A + LCG_C;
      }
    wrong += got[t] != acc;
  }
  free(got);
  if (wrong) fail_msg("%s: %zu of %zu threads differ from the host", c->name, wrong, threads);
}

static void conversion_rates(void **state) {
  (void)state;
  const int sms = engine->sm_count;
  unsigned *out = NULL;
  HM_ASSERT_OK(hm_mem_alloc(engine, (size_t)sms * 8 * THREADS * sizeof(unsigned), (void **)&out));
  printf("# device: %s, %d SMs; %d threads a CTA, %d chains a thread; median of 10 launches\n",
         hm_engine_device_name(engine), sms, THREADS, CHAINS);
  printf("# %-26s %8s %6s %10s %14s\n", "conversion", "ctas/SM", "regs", "us", "codes/us/SM");
  for (size_t i = 0; i < HM_ARRAY_SIZE(conversions); i++) {
    const conversion *c = &conversions[i];
    if (c->kind == CONVERT_E4M3 && engine->arch < 89) continue; /* no fp8 conversions before sm_89 */
    rate_run small = {conversion_kernel(c), (unsigned)sms, 16, out};
    check_outputs(c, &small);
    int regs = 0, shared = 0, threads = 0;
    HM_ASSERT_OK(hm_kernel_attributes(small.k, &regs, &shared, &threads));
    for (int ctas = 2; ctas <= 8; ctas *= 2) {
      rate_run big = {small.k, (unsigned)(sms * ctas), 4096, out};
      const double us = hm_test_median_ms(engine, stream, 1, 10, launch, &big) * 1e3;
      const double codes = (double)big.ctas * THREADS * big.iters * CHAINS * c->codes;
      printf("  %-26s %8d %6d %10.1f %14.0f\n", c->name, ctas, regs, us, c->codes ? codes / us / sms : 0.0);
    }
  }
  hm_mem_free(engine, out);
}

int main(void) {
  engine = hm_test_cuda_engine_or_skip();
  if (engine == NULL) return HM_TEST_SKIP;
  if (hm_stream_create(engine, &stream) != HM_OK) return 1;
  const struct CMUnitTest tests[] = {cmocka_unit_test(conversion_rates)};
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_stream_destroy(stream);
  hm_engine_destroy(engine);
  hm_shutdown();
  return rc;
}
