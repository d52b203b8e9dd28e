/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NCCL path on one GPU (a world of one, as mpirun -np 1 makes): dispatch, identity
 * experts and combine give bit for bit what the host path (MPI) gives on the same
 * tokens, for bf16 and fp8 payloads and both layouts, bootstrapped by MPI or by a
 * host-made NCCL id; the benchmark's own check passes; and an NCCL call that never
 * completes makes create fail within the timeout instead of hanging.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/nccl_lib.h"
#include "hm_test.h"
#include "numfmt.h"

#define HIDDEN 256
#define EXPERTS 8
#define TOP_K 4
#define TOKENS 64

static hm_engine *gpu, *host;
static uint16_t x[TOKENS * HIDDEN];
static int32_t ids[TOKENS * TOP_K];
static float w[TOKENS * TOP_K];

static hm_comm_config config(hm_comm_payload payload, hm_comm_layout layout) {
  hm_comm_config cfg = HM_COMM_CONFIG_INIT;
  cfg.experts = EXPERTS, cfg.hidden = HIDDEN, cfg.top_k = TOP_K, cfg.max_tokens = TOKENS;
  cfg.payload = payload, cfg.layout = layout, cfg.combine_dtype = HM_F32, cfg.block_m = 8;
  return cfg;
}

/* dispatch -> identity experts -> combine; y [TOKENS, HIDDEN] f32 on the host. */
static void round_trip(hm_engine *e, hm_comm *comm, float *y) {
  void *dx, *dids, *dw, *dy;
  HM_ASSERT_OK(hm_mem_alloc(e, sizeof(x), &dx));
  HM_ASSERT_OK(hm_mem_alloc(e, sizeof(ids), &dids));
  HM_ASSERT_OK(hm_mem_alloc(e, sizeof(w), &dw));
  HM_ASSERT_OK(hm_mem_alloc(e, sizeof(float) * TOKENS * HIDDEN, &dy));
  HM_ASSERT_OK(hm_mem_upload(e, dx, x, sizeof(x)));
  HM_ASSERT_OK(hm_mem_upload(e, dids, ids, sizeof(ids)));
  HM_ASSERT_OK(hm_mem_upload(e, dw, w, sizeof(w)));
  hm_stream *s = NULL;
  hm_comm_batch *b = NULL;
  HM_ASSERT_OK(hm_stream_create(e, &s));
  HM_ASSERT_OK(hm_comm_batch_create(comm, &b));
  hm_comm_tokens t = {TOKENS, dx, dids, dw};
  hm_comm_expert_batch eb;
  HM_ASSERT_OK(hm_comm_dispatch(b, &t, s, &eb));
  HM_ASSERT_OK(hm_comm_loopback(b, s));
  HM_ASSERT_OK(hm_comm_combine(b, dy, s));
  HM_ASSERT_OK(hm_comm_synchronize(comm, s));
  HM_ASSERT_OK(hm_mem_download(e, y, dy, sizeof(float) * TOKENS * HIDDEN));
  hm_comm_batch_destroy(b);
  hm_stream_destroy(s);
  hm_mem_free(e, dx), hm_mem_free(e, dids), hm_mem_free(e, dw), hm_mem_free(e, dy);
}

static void same_as_host(hm_comm *gpu_comm, hm_comm_payload payload, hm_comm_layout layout) {
  static float y_gpu[TOKENS * HIDDEN], y_host[TOKENS * HIDDEN];
  hm_comm_config cfg = config(payload, layout);
  hm_comm *host_comm = NULL;
  HM_ASSERT_OK(hm_comm_create_mpi(host, &cfg, &host_comm));
  round_trip(host, host_comm, y_host);
  round_trip(gpu, gpu_comm, y_gpu);
  hm_comm_destroy(host_comm);
  if (memcmp(y_gpu, y_host, sizeof(y_gpu)) != 0)
    fail_msg("payload %d layout %d: GPU differs from host, relative error %g", (int)payload, (int)layout,
             hm_rel_error(y_gpu, y_host, TOKENS * HIDDEN));
  /* Every slot of a token carries its row: x * sum(w) up to f32 rounding for bf16. */
  if (payload == HM_COMM_PAYLOAD_BF16)
    for (int t = 0; t < TOKENS; t++) {
      float sum = 0;
      for (int j = 0; j < TOP_K; j++)
        if (ids[t * TOP_K + j] >= 0) sum += w[t * TOP_K + j];
      for (int c = 0; c < HIDDEN; c++) {
        float want = hm_bf16_to_f32(x[t * HIDDEN + c]) * sum;
        assert_true(fabsf(y_host[t * HIDDEN + c] - want) <= 1e-6f * fabsf(want));
      }
    }
}

static void nccl_id_path_matches_host(void **state) {
  (void)state;
  hm_comm_payload payloads[2] = {HM_COMM_PAYLOAD_BF16, HM_COMM_PAYLOAD_FP8};
  hm_comm_layout layouts[2] = {HM_COMM_LAYOUT_CONTIGUOUS, HM_COMM_LAYOUT_MASKED};
  for (int p = 0; p < (hm_engine_arch(gpu) >= 89 ? 2 : 1); p++)
    for (int l = 0; l < 2; l++) {
      hm_comm_config cfg = config(payloads[p], layouts[l]);
      hm_comm_nccl_id id;
      hm_comm *comm = NULL;
      HM_ASSERT_OK(hm_comm_nccl_id_create(&id));
      HM_ASSERT_OK(hm_comm_create_nccl(gpu, &cfg, &id, 0, 1, &comm));
      printf("# %s\n", hm_comm_binding(comm));
      same_as_host(comm, payloads[p], layouts[l]);
      hm_comm_destroy(comm);
    }
}

static void mpi_bootstrap_matches_host(void **state) {
  (void)state;
  hm_comm_config cfg = config(HM_COMM_PAYLOAD_BF16, HM_COMM_LAYOUT_CONTIGUOUS);
  hm_comm *comm = NULL;
  HM_ASSERT_OK(hm_comm_create_mpi(gpu, &cfg, &comm));
  same_as_host(comm, HM_COMM_PAYLOAD_BF16, HM_COMM_LAYOUT_CONTIGUOUS);
  hm_comm_destroy(comm);
}

static void benchmark_checks_itself(void **state) {
  (void)state;
  hm_comm_config cfg = config(HM_COMM_PAYLOAD_BF16, HM_COMM_LAYOUT_CONTIGUOUS);
  cfg.combine_dtype = HM_BF16;
  hm_comm *comm = NULL;
  HM_ASSERT_OK(hm_comm_create_mpi(gpu, &cfg, &comm));
  hm_comm_bench_row rows[16];
  int n = 0;
  HM_ASSERT_OK(hm_comm_bench(comm, 1, TOKENS, 3, 1, rows, 16, &n));
  assert_int_equal(n, hm_engine_arch(gpu) >= 89 ? 14 : 7);
  for (int i = 0; i < n; i++) {
    printf("# T=%lld %s dispatch %.1f us %.2f GB/s combine %.1f us all-to-all %.1f us wrong %lld\n",
           (long long)rows[i].tokens, rows[i].payload == HM_COMM_PAYLOAD_FP8 ? "fp8" : "bf16",
           rows[i].dispatch_us, rows[i].dispatch_gbps, rows[i].combine_us, rows[i].alltoall_us,
           (long long)rows[i].wrong);
    assert_int_equal(rows[i].wrong, 0);
  }
  hm_comm_destroy(comm);
}

static ncclResult_t never_done(ncclComm_t comm, ncclResult_t *state) {
  (void)comm;
  *state = ncclInProgress;
  return ncclSuccess;
}

/* Last: the communicator that fails leaves MPI marked failed (no finalize). */
static void stuck_init_times_out(void **state) {
  (void)state;
  hm_comm_config cfg = config(HM_COMM_PAYLOAD_BF16, HM_COMM_LAYOUT_CONTIGUOUS);
  cfg.timeout_s = 2;
  hm_comm_nccl_id id;
  HM_ASSERT_OK(hm_comm_nccl_id_create(&id));
  __typeof__(hm_nccl.ncclCommGetAsyncError) real = hm_nccl.ncclCommGetAsyncError;
  hm_nccl.ncclCommGetAsyncError = never_done;
  hm_comm *comm = NULL;
  hm_status st = hm_comm_create_nccl(gpu, &cfg, &id, 0, 1, &comm);
  hm_nccl.ncclCommGetAsyncError = real;
  assert_int_equal(st, HM_TIMEOUT);
  assert_null(comm);
  assert_non_null(
      strstr(hm_last_error(), "rank 0: NCCL init (every rank must join) did not finish within 2 s"));
}

int main(int argc, char **argv) {
  gpu = hm_test_cuda_engine_or_skip();
  if (gpu == NULL) return HM_TEST_SKIP;
  hm_comm_world world;
  if (hm_comm_mpi_init(&argc, &argv, &world) != HM_OK || world.size != 1) {
    fprintf(stderr, "FAIL: needs a world of one (mpirun -np 1 or none): %s\n", hm_last_error());
    return 1;
  }
  host = hm_test_host_engine();
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("comm_nccl"));
  for (int i = 0; i < TOKENS * HIDDEN; i++) x[i] = hm_bf16_from_f32(hm_rng_normal(&rng));
  for (int t = 0; t < TOKENS; t++)
    for (int j = 0; j < TOP_K; j++) {
      ids[t * TOP_K + j] = (t * 3 + j * 2) % EXPERTS;
      w[t * TOP_K + j] = hm_rng_uniform(&rng, 0.1f, 1.0f);
    }
  ids[5 * TOP_K + 2] = -1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(nccl_id_path_matches_host),
      cmocka_unit_test(mpi_bootstrap_matches_host),
      cmocka_unit_test(benchmark_checks_itself),
      cmocka_unit_test(stuck_init_times_out),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  hm_engine_destroy(host);
  hm_engine_destroy(gpu);
  hm_shutdown();
  return failed ? 1 : 0;
}
