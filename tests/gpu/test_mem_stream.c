/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How fast an SM can stream a read-only buffer from HBM, by the three ways our GEMM
 * kernels can fetch weights: plain 16-byte loads, a cp.async ring, and a bulk-copy ring
 * on mbarriers (sm_90). Sizes are those of the decode GEMMs (32 MiB: dense W4A16
 * N = K = 8192; 128 MiB: an MoE layer's active experts) and 1 GiB, the copy-bandwidth
 * size. Each kernel sums the buffer's 32-bit words and every sum is checked against the
 * host's, so a timed kernel read every byte. CUDA-event medians over windows of one
 * 1 GiB buffer in turn, so that a timed run finds its window cold in L2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine.h"
#include "hm_test.h"
#include "kernels/jit.h"

#define REPS 20
#define BUF_BYTES ((size_t)1 << 30)

/*
 * One source, three kernels; HM_* macros pick the variant. Each CTA writes the sum of
 * what it read to out[blockIdx.x]. The ring kernels read stage-sized tiles c, c + grid,
 * ... and read back from shared memory a chunk another thread copied, so that the
 * CTA barrier sits where the GEMM mainloop has it.
 */
static const char probe_text[] =
    "#include \"hm_mbarrier.cuh\"\n"
    "__device__ __forceinline__ unsigned hm_sum4(uint4 v) { return v.x + v.y + v.z + v.w; }\n"
    "__device__ __forceinline__ void hm_block_sum(unsigned s, unsigned *out) {\n"
    "  __shared__ unsigned part[32];\n"
    "  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);\n"
    "  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;\n"
    "  __syncthreads();\n"
    "  if (threadIdx.x == 0) {\n"
    "    unsigned t = 0;\n"
    "    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) t += part[w];\n"
    "    out[blockIdx.x] = t;\n"
    "  }\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(HM_THREADS) hm_probe_ld(const uint4 *src, long long n16,\n"
    "                                                                       unsigned *out) {\n"
    "  unsigned s = 0;\n"
    "  const long long step = (long long)gridDim.x * HM_THREADS * HM_UNROLL;\n"
    "  for (long long i = (long long)blockIdx.x * HM_THREADS * HM_UNROLL + threadIdx.x; i < n16; i += step) {\n"
    "    uint4 v[HM_UNROLL];\n"
    "#pragma unroll\n"
    "    for (int u = 0; u < HM_UNROLL; ++u) {\n"
    "      const long long j = i + (long long)u * HM_THREADS;\n"
    "      v[u] = j < n16 ? __ldg(src + j) : make_uint4(0, 0, 0, 0);\n"
    "    }\n"
    "#pragma unroll\n"
    "    for (int u = 0; u < HM_UNROLL; ++u) s += hm_sum4(v[u]);\n"
    "  }\n"
    "  hm_block_sum(s, out);\n"
    "}\n"
    "__device__ __forceinline__ unsigned hm_stage_sum(const unsigned char *st) {\n"
    "  unsigned s = 0;\n"
    "  for (int c = (threadIdx.x + 32) % HM_THREADS; c < HM_STAGE / 16; c += HM_THREADS)\n"
    "    s += hm_sum4(*(const uint4 *)(st + c * 16));\n"
    "  return s;\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(HM_THREADS) hm_probe_cp(const unsigned char *src,\n"
    "                                                                       long long tiles, unsigned *out) {\n"
    "  extern __shared__ __align__(128) unsigned char ring[];\n"
    "  const long long mine = tiles > blockIdx.x ? (tiles - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;\n"
    "  unsigned s = 0;\n"
    "  for (long long j = 0; j < mine + HM_STAGES - 1; ++j) {\n"
    "    if (j < mine) {\n"
    "      const unsigned char *g = src + (blockIdx.x + j * gridDim.x) * (long long)HM_STAGE;\n"
    "      unsigned char *st = ring + (j % HM_STAGES) * HM_STAGE;\n"
    "      for (int c = threadIdx.x; c < HM_STAGE / 16; c += HM_THREADS) hm_cp_async16(st + c * 16, g + c * 16, true);\n"
    "    }\n"
    "    hm_cp_async_commit();\n"
    "    const long long i = j - (HM_STAGES - 1);\n"
    "    if (i < 0) continue;\n"
    "    hm_cp_async_wait<HM_STAGES - 1>();\n"
    "    __syncthreads();\n"
    "    s += hm_stage_sum(ring + (i % HM_STAGES) * HM_STAGE);\n"
    "    __syncthreads();\n"
    "  }\n"
    "  hm_block_sum(s, out);\n"
    "}\n"
    "#if __CUDA_ARCH__ >= 900\n"
    "extern \"C\" __global__ void __launch_bounds__(HM_THREADS) hm_probe_bulk(const unsigned char *src,\n"
    "                                                                         long long tiles, unsigned *out) {\n"
    "  extern __shared__ __align__(128) unsigned char ring[];\n"
    "  __shared__ __align__(8) unsigned long long full[HM_STAGES];\n"
    "  if (threadIdx.x == 0) {\n"
    "    for (int i = 0; i < HM_STAGES; ++i) hm_mbar_init(&full[i], 1);\n"
    "    hm_mbar_init_fence();\n"
    "  }\n"
    "  __syncthreads();\n"
    "  const long long mine = tiles > blockIdx.x ? (tiles - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;\n"
    "  unsigned s = 0;\n"
    "  for (long long j = 0; j < mine + HM_STAGES - 1; ++j) {\n"
    "    if (j < mine && threadIdx.x == 0) {\n"
    "      const unsigned char *g = src + (blockIdx.x + j * gridDim.x) * (long long)HM_STAGE;\n"
    "      unsigned char *st = ring + (j % HM_STAGES) * HM_STAGE;\n"
    "      unsigned long long *bar = &full[j % HM_STAGES];\n"
    "      hm_mbar_arrive_expect_tx(bar, HM_STAGE);\n"
    "      for (int c = 0; c < HM_STAGE / HM_PIECE; ++c) hm_bulk_copy(st + c * HM_PIECE, g + c * HM_PIECE, HM_PIECE, bar);\n"
    "    }\n"
    "    const long long i = j - (HM_STAGES - 1);\n"
    "    if (i < 0) continue;\n"
    "    hm_mbar_wait(&full[i % HM_STAGES], (unsigned)(i / HM_STAGES) & 1);\n"
    "    s += hm_stage_sum(ring + (i % HM_STAGES) * HM_STAGE);\n"
    "    __syncthreads();\n"
    "  }\n"
    "  hm_block_sum(s, out);\n"
    "}\n"
    "#endif\n";

typedef enum { PROBE_LD, PROBE_CP, PROBE_BULK } probe_kind;

typedef struct probe {
  probe_kind kind;
  int threads, ctas_per_sm;
  int unroll;       /* PROBE_LD: 16-byte loads in flight a thread */
  int stage, stages; /* ring kernels: bytes a stage, stages */
  int piece;         /* PROBE_BULK: bytes a bulk copy */
} probe;

static const probe probes[] = {
    {PROBE_LD, 256, 2, 4, 0, 0, 0},         {PROBE_LD, 256, 2, 8, 0, 0, 0},
    {PROBE_LD, 256, 4, 8, 0, 0, 0},         {PROBE_LD, 512, 4, 4, 0, 0, 0},
    {PROBE_CP, 256, 1, 0, 16384, 4, 0},     {PROBE_CP, 256, 2, 0, 16384, 4, 0},
    {PROBE_CP, 256, 1, 0, 16384, 8, 0},     {PROBE_CP, 256, 1, 0, 32768, 6, 0},
    {PROBE_BULK, 256, 1, 0, 16384, 4, 4096}, {PROBE_BULK, 256, 2, 0, 16384, 4, 4096},
    {PROBE_BULK, 256, 1, 0, 16384, 8, 4096}, {PROBE_BULK, 256, 1, 0, 32768, 6, 4096},
    {PROBE_BULK, 256, 1, 0, 32768, 6, 32768},
};

static hm_engine *engine;
static hm_stream *stream;

static const char *kind_name(probe_kind k) { return k == PROBE_LD ? "ld" : k == PROBE_CP ? "cp.async" : "bulk"; }

static hm_kernel *probe_kernel(const probe *p) {
  char options[160];
  snprintf(options, sizeof(options), "-DHM_THREADS=%d -DHM_UNROLL=%d -DHM_STAGE=%d -DHM_STAGES=%d -DHM_PIECE=%d",
           p->threads, p->unroll ? p->unroll : 1, p->stage ? p->stage : 16, p->stages ? p->stages : 2,
           p->piece ? p->piece : 16);
  const char *names[] = {"hm_probe_ld", "hm_probe_cp", "hm_probe_bulk"};
  const hm_kernel_source src = {.name = names[p->kind], .source = probe_text, .options = options};
  hm_kernel *k = NULL;
  HM_ASSERT_OK(hm_kernel_get(engine, &src, &k));
  return k;
}

/* One launch of probe p over bytes at src, per-CTA sums into out. */
static void probe_launch(hm_kernel *k, const probe *p, const unsigned char *src, size_t bytes, unsigned *out) {
  const unsigned grid = (unsigned)(engine->sm_count * p->ctas_per_sm);
  long long count = p->kind == PROBE_LD ? (long long)(bytes / 16) : (long long)(bytes / (size_t)p->stage);
  void *args[] = {&src, &count, &out};
  const hm_launch_dims dims = {
      {grid, 1, 1}, {(unsigned)p->threads, 1, 1}, p->kind == PROBE_LD ? 0 : (size_t)p->stage * p->stages, {0}};
  HM_ASSERT_OK(hm_kernel_launch(k, &dims, args, stream));
}

/* The timed runs of one probe and size: windows of the buffer in turn. */
typedef struct probe_run {
  hm_kernel *k;
  const probe *p;
  const unsigned char *buf;
  size_t bytes, windows;
  unsigned *out;
} probe_run;

static void timed_probe(void *ctx, int call) {
  const probe_run *r = ctx;
  probe_launch(r->k, r->p, r->buf + (size_t)call % r->windows * r->bytes, r->bytes, r->out);
}

static unsigned device_sum(const unsigned *out, int ctas) {
  unsigned *host = calloc((size_t)ctas, sizeof(unsigned));
  assert_non_null(host);
  HM_ASSERT_OK(hm_stream_synchronize(stream));
  HM_ASSERT_OK(hm_mem_download(engine, host, out, (size_t)ctas * sizeof(unsigned)));
  unsigned s = 0;
  for (int i = 0; i < ctas; i++) s += host[i];
  free(host);
  return s;
}

static void stream_ceilings(void **state) {
  (void)state;
  const size_t words = BUF_BYTES / 4;
  unsigned *host = malloc(BUF_BYTES);
  assert_non_null(host);
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("stream_ceilings"));
  for (size_t i = 0; i < words; i++) host[i] = (unsigned)hm_rng_next(&rng);
  unsigned char *buf = NULL;
  unsigned *out = NULL;
  HM_ASSERT_OK(hm_mem_alloc(engine, BUF_BYTES, (void **)&buf));
  HM_ASSERT_OK(hm_mem_upload(engine, buf, host, BUF_BYTES));
  HM_ASSERT_OK(hm_mem_alloc(engine, 65536 * sizeof(unsigned), (void **)&out));
  const size_t sizes[] = {(size_t)32 << 20, (size_t)128 << 20, BUF_BYTES};
  unsigned expect[HM_ARRAY_SIZE(sizes)][8] = {{0}};
  for (size_t s = 0; s < HM_ARRAY_SIZE(sizes); s++)
    for (size_t j = 0; j < words && j < 8 * (sizes[s] / 4); j++) expect[s][j / (sizes[s] / 4)] += host[j];
  printf("# device: %s, %d SMs; read-only streams, median of %d (window-rotated, cold L2)\n",
         hm_engine_device_name(engine), engine->sm_count, REPS);
  printf("# %-8s %7s %5s %6s %7s %6s %6s %5s", "kind", "threads", "ctas", "unroll", "stage", "stages", "piece",
         "regs");
  for (size_t s = 0; s < HM_ARRAY_SIZE(sizes); s++) printf("  %4zuMiB_us  GB/s", sizes[s] >> 20);
  printf("\n");
  int wrong = 0;
  for (size_t i = 0; i < HM_ARRAY_SIZE(probes); i++) {
    const probe *p = &probes[i];
    if (p->kind == PROBE_BULK && engine->arch < 90) continue;
    hm_kernel *k = probe_kernel(p);
    int regs = 0, shared = 0, threads = 0;
    HM_ASSERT_OK(hm_kernel_attributes(k, &regs, &shared, &threads));
    printf("  %-8s %7d %5d %6d %7d %6d %6d %5d", kind_name(p->kind), p->threads, p->ctas_per_sm, p->unroll,
           p->stage, p->stages, p->piece, regs);
    const int ctas = engine->sm_count * p->ctas_per_sm;
    for (size_t s = 0; s < HM_ARRAY_SIZE(sizes); s++) {
      const size_t windows = BUF_BYTES / sizes[s] < 8 ? BUF_BYTES / sizes[s] : 8; /* 8 x 32 MiB > L2 */
      for (size_t w = 0; w < windows; w++) {
        probe_launch(k, p, buf + w * sizes[s], sizes[s], out);
        const unsigned got = device_sum(out, ctas);
        if (got != expect[s][w]) {
          printf("\n  WRONG: %s window %zu of %zu MiB: sum %08x, host %08x\n", kind_name(p->kind), w, sizes[s] >> 20,
                 got, expect[s][w]);
          wrong++;
        }
      }
      probe_run run = {k, p, buf, sizes[s], windows, out};
      const double us = hm_test_median_ms(engine, stream, 0, REPS, timed_probe, &run) * 1e3;
      printf("  %10.2f %5.0f", us, (double)sizes[s] / (us * 1e-6) / 1e9);
    }
    printf("\n");
    fflush(stdout);
  }
  hm_mem_free(engine, buf);
  hm_mem_free(engine, out);
  free(host);
  if (wrong) fail_msg("%d streamed sums differ from the host's", wrong);
}

int main(void) {
  engine = hm_test_cuda_engine_or_skip();
  if (engine == NULL) return HM_TEST_SKIP;
  if (hm_stream_create(engine, &stream) != HM_OK) return 1;
  const struct CMUnitTest tests[] = {cmocka_unit_test(stream_ceilings)};
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_stream_destroy(stream);
  hm_engine_destroy(engine);
  hm_shutdown();
  return rc;
}
