/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The distributed MoE layer on one GPU (a world of one over NCCL, as mpirun -np 1
 * makes): the dispatch's self-send, the scatter into the expert layout, the grouped
 * expert FFN, the gather and the combine must give what the single-rank layer gives on
 * the host backend, with the router and a shared expert, in bf16, w4a16 and (sm_89+)
 * w8a8-fp8 with fp8 rows on the wire, contiguous and masked layouts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hm_test.h"
#include "numfmt.h"

#define HIDDEN 256
#define INTER 256
#define EXPERTS 16
#define TOP_K 4
#define TOKENS 48

static hm_engine *gpu, *host;
static hm_stream *gpu_stream, *host_stream;
static float *gate_up, *down, *shared_gate_up, *shared_down;
static uint16_t x[TOKENS * HIDDEN];
static float logits[TOKENS * EXPERTS];

static hm_moe_config layer_config(const char *scheme) {
  hm_moe_config cfg = HM_MOE_CONFIG_INIT;
  cfg.hidden = HIDDEN;
  cfg.intermediate = INTER;
  cfg.router.experts = EXPERTS;
  cfg.router.top_k = TOP_K;
  cfg.router.renormalize = true;
  cfg.shared_experts = 1;
  HM_ASSERT_OK(hm_quant_scheme_parse(scheme, &cfg.scheme));
  return cfg;
}

/* y [TOKENS, HIDDEN] of the single-rank layer on the host. */
static void host_reference(const hm_moe_config *cfg, uint16_t *y) {
  hm_moe_layer *layer = NULL;
  HM_ASSERT_OK(hm_moe_layer_create(host, cfg, &layer));
  HM_ASSERT_OK(hm_moe_layer_quantize(layer, gate_up, down));
  HM_ASSERT_OK(hm_moe_layer_quantize_shared(layer, shared_gate_up, shared_down));
  HM_ASSERT_OK(hm_moe_layer_transform(layer, host_stream));
  hm_moe_forward_args a = {.tokens = TOKENS, .x = x, .router_logits = logits, .y = y};
  HM_ASSERT_OK(hm_moe_layer_forward(layer, &a, host_stream));
  HM_ASSERT_OK(hm_stream_synchronize(host_stream));
  hm_moe_layer_destroy(layer);
}

/* Whether the single-GPU layer can be built for cfg (W8A8 kernels land after W4A16). */
static bool gpu_has_kernels(const hm_moe_config *cfg) {
  hm_moe_layer *layer = NULL;
  hm_status st = hm_moe_layer_create(gpu, cfg, &layer);
  hm_moe_layer_destroy(layer);
  if (st != HM_UNSUPPORTED) HM_ASSERT_OK(st);
  return st == HM_OK;
}

/* The same tokens through the distributed layer on the GPU; two forwards, the second compared. */
static void gpu_dist(const hm_moe_config *cfg, hm_comm_payload payload, hm_comm_layout layout, uint16_t *y) {
  hm_comm_config cc = HM_COMM_CONFIG_INIT;
  cc.experts = EXPERTS, cc.hidden = HIDDEN, cc.intermediate = INTER, cc.top_k = TOP_K, cc.max_tokens = TOKENS;
  cc.payload = payload, cc.layout = layout;
  hm_comm_nccl_id id;
  hm_comm *comm = NULL;
  hm_moe_dist *d = NULL;
  HM_ASSERT_OK(hm_comm_nccl_id_create(&id));
  HM_ASSERT_OK(hm_comm_create_nccl(gpu, &cc, &id, 0, 1, &comm));
  HM_ASSERT_OK(hm_moe_dist_create(gpu, comm, cfg, &d));
  HM_ASSERT_OK(hm_moe_dist_quantize(d, gate_up, down));
  HM_ASSERT_OK(hm_moe_dist_quantize_shared(d, shared_gate_up, shared_down));
  HM_ASSERT_OK(hm_moe_dist_transform(d, gpu_stream));
  void *dx, *dy, *dl;
  HM_ASSERT_OK(hm_mem_alloc(gpu, sizeof(x), &dx));
  HM_ASSERT_OK(hm_mem_alloc(gpu, sizeof(x), &dy));
  HM_ASSERT_OK(hm_mem_alloc(gpu, sizeof(logits), &dl));
  HM_ASSERT_OK(hm_mem_upload(gpu, dx, x, sizeof(x)));
  HM_ASSERT_OK(hm_mem_upload(gpu, dl, logits, sizeof(logits)));
  hm_moe_forward_args a = {.tokens = TOKENS, .x = dx, .router_logits = dl, .y = dy};
  for (int i = 0; i < 2; i++) HM_ASSERT_OK(hm_moe_dist_forward(d, &a, gpu_stream));
  HM_ASSERT_OK(hm_comm_synchronize(comm, gpu_stream));
  HM_ASSERT_OK(hm_mem_download(gpu, y, dy, sizeof(x)));
  hm_mem_free(gpu, dx), hm_mem_free(gpu, dy), hm_mem_free(gpu, dl);
  hm_moe_dist_destroy(d);
  hm_comm_destroy(comm);
}

static void compare(const uint16_t *got, const uint16_t *want, double tol, const char *what) {
  static float g[TOKENS * HIDDEN], r[TOKENS * HIDDEN];
  for (int i = 0; i < TOKENS * HIDDEN; i++) g[i] = hm_bf16_to_f32(got[i]), r[i] = hm_bf16_to_f32(want[i]);
  double err = hm_rel_error(g, r, TOKENS * HIDDEN);
  printf("# %s: relative error %.3g\n", what, err);
  if (!(err <= tol)) fail_msg("%s: relative error %g > %g against the host layer", what, err, tol);
}

static void matches_host_layer(void **state) {
  (void)state;
  static uint16_t want[TOKENS * HIDDEN], got[TOKENS * HIDDEN];
  const struct {
    const char *scheme;
    hm_comm_payload payload;
    int min_arch;
    double tol;
  } cases[] = {{"bf16", HM_COMM_PAYLOAD_BF16, 80, 1e-2},
               {"w4a16", HM_COMM_PAYLOAD_BF16, 80, 1e-2},
               {"w8a8-fp8", HM_COMM_PAYLOAD_FP8, 89, 3e-2}};
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    if (hm_engine_arch(gpu) < cases[c].min_arch) continue;
    hm_moe_config cfg = layer_config(cases[c].scheme);
    if (!gpu_has_kernels(&cfg)) {
      printf("# %s: no CUDA kernel for this scheme on this device, case not run\n", cases[c].scheme);
      continue;
    }
    host_reference(&cfg, want);
    for (int masked = 0; masked < 2; masked++) {
      gpu_dist(&cfg, cases[c].payload, masked ? HM_COMM_LAYOUT_MASKED : HM_COMM_LAYOUT_CONTIGUOUS, got);
      char what[96];
      snprintf(what, sizeof(what), "%s %s", cases[c].scheme, masked ? "masked" : "contiguous");
      compare(got, want, cases[c].tol, what);
    }
  }
}

static float *random_f32(hm_rng *rng, size_t n, float scale) {
  float *v = malloc(n * sizeof(float));
  hm_rng_fill_normal(rng, v, n, scale);
  return v;
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
  if (hm_stream_create(gpu, &gpu_stream) != HM_OK || hm_stream_create(host, &host_stream) != HM_OK) {
    fprintf(stderr, "FAIL: streams: %s\n", hm_last_error());
    return 1;
  }
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_dist_gpu"));
  gate_up = random_f32(&rng, (size_t)EXPERTS * 2 * INTER * HIDDEN, 0.06f);
  down = random_f32(&rng, (size_t)EXPERTS * HIDDEN * INTER, 0.06f);
  shared_gate_up = random_f32(&rng, (size_t)2 * INTER * HIDDEN, 0.06f);
  shared_down = random_f32(&rng, (size_t)HIDDEN * INTER, 0.06f);
  for (int i = 0; i < TOKENS * HIDDEN; i++) x[i] = hm_bf16_from_f32(hm_rng_normal(&rng));
  for (int i = 0; i < TOKENS * EXPERTS; i++) logits[i] = 2.0f * hm_rng_normal(&rng);
  const struct CMUnitTest tests[] = {cmocka_unit_test(matches_host_layer)};
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  free(gate_up), free(down), free(shared_gate_up), free(shared_down);
  hm_stream_destroy(gpu_stream);
  hm_stream_destroy(host_stream);
  hm_engine_destroy(host);
  hm_engine_destroy(gpu);
  hm_shutdown();
  return failed ? 1 : 0;
}
