/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The MoE layer on the GPU against the host layer (the reference GEMM) on the same W4A16
 * weights and routing: every layout, T = 1, 3, 64, 1000, 8192, balanced and skewed
 * routing (caller ids, some -1), the router on the GPU, and a decode forward captured in
 * a CUDA graph and replayed. The shared expert runs fused into the routed GEMMs (its
 * width is I) except in the dense-pair case; a decode step is five launches, and its
 * one-kernel front gives the bits of the stages launched apart. Skips (77) without a
 * CUDA device.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_driver.h"
#include "engine.h"
#include "hm_test.h"
#include "kernels/moe_front.cuh"
#include "numfmt.h"
#include "params.h"
#include "quant.h"

static hm_engine *gpu, *host;

typedef struct weights {
  hm_moe_config cfg;
  hm_host_weights gu, dn, sgu, sdn;
  float *bias;
} weights;

static void quantized(hm_rng *rng, const hm_quant_format *fmt, int64_t E, int64_t N, int64_t K,
                      hm_host_weights *w) {
  float *f = malloc((size_t)(E * N * K) * sizeof(float));
  hm_rng_fill_normal(rng, f, (size_t)(E * N * K), 1.0f / sqrtf((float)K));
  HM_ASSERT_OK(hm_host_weights_alloc(w, fmt, E, N, K));
  HM_ASSERT_OK(hm_quantize_weights(f, w));
  free(f);
}

/*
 * DeepSeek-style routing and shared experts at a size the host reference can follow: one
 * shared expert of width I (run as expert E of the routed GEMMs), or two (a dense pair).
 */
static void weights_init_shared(weights *w, hm_rng *rng, int64_t shared_experts) {
  hm_moe_config c = HM_MOE_CONFIG_INIT;
  c.hidden = 512;
  c.intermediate = 256;
  c.router = (hm_moe_router_config){HM_MOE_SCORING_SIGMOID, 32, 4, 4, 2, true, true, 2.5f};
  c.shared_experts = shared_experts;
  HM_ASSERT_OK(hm_quant_scheme_parse("w4a16", &c.scheme));
  w->cfg = c;
  int64_t width = 256 * shared_experts;
  quantized(rng, &c.scheme.weight, 32, 512, 512, &w->gu);
  quantized(rng, &c.scheme.weight, 32, 512, 256, &w->dn);
  quantized(rng, &c.scheme.weight, 1, 2 * width, 512, &w->sgu);
  quantized(rng, &c.scheme.weight, 1, 512, width, &w->sdn);
  w->bias = malloc(32 * sizeof(float));
  hm_rng_fill_uniform(rng, w->bias, 32, -0.05f, 0.05f);
}

static void weights_init(weights *w, hm_rng *rng) {
  weights_init_shared(w, rng, 1);
}

static void weights_free(weights *w) {
  hm_host_weights_free(&w->gu), hm_host_weights_free(&w->dn), hm_host_weights_free(&w->sgu);
  hm_host_weights_free(&w->sdn), free(w->bias);
}

static hm_moe_layer *make_layer(hm_engine *eng, const weights *w, hm_moe_layout layout) {
  hm_moe_config c = w->cfg;
  c.layout = layout;
  hm_moe_layer *l = NULL;
  HM_ASSERT_OK(hm_moe_layer_create(eng, &c, &l));
  hm_weights_view gu = hm_host_weights_view(&w->gu), dn = hm_host_weights_view(&w->dn);
  hm_weights_view sgu = hm_host_weights_view(&w->sgu), sdn = hm_host_weights_view(&w->sdn);
  HM_ASSERT_OK(hm_moe_layer_load(l, &gu, &dn));
  HM_ASSERT_OK(hm_moe_layer_load_shared(l, &sgu, &sdn));
  HM_ASSERT_OK(hm_moe_layer_set_router_bias(l, w->bias));
  HM_ASSERT_OK(hm_moe_layer_transform(l, NULL));
  return l;
}

typedef struct inputs {
  int64_t T;
  uint16_t *x;
  float *logits;
  int32_t *ids;
  float *w;
} inputs;

/* Distinct experts per token; skewed sends 80% of slots to K + 2 hot experts; 3% are -1. */
static void inputs_init(inputs *in, int64_t T, bool skewed, hm_rng *rng) {
  const int64_t H = 512, E = 32, K = 4;
  in->T = T;
  float *f = malloc((size_t)(T * H) * sizeof(float));
  hm_rng_fill_normal(rng, f, (size_t)(T * H), 1.0f);
  in->x = malloc((size_t)(T * H) * 2);
  HM_ASSERT_OK(hm_convert_from_f32(HM_BF16, f, in->x, T * H));
  free(f);
  in->logits = malloc((size_t)(T * E) * sizeof(float));
  hm_rng_fill_normal(rng, in->logits, (size_t)(T * E), 1.0f);
  in->ids = malloc((size_t)(T * K) * sizeof(int32_t));
  in->w = malloc((size_t)(T * K) * sizeof(float));
  for (int64_t t = 0; t < T; t++)
    for (int64_t k = 0; k < K; k++) {
      int32_t e;
      bool again;
      do {
        bool hot = skewed && hm_rng_uniform(rng, 0, 1) < 0.8f;
        e = (int32_t)(hm_rng_next(rng) % (uint64_t)(hot ? K + 2 : E));
        again = false;
        for (int64_t j = 0; j < k; j++) again |= in->ids[t * K + j] == e;
      } while (again);
      in->ids[t * K + k] = hm_rng_uniform(rng, 0, 1) < 0.03f ? -1 : e;
      in->w[t * K + k] = hm_rng_uniform(rng, 0.1f, 1.0f);
    }
}

static void inputs_free(inputs *in) {
  free(in->x), free(in->logits), free(in->ids), free(in->w);
}

/* Device copies of the inputs for one forward. */
typedef struct device_inputs {
  void *x, *logits, *ids, *w, *y;
} device_inputs;

static void *to_gpu(const void *src, size_t bytes) {
  void *d = NULL;
  HM_ASSERT_OK(hm_mem_alloc(gpu, bytes, &d));
  if (src != NULL) HM_ASSERT_OK(hm_mem_upload(gpu, d, src, bytes));
  return d;
}

static device_inputs upload_inputs(const inputs *in) {
  size_t T = (size_t)in->T;
  return (device_inputs){to_gpu(in->x, T * 512 * 2), to_gpu(in->logits, T * 32 * 4),
                         to_gpu(in->ids, T * 4 * 4), to_gpu(in->w, T * 4 * 4), to_gpu(NULL, T * 512 * 2)};
}

static void free_device_inputs(device_inputs *d) {
  hm_mem_free(gpu, d->x), hm_mem_free(gpu, d->logits), hm_mem_free(gpu, d->ids), hm_mem_free(gpu, d->w);
  hm_mem_free(gpu, d->y);
}

static float *to_f32(const uint16_t *bf16, size_t n) {
  float *f = malloc(n * sizeof(float));
  HM_ASSERT_OK(hm_convert_to_f32(HM_BF16, bf16, f, (int64_t)n));
  return f;
}

/* y of the host layer, as f32. */
static float *host_forward(hm_moe_layer *l, const inputs *in, bool use_ids) {
  size_t n = (size_t)in->T * 512;
  uint16_t *y = malloc(n * 2);
  hm_moe_forward_args a = {.tokens = in->T, .x = in->x, .router_logits = in->logits, .y = y};
  if (use_ids) a.topk_ids = in->ids, a.topk_weights = in->w;
  HM_ASSERT_OK(hm_moe_layer_forward(l, &a, NULL));
  float *f = to_f32(y, n);
  free(y);
  return f;
}

static float *gpu_forward(hm_moe_layer *l, const inputs *in, bool use_ids, hm_stream *s) {
  size_t n = (size_t)in->T * 512;
  device_inputs d = upload_inputs(in);
  hm_moe_forward_args a = {.tokens = in->T, .x = d.x, .router_logits = d.logits, .y = d.y};
  if (use_ids) a.topk_ids = d.ids, a.topk_weights = d.w;
  HM_ASSERT_OK(hm_moe_layer_forward(l, &a, s));
  HM_ASSERT_OK(hm_stream_synchronize(s));
  uint16_t *y = malloc(n * 2);
  HM_ASSERT_OK(hm_mem_download(gpu, y, d.y, n * 2));
  free_device_inputs(&d);
  float *f = to_f32(y, n);
  free(y);
  return f;
}

/* The GPU layer l on in (router on the GPU) against the host layer ref: within 2e-2. */
static void expect_near_host(hm_moe_layer *ref, hm_moe_layer *l, const inputs *in, hm_stream *s, const char *what) {
  float *want = host_forward(ref, in, false), *got = gpu_forward(l, in, false, s);
  double err = hm_rel_error(got, want, (size_t)in->T * 512);
  printf("# %s T=%lld: rel_err %.3g\n", what, (long long)in->T, err);
  if (err > 2e-2) fail_msg("%s T=%lld: relative error %g", what, (long long)in->T, err);
  free(want), free(got);
}

static void every_layout_size_and_routing(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_gpu_layer"));
  weights w;
  weights_init(&w, &rng);
  hm_stream *s = NULL;
  HM_ASSERT_OK(hm_stream_create(gpu, &s));
  hm_moe_layer *ref = make_layer(host, &w, HM_MOE_LAYOUT_INDEXED), *layers[3];
  for (int i = 0; i < 3; i++) layers[i] = make_layer(gpu, &w, (hm_moe_layout)(HM_MOE_LAYOUT_INDEXED + i));
  const int64_t tokens[] = {1, 3, 64, 1000, 8192};
  for (size_t t = 0; t < 5; t++)
    for (int skewed = 0; skewed < 2; skewed++) {
      inputs in;
      inputs_init(&in, tokens[t], skewed, &rng);
      float *want = host_forward(ref, &in, true);
      for (int i = 0; i < 3; i++) {
        float *got = gpu_forward(layers[i], &in, true, s);
        double err = hm_rel_error(got, want, (size_t)in.T * 512);
        hm_moe_stats st;
        HM_ASSERT_OK(hm_moe_layer_stats(layers[i], &st));
        printf("# T=%-5lld %-8s %-10s rel_err %.3g launches %d\n", (long long)in.T,
               skewed ? "skewed" : "balanced", hm_moe_layout_name(st.layout), err, st.launches);
        if (err > 2e-2)
          fail_msg("T=%lld %s: relative error %g", (long long)in.T, hm_moe_layout_name(st.layout), err);
        /* front, gate_up, act, down, combine */
        if (in.T <= HM_FRONT_MAX_TOKENS) assert_int_equal(st.launches, 5);
        free(got);
      }
      free(want);
      inputs_free(&in);
    }
  for (int i = 0; i < 3; i++) hm_moe_layer_destroy(layers[i]);
  hm_moe_layer_destroy(ref);
  hm_stream_destroy(s);
  weights_free(&w);
}

static void router_on_the_gpu(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_gpu_layer_router"));
  weights w;
  weights_init(&w, &rng);
  hm_moe_layer *ref = make_layer(host, &w, HM_MOE_LAYOUT_INDEXED),
               *l = make_layer(gpu, &w, HM_MOE_LAYOUT_AUTO);
  hm_stream *s = NULL;
  HM_ASSERT_OK(hm_stream_create(gpu, &s));
  const int64_t tokens[] = {3, 64, 1000, 1024};
  const hm_moe_layout want[] = {HM_MOE_LAYOUT_MASKED, HM_MOE_LAYOUT_MASKED, HM_MOE_LAYOUT_INDEXED,
                                HM_MOE_LAYOUT_CONTIGUOUS};
  for (size_t t = 0; t < 4; t++) {
    inputs in;
    inputs_init(&in, tokens[t], false, &rng);
    expect_near_host(ref, l, &in, s, "router on GPU");
    hm_moe_stats st;
    HM_ASSERT_OK(hm_moe_layer_stats(l, &st));
    assert_int_equal(st.layout, want[t]);
    inputs_free(&in);
  }
  hm_moe_layer_destroy(l);
  hm_moe_layer_destroy(ref);
  hm_stream_destroy(s);
  weights_free(&w);
}

/* A decode forward (masked) captured once, replayed on new inputs in the same buffers. */
static void decode_forward_in_a_cuda_graph(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_gpu_graph"));
  weights w;
  weights_init(&w, &rng);
  hm_stream *s = NULL;
  HM_ASSERT_OK(hm_stream_create(gpu, &s));
  hm_moe_layer *l = make_layer(gpu, &w, HM_MOE_LAYOUT_MASKED),
               *ref = make_layer(host, &w, HM_MOE_LAYOUT_INDEXED);
  HM_ASSERT_OK(hm_moe_layer_reserve(l, 16, s));
  inputs in;
  inputs_init(&in, 16, false, &rng);
  device_inputs d = upload_inputs(&in);
  hm_moe_forward_args a = {.tokens = 16, .x = d.x, .router_logits = d.logits, .y = d.y};
  HM_ASSERT_OK(hm_moe_layer_forward(l, &a, s)); /* warm-up */
  CUstream cs = (CUstream)s->native;
  CUgraph graph;
  CUgraphExec exec;
  assert_int_equal(hm_cu.cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  HM_ASSERT_OK(hm_moe_layer_forward(l, &a, s));
  assert_int_equal(hm_cu.cuStreamEndCapture(cs, &graph), CUDA_SUCCESS);
  assert_int_equal(hm_cu.cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  for (int replay = 0; replay < 2; replay++) {
    inputs next;
    inputs_init(&next, 16, replay == 1, &rng);
    HM_ASSERT_OK(hm_mem_upload(gpu, d.x, next.x, 16 * 512 * 2));
    HM_ASSERT_OK(hm_mem_upload(gpu, d.logits, next.logits, 16 * 32 * 4));
    assert_int_equal(hm_cu.cuGraphLaunch(exec, cs), CUDA_SUCCESS);
    HM_ASSERT_OK(hm_stream_synchronize(s));
    uint16_t y[16 * 512];
    HM_ASSERT_OK(hm_mem_download(gpu, y, d.y, sizeof(y)));
    float *got = to_f32(y, 16 * 512), *want = host_forward(ref, &next, false);
    double err = hm_rel_error(got, want, 16 * 512);
    printf("# graph replay %d: rel_err %.3g\n", replay, err);
    if (err > 2e-2) fail_msg("graph replay %d: relative error %g", replay, err);
    free(got), free(want);
    inputs_free(&next);
  }
  hm_cu.cuGraphExecDestroy(exec);
  hm_cu.cuGraphDestroy(graph);
  free_device_inputs(&d);
  inputs_free(&in);
  hm_moe_layer_destroy(l);
  hm_moe_layer_destroy(ref);
  hm_stream_destroy(s);
  weights_free(&w);
}

/* Two shared experts of I are no expert of the routed GEMMs: the dense pair on its side stream. */
static void dense_shared_pair(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_gpu_dense_shared"));
  weights w;
  weights_init_shared(&w, &rng, 2);
  hm_stream *s = NULL;
  HM_ASSERT_OK(hm_stream_create(gpu, &s));
  hm_moe_layer *ref = make_layer(host, &w, HM_MOE_LAYOUT_INDEXED);
  const int64_t tokens[] = {1, 64};
  for (int layout = HM_MOE_LAYOUT_INDEXED; layout <= HM_MOE_LAYOUT_MASKED; layout++) {
    hm_moe_layer *l = make_layer(gpu, &w, (hm_moe_layout)layout);
    for (size_t t = 0; t < 2; t++) {
      inputs in;
      inputs_init(&in, tokens[t], false, &rng);
      char what[64];
      snprintf(what, sizeof(what), "dense shared pair %s", hm_moe_layout_name(layout));
      expect_near_host(ref, l, &in, s, what);
      inputs_free(&in);
    }
    hm_moe_layer_destroy(l);
  }
  hm_moe_layer_destroy(ref);
  hm_stream_destroy(s);
  weights_free(&w);
}

/* A decode step through the one-kernel front and through its stages apart: the same y bits. */
static void front_gives_the_bits_of_the_stages_apart(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_gpu_front_layer"));
  weights w;
  weights_init(&w, &rng);
  hm_stream *s = NULL;
  HM_ASSERT_OK(hm_stream_create(gpu, &s));
  const int64_t tokens[] = {1, 8, 16};
  for (int layout = HM_MOE_LAYOUT_INDEXED; layout <= HM_MOE_LAYOUT_MASKED; layout++) {
    hm_moe_layer *l = make_layer(gpu, &w, (hm_moe_layout)layout);
    for (size_t t = 0; t < 3; t++)
      for (int use_ids = 0; use_ids < 2; use_ids++) {
        inputs in;
        inputs_init(&in, tokens[t], true, &rng);
        float *fused = gpu_forward(l, &in, use_ids, s);
        hm_moe_stats st;
        HM_ASSERT_OK(hm_moe_layer_stats(l, &st));
        assert_int_equal(st.launches, 5);
        /* A forward plans its stages from the parameter when it runs. */
        setenv("HUMMING_MOE_FRONT_MAX_TOKENS", "0", 1);
        hm_params_reload();
        float *apart = gpu_forward(l, &in, use_ids, s);
        unsetenv("HUMMING_MOE_FRONT_MAX_TOKENS");
        hm_params_reload();
        HM_ASSERT_OK(hm_moe_layer_stats(l, &st));
        /* Apart, the router alone is a launch beside align (one or two kernels per distinct
         * block_m of the two GEMMs) and permute (grouped layouts), so with the router the
         * stages take more than the front path's five. Given ids, indexed apart is align and
         * the four launches after it: five as well, and only the bits tell. */
        if (!use_ids && st.launches <= 5)
          fail_msg("stages apart took %d launches, want more than 5", st.launches);
        assert_memory_equal(fused, apart, (size_t)in.T * 512 * sizeof(float));
        free(fused), free(apart);
        inputs_free(&in);
      }
    printf("# front %s: the bits of the stages apart\n", hm_moe_layout_name(layout));
    hm_moe_layer_destroy(l);
  }
  hm_stream_destroy(s);
  weights_free(&w);
}

int main(void) {
  gpu = hm_test_cuda_engine_or_skip();
  if (gpu == NULL) return HM_TEST_SKIP;
  host = hm_test_host_engine();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_layout_size_and_routing),
      cmocka_unit_test(router_on_the_gpu),
      cmocka_unit_test(decode_forward_in_a_cuda_graph),
      cmocka_unit_test(dense_shared_pair),
      cmocka_unit_test(front_gives_the_bits_of_the_stages_apart),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  hm_engine_destroy(host);
  hm_engine_destroy(gpu);
  hm_shutdown();
  return failed;
}
