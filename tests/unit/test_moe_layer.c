/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The whole MoE layer on the host backend against a naive per-token loop over the
 * dequantized weights (router, gate_up, activation, down, shared experts, weighted sum,
 * rounded to bf16 where the layer rounds), for each activation, shared experts fused into
 * the routed GEMMs or as a dense pair; the three layouts giving the same bits; caller ids
 * with -1; the decode front (one kernel) giving the bits of the separate stages; launches
 * per forward; auto layout, stats; refused configs and calls.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "hm_test.h"
#include "kernels/moe_front.cuh"
#include "layer_internal.h"
#include "model_layers.h"
#include "moe/layer_internal.h"
#include "numfmt.h"
#include "params.h"
#include "quant.h"

typedef struct moe_fixture {
  hm_moe_config cfg;
  hm_host_weights gate_up, down, shared_gate_up, shared_down;
  float *gu_f, *down_f, *sgu_f, *sdown_f; /* dequantized, (E, N, K) */
  float *bias;
  int64_t shared_width;
} moe_fixture;

static float *dequantized(const hm_host_weights *w) {
  float *out = malloc((size_t)(w->experts * w->n * w->k) * sizeof(float));
  for (int64_t e = 0; e < w->experts; e++)
    HM_ASSERT_OK(hm_dequantize_rows(w, e, 0, w->n, out + e * w->n * w->k));
  return out;
}

static void make_weights(hm_rng *rng, const hm_quant_format *fmt, int64_t E, int64_t N, int64_t K,
                         hm_host_weights *w, float **deq) {
  float *f = malloc((size_t)(E * N * K) * sizeof(float));
  hm_rng_fill_normal(rng, f, (size_t)(E * N * K), 1.0f / sqrtf((float)K));
  HM_ASSERT_OK(hm_host_weights_alloc(w, fmt, E, N, K));
  HM_ASSERT_OK(hm_quantize_weights(f, w));
  free(f);
  *deq = dequantized(w);
}

static void fixture_init(moe_fixture *fx, const hm_moe_config *cfg, hm_rng *rng) {
  memset(fx, 0, sizeof(*fx));
  fx->cfg = *cfg;
  int64_t E = cfg->router.experts, H = cfg->hidden, I = cfg->intermediate;
  bool relu2 = cfg->activation == HM_MOE_ACT_RELU2;
  const hm_quant_format *fmt = &cfg->scheme.weight;
  make_weights(rng, fmt, E, relu2 ? I : 2 * I, H, &fx->gate_up, &fx->gu_f);
  make_weights(rng, fmt, E, H, I, &fx->down, &fx->down_f);
  fx->shared_width = cfg->shared_experts * (cfg->shared_intermediate ? cfg->shared_intermediate : I);
  if (fx->shared_width > 0) {
    make_weights(rng, fmt, 1, relu2 ? fx->shared_width : 2 * fx->shared_width, H, &fx->shared_gate_up,
                 &fx->sgu_f);
    make_weights(rng, fmt, 1, H, fx->shared_width, &fx->shared_down, &fx->sdown_f);
  }
  fx->bias = malloc((size_t)E * sizeof(float));
  hm_rng_fill_uniform(rng, fx->bias, (size_t)E, -0.05f, 0.05f);
}

static void fixture_free(moe_fixture *fx) {
  hm_host_weights_free(&fx->gate_up), hm_host_weights_free(&fx->down);
  hm_host_weights_free(&fx->shared_gate_up), hm_host_weights_free(&fx->shared_down);
  free(fx->gu_f), free(fx->down_f), free(fx->sgu_f), free(fx->sdown_f), free(fx->bias);
}

static hm_moe_layer *make_layer(hm_engine *eng, const moe_fixture *fx, hm_moe_layout layout) {
  hm_moe_config cfg = fx->cfg;
  cfg.layout = layout;
  hm_moe_layer *l = NULL;
  HM_ASSERT_OK(hm_moe_layer_create(eng, &cfg, &l));
  hm_weights_view gu = hm_host_weights_view(&fx->gate_up), dn = hm_host_weights_view(&fx->down);
  HM_ASSERT_OK(hm_moe_layer_load(l, &gu, &dn));
  if (fx->shared_width > 0) {
    hm_weights_view sgu = hm_host_weights_view(&fx->shared_gate_up),
                    sdn = hm_host_weights_view(&fx->shared_down);
    HM_ASSERT_OK(hm_moe_layer_load_shared(l, &sgu, &sdn));
  }
  if (cfg.router.correction_bias) HM_ASSERT_OK(hm_moe_layer_set_router_bias(l, fx->bias));
  HM_ASSERT_OK(hm_moe_layer_transform(l, NULL));
  return l;
}

static float bf16_round(double v) {
  return hm_bf16_to_f32(hm_bf16_from_f32((float)v));
}

static float act(hm_moe_activation a, float g, float u) {
  switch (a) {
    case HM_MOE_ACT_SILU_MUL: return g / (1.0f + expf(-g)) * u;
    case HM_MOE_ACT_GELU_MUL: return 0.5f * g * (1.0f + erff(g * 0.70710678118654752f)) * u;
    default: return g > 0.0f ? g * g : 0.0f;
  }
}

/* out (H) = down(act(gate_up x)) of one expert, with the layer's bf16 roundings. */
static void naive_expert(const moe_fixture *fx, const float *gu, const float *dn, int64_t I, const float *x,
                         float *out) {
  int64_t H = fx->cfg.hidden;
  bool relu2 = fx->cfg.activation == HM_MOE_ACT_RELU2;
  int64_t rows = relu2 ? I : 2 * I;
  float *h = malloc((size_t)rows * sizeof(float)), *a = malloc((size_t)I * sizeof(float));
  for (int64_t n = 0; n < rows; n++) {
    double s = 0;
    for (int64_t c = 0; c < H; c++) s += (double)gu[n * H + c] * x[c];
    h[n] = bf16_round(s);
  }
  for (int64_t i = 0; i < I; i++) a[i] = bf16_round(act(fx->cfg.activation, h[i], relu2 ? 0.0f : h[I + i]));
  for (int64_t j = 0; j < H; j++) {
    double s = 0;
    for (int64_t i = 0; i < I; i++) s += (double)dn[j * I + i] * a[i];
    out[j] = bf16_round(s);
  }
  free(h), free(a);
}

/* y (T, H) as f32 of the naive per-token loop. */
static void naive_layer(const moe_fixture *fx, int64_t T, const uint16_t *x, const int32_t *ids,
                        const float *w, float *y) {
  int64_t H = fx->cfg.hidden, I = fx->cfg.intermediate, K = fx->cfg.router.top_k;
  int64_t gu_rows = fx->cfg.activation == HM_MOE_ACT_RELU2 ? I : 2 * I;
  float *xt = malloc((size_t)H * sizeof(float)), *o = malloc((size_t)H * sizeof(float));
  float *acc = malloc((size_t)H * sizeof(float));
  for (int64_t t = 0; t < T; t++) {
    for (int64_t c = 0; c < H; c++) xt[c] = hm_bf16_to_f32(x[t * H + c]), acc[c] = 0.0f;
    for (int64_t k = 0; k < K; k++) {
      int32_t e = ids[t * K + k];
      if (e < 0) continue;
      naive_expert(fx, fx->gu_f + e * gu_rows * H, fx->down_f + e * H * I, I, xt, o);
      for (int64_t c = 0; c < H; c++) acc[c] = fmaf(w[t * K + k], o[c], acc[c]);
    }
    if (fx->shared_width > 0) {
      naive_expert(fx, fx->sgu_f, fx->sdown_f, fx->shared_width, xt, o);
      for (int64_t c = 0; c < H; c++) acc[c] += o[c];
    }
    for (int64_t c = 0; c < H; c++) y[t * H + c] = bf16_round(acc[c]);
  }
  free(xt), free(o), free(acc);
}

typedef struct moe_inputs {
  int64_t T;
  uint16_t *x;
  float *logits;
  int32_t *ids;
  float *w;
} moe_inputs;

static void inputs_init(moe_inputs *in, const moe_fixture *fx, int64_t T, hm_rng *rng) {
  int64_t H = fx->cfg.hidden, E = fx->cfg.router.experts, K = fx->cfg.router.top_k;
  in->T = T;
  float *xf = malloc((size_t)(T * H) * sizeof(float));
  hm_rng_fill_normal(rng, xf, (size_t)(T * H), 1.0f);
  in->x = malloc((size_t)(T * H) * 2);
  HM_ASSERT_OK(hm_convert_from_f32(HM_BF16, xf, in->x, T * H));
  free(xf);
  in->logits = malloc((size_t)(T * E) * sizeof(float));
  hm_rng_fill_normal(rng, in->logits, (size_t)(T * E), 1.0f);
  in->ids = malloc((size_t)(T * K) * sizeof(int32_t));
  in->w = malloc((size_t)(T * K) * sizeof(float));
  hm_engine *eng = hm_test_host_engine();
  HM_ASSERT_OK(hm_moe_route(eng, &fx->cfg.router, T, in->logits,
                            fx->cfg.router.correction_bias ? fx->bias : NULL, in->ids, in->w, NULL));
  hm_engine_destroy(eng);
}

static void inputs_free(moe_inputs *in) {
  free(in->x), free(in->logits), free(in->ids), free(in->w);
}

/* Forward through the layer (router when use_ids is false) into y as f32. */
static void layer_forward(hm_moe_layer *l, const moe_inputs *in, int64_t H, bool use_ids, float *y) {
  uint16_t *yb = malloc((size_t)(in->T * H) * 2);
  hm_moe_forward_args a = {.tokens = in->T, .x = in->x, .router_logits = in->logits, .y = yb};
  if (use_ids) a.topk_ids = in->ids, a.topk_weights = in->w;
  HM_ASSERT_OK(hm_moe_layer_forward(l, &a, NULL));
  HM_ASSERT_OK(hm_convert_to_f32(HM_BF16, yb, y, in->T * H));
  free(yb);
}

static hm_moe_config small_config(hm_moe_activation a) {
  hm_moe_config c = HM_MOE_CONFIG_INIT;
  c.hidden = 256;
  c.intermediate = 128;
  c.activation = a;
  c.router = (hm_moe_router_config){HM_MOE_SCORING_SIGMOID, 16, 4, 4, 2, true, true, 2.5f};
  c.shared_experts = 1;
  HM_ASSERT_OK(hm_quant_scheme_parse("w4a16", &c.scheme));
  return c;
}

/* The layer on every layout equals the naive loop; the layouts agree bit for bit. */
static void check_against_naive(const hm_moe_config *cfg, int64_t T, bool mask_some, double tol) {
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_layer"));
  moe_fixture fx;
  fixture_init(&fx, cfg, &rng);
  moe_inputs in;
  inputs_init(&in, &fx, T, &rng);
  for (int64_t i = 0; mask_some && i < T * cfg->router.top_k; i += 3) in.ids[i] = -1;
  int64_t H = cfg->hidden;
  size_t n = (size_t)(T * H);
  float *ref = malloc(n * sizeof(float)), *y[3];
  naive_layer(&fx, T, in.x, in.ids, in.w, ref);
  hm_engine *eng = hm_test_host_engine();
  for (int layout = HM_MOE_LAYOUT_INDEXED; layout <= HM_MOE_LAYOUT_MASKED; layout++) {
    hm_moe_layer *l = make_layer(eng, &fx, (hm_moe_layout)layout);
    float *out = y[layout - 1] = malloc(n * sizeof(float));
    layer_forward(l, &in, H, mask_some, out);
    double err = hm_rel_error(out, ref, n);
    printf("# T=%lld %s: relative error %.3g against the naive loop\n", (long long)T,
           hm_moe_layout_name(layout), err);
    if (err > tol) fail_msg("%s: relative error %g against the naive loop", hm_moe_layout_name(layout), err);
    hm_moe_stats st;
    HM_ASSERT_OK(hm_moe_layer_stats(l, &st));
    assert_int_equal(st.layout, layout);
    hm_moe_layer_destroy(l);
  }
  assert_memory_equal(y[0], y[1], n * sizeof(float));
  assert_memory_equal(y[0], y[2], n * sizeof(float));
  hm_engine_destroy(eng);
  for (int i = 0; i < 3; i++) free(y[i]);
  free(ref);
  inputs_free(&in);
  fixture_free(&fx);
}

static void silu_with_shared_experts(void **state) {
  (void)state;
  hm_moe_config c = small_config(HM_MOE_ACT_SILU_MUL);
  check_against_naive(&c, 37, false, 1e-2);
  check_against_naive(&c, 1, false, 1e-2);
}

static void caller_ids_with_masked_slots(void **state) {
  (void)state;
  hm_moe_config c = small_config(HM_MOE_ACT_SILU_MUL);
  check_against_naive(&c, 20, true, 1e-2);
  check_against_naive(&c, 7, true, 1e-2);
}

/* A shared width other than I (two experts of I here) keeps the dense shared pair. */
static void dense_shared_pair(void **state) {
  (void)state;
  hm_moe_config c = small_config(HM_MOE_ACT_SILU_MUL);
  c.shared_experts = 2;
  check_against_naive(&c, 3, false, 1e-2);
  check_against_naive(&c, 29, false, 1e-2);
}

static void gelu_softmax_router(void **state) {
  (void)state;
  hm_moe_config c = small_config(HM_MOE_ACT_GELU_MUL);
  c.router = (hm_moe_router_config){HM_MOE_SCORING_SOFTMAX, 8, 2, 1, 1, false, true, 1.0f};
  c.shared_experts = 0;
  check_against_naive(&c, 30, false, 1e-2);
}

static void squared_relu_two_shared(void **state) {
  (void)state;
  hm_moe_config c = small_config(HM_MOE_ACT_RELU2);
  c.shared_experts = 2;
  c.shared_intermediate = 64;
  check_against_naive(&c, 11, false, 1e-2);
}

static void int8_activations(void **state) {
  (void)state;
  hm_moe_config c = small_config(HM_MOE_ACT_SILU_MUL);
  HM_ASSERT_OK(hm_quant_scheme_parse("w8a8-int8", &c.scheme));
  /* The naive loop keeps bf16 activations: the gap is the 8-bit quantization of x and h. */
  check_against_naive(&c, 9, false, 5e-2);
}

static void auto_layout_and_stats(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_layer_auto"));
  moe_fixture fx;
  hm_moe_config c = small_config(HM_MOE_ACT_SILU_MUL);
  fixture_init(&fx, &c, &rng);
  hm_engine *eng = hm_test_host_engine();
  hm_moe_layer *l = make_layer(eng, &fx, HM_MOE_LAYOUT_AUTO);
  HM_ASSERT_OK(hm_moe_layer_reserve(l, 1024, NULL));
  HM_ASSERT_OK(hm_moe_layer_set_profiling(l, true));
  const int64_t tokens[] = {5, 100, 1024};
  const hm_moe_layout want[] = {HM_MOE_LAYOUT_MASKED, HM_MOE_LAYOUT_INDEXED, HM_MOE_LAYOUT_CONTIGUOUS};
  for (int i = 0; i < 3; i++) {
    moe_inputs in;
    inputs_init(&in, &fx, tokens[i], &rng);
    float *y = malloc((size_t)(tokens[i] * c.hidden) * sizeof(float));
    layer_forward(l, &in, c.hidden, false, y);
    hm_moe_stats st;
    HM_ASSERT_OK(hm_moe_layer_stats(l, &st));
    assert_int_equal(st.layout, want[i]);
    assert_int_equal(st.tokens, tokens[i]);
    assert_true(st.timed && st.total_us > 0.0f);
    /* masked T = 5: front, two GEMMs, act, combine; indexed T = 100: router and align apart,
     * one align for each distinct block_m of the two GEMMs; contiguous T = 1024: router, one
     * align for both GEMMs, permute */
    if (want[i] == HM_MOE_LAYOUT_MASKED) assert_int_equal(st.launches, 5);
    else if (want[i] == HM_MOE_LAYOUT_INDEXED)
      assert_true(st.launches == 6 || st.launches == 7);
    else
      assert_int_equal(st.launches, 7);
    float sum = 0.0f;
    for (int s = 0; s < HM_MOE_STAGE_COUNT; s++) sum += st.stage_us[s];
    assert_true(sum <= st.total_us * 1.01f + 1.0f);
    free(y);
    inputs_free(&in);
  }
  /* HUMMING_MOE_LAYOUT decides when the config says auto, and a bad value is refused. */
  moe_inputs in;
  inputs_init(&in, &fx, 5, &rng);
  float *y = malloc((size_t)(5 * c.hidden) * sizeof(float));
  setenv("HUMMING_MOE_LAYOUT", "contiguous", 1);
  hm_params_reload();
  layer_forward(l, &in, c.hidden, false, y);
  hm_moe_stats st;
  HM_ASSERT_OK(hm_moe_layer_stats(l, &st));
  assert_int_equal(st.layout, HM_MOE_LAYOUT_CONTIGUOUS);
  setenv("HUMMING_MOE_LAYOUT", "diagonal", 1);
  hm_params_reload();
  hm_moe_forward_args bad = {.tokens = 5, .x = in.x, .router_logits = in.logits, .y = in.x};
  assert_int_equal(hm_moe_layer_forward(l, &bad, NULL), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "HUMMING_MOE_LAYOUT=diagonal"));
  unsetenv("HUMMING_MOE_LAYOUT");
  hm_params_reload();
  free(y);
  inputs_free(&in);
  assert_string_equal(hm_moe_stage_name(HM_MOE_STAGE_GEMM1), "gemm1");
  assert_string_equal(hm_moe_layout_name(HM_MOE_LAYOUT_CONTIGUOUS), "contiguous");
  hm_moe_layer_destroy(l);
  hm_engine_destroy(eng);
  fixture_free(&fx);
}

/* Launches of one forward and y, on a fresh layer of layout. */
static int forward_launches(hm_engine *eng, const moe_fixture *fx, hm_moe_layout layout, const moe_inputs *in,
                            float *y) {
  hm_moe_layer *l = make_layer(eng, fx, layout);
  layer_forward(l, in, fx->cfg.hidden, false, y);
  hm_moe_stats st;
  HM_ASSERT_OK(hm_moe_layer_stats(l, &st));
  hm_moe_layer_destroy(l);
  return st.launches;
}

/*
 * The host counts launches as the GPU does (one per kernel, each GEMM one). With the
 * shared expert fused, a decode step is front, gate_up, act, down, combine; beyond the
 * front's tokens, or with it off, router, align and (grouped layouts) permute come apart.
 * Before the fusions every layout took 9 (indexed) or 10 launches.
 */
static void launches_per_layout(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_layer_launches"));
  hm_moe_config c = small_config(HM_MOE_ACT_SILU_MUL);
  moe_fixture fx;
  fixture_init(&fx, &c, &rng);
  hm_engine *eng = hm_test_host_engine();
  const int64_t tokens[] = {1, 16, 17};
  for (size_t t = 0; t < 3; t++) {
    moe_inputs in;
    inputs_init(&in, &fx, tokens[t], &rng);
    size_t n = (size_t)(tokens[t] * c.hidden);
    float *y = malloc(n * sizeof(float)), *y_apart = malloc(n * sizeof(float));
    for (int layout = HM_MOE_LAYOUT_INDEXED; layout <= HM_MOE_LAYOUT_MASKED; layout++) {
      bool front = tokens[t] <= HM_FRONT_MAX_TOKENS, indexed = layout == HM_MOE_LAYOUT_INDEXED;
      int want = front ? 5 : indexed ? 6 : 7;
      assert_int_equal(forward_launches(eng, &fx, (hm_moe_layout)layout, &in, y), want);
      setenv("HUMMING_MOE_FRONT_MAX_TOKENS", "0", 1);
      hm_params_reload();
      assert_int_equal(forward_launches(eng, &fx, (hm_moe_layout)layout, &in, y_apart), indexed ? 6 : 7);
      unsetenv("HUMMING_MOE_FRONT_MAX_TOKENS");
      hm_params_reload();
      assert_memory_equal(y, y_apart, n * sizeof(float));
      printf("# T=%lld %s: %d launches\n", (long long)tokens[t], hm_moe_layout_name(layout), want);
    }
    free(y), free(y_apart);
    inputs_free(&in);
  }
  hm_engine_destroy(eng);
  fixture_free(&fx);
  /* The dense shared pair adds its gate_up, act and down. */
  c.shared_experts = 2;
  fixture_init(&fx, &c, &rng);
  eng = hm_test_host_engine();
  moe_inputs in;
  inputs_init(&in, &fx, 4, &rng);
  float *y = malloc((size_t)(4 * c.hidden) * sizeof(float));
  assert_int_equal(forward_launches(eng, &fx, HM_MOE_LAYOUT_MASKED, &in, y), 8);
  free(y);
  inputs_free(&in);
  hm_engine_destroy(eng);
  fixture_free(&fx);
}

/* Fused, the shared expert is expert E of the routed GEMM layers; loads may come in any order. */
static void fused_shared_expert_weights(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_layer_fused_weights"));
  hm_moe_config c = small_config(HM_MOE_ACT_SILU_MUL);
  moe_fixture fx;
  fixture_init(&fx, &c, &rng);
  hm_engine *eng = hm_test_host_engine();
  hm_moe_layer *l = NULL;
  HM_ASSERT_OK(hm_moe_layer_create(eng, &c, &l));
  hm_weights_bytes routed_gu, routed_dn, shared_gu, shared_dn;
  HM_ASSERT_OK(hm_moe_layer_weights_bytes(l, false, &routed_gu, &routed_dn));
  HM_ASSERT_OK(hm_moe_layer_weights_bytes(l, true, &shared_gu, &shared_dn));
  assert_int_equal(routed_gu.qweight, 16 * shared_gu.qweight);
  assert_int_equal(routed_dn.scales, 16 * shared_dn.scales);
  assert_int_equal(shared_gu.qweight, (size_t)(2 * 128 * 256 / 8) * 4); /* 2I x H codes of 4 bits */
  hm_weights_view sgu = hm_host_weights_view(&fx.shared_gate_up), sdn = hm_host_weights_view(&fx.shared_down);
  hm_weights_view gu = hm_host_weights_view(&fx.gate_up), dn = hm_host_weights_view(&fx.down);
  HM_ASSERT_OK(hm_moe_layer_load_shared(l, &sgu, &sdn));
  HM_ASSERT_OK(hm_moe_layer_load(l, &gu, &dn));
  HM_ASSERT_OK(hm_moe_layer_set_router_bias(l, fx.bias));
  HM_ASSERT_OK(hm_moe_layer_transform(l, NULL));
  moe_inputs in;
  inputs_init(&in, &fx, 6, &rng);
  size_t n = (size_t)(6 * c.hidden);
  float *got = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
  layer_forward(l, &in, c.hidden, true, got);
  hm_moe_layer *ref = make_layer(eng, &fx, HM_MOE_LAYOUT_AUTO);
  layer_forward(ref, &in, c.hidden, true, want);
  assert_memory_equal(got, want, n * sizeof(float));
  /* Expert ranges outside a GEMM layer are refused with the range named. */
  hm_layer_config lc = HM_LAYER_CONFIG_INIT;
  lc.n = 64, lc.k = 128, lc.experts = 3, lc.scheme = c.scheme;
  hm_layer *gemm = NULL;
  HM_ASSERT_OK(hm_layer_create(eng, &lc, &gemm));
  float *w = calloc(2 * 64 * 128, sizeof(float));
  assert_int_equal(hm_layer_quantize_experts(gemm, 2, 2, w, NULL), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "experts [2, 4) are outside the layer's 3"));
  assert_int_equal(hm_layer_load_experts(gemm, -1, 1, &gu), HM_INVALID_ARGUMENT);
  HM_ASSERT_OK(hm_layer_quantize_experts(gemm, 1, 2, w, NULL));
  hm_layer_destroy(gemm);
  free(w), free(got), free(want);
  inputs_free(&in);
  hm_moe_layer_destroy(ref);
  hm_moe_layer_destroy(l);
  hm_engine_destroy(eng);
  fixture_free(&fx);
}

static void model_presets(void **state) {
  (void)state;
  hm_moe_config c = HM_MOE_CONFIG_INIT;
  HM_ASSERT_OK(hm_moe_config_for_model("deepseek-v3", &c));
  assert_int_equal(c.hidden, 7168);
  assert_int_equal(c.intermediate, 2048);
  assert_int_equal(c.router.experts, 256);
  assert_int_equal(c.router.top_k, 8);
  assert_int_equal(c.router.groups, 8);
  assert_int_equal(c.router.topk_group, 4);
  assert_int_equal(c.router.scoring, HM_MOE_SCORING_SIGMOID);
  assert_true(c.router.correction_bias && c.router.renormalize);
  assert_true(fabsf(c.router.scaling - 2.5f) < 1e-6f);
  assert_int_equal(c.shared_experts, 1);
  assert_int_equal(hm_moe_config_for_model("gpt-oss-120b", &c), HM_UNSUPPORTED);
  assert_int_equal(hm_moe_config_for_model("no-such-model", &c), HM_INVALID_ARGUMENT);
}

static void same_gemm(const hm_layer_config *made, const hm_layer_config *listed) {
  assert_int_equal(made->n, listed->n);
  assert_int_equal(made->k, listed->k);
  assert_int_equal(made->experts, listed->experts);
  assert_int_equal(made->top_k, listed->top_k);
  assert_int_equal(made->out, listed->out);
}

/* What precompile compiles and the tuner times (hm_model_layers) is what a single-rank MoE
 * layer of the preset makes: shared experts one expert wide run as one more routed expert,
 * a row more a token and the routed GEMMs' last expert, with no dense pair; else the dense pair. */
static void model_layers_are_the_layers_gemms(void **state) {
  (void)state;
  hm_engine *eng = hm_test_host_engine();
  const char *const models[] = {"deepseek-mini", "deepseek-v3", "tiny"};
  for (size_t m = 0; m < HM_ARRAY_SIZE(models); m++) {
    hm_moe_config c = HM_MOE_CONFIG_INIT;
    HM_ASSERT_OK(hm_moe_config_for_model(models[m], &c));
    HM_ASSERT_OK(hm_quant_scheme_parse("w4a16", &c.scheme));
    hm_moe_layer *l = NULL;
    HM_ASSERT_OK(hm_moe_layer_create(eng, &c, &l));
    hm_model_preset p;
    hm_model_layer layers[HM_MODEL_MAX_LAYERS];
    int count = 0;
    HM_ASSERT_OK(hm_model_preset_get(models[m], &p));
    HM_ASSERT_OK(hm_model_layers(&p, &c.scheme, 1, 1, layers, &count));
    same_gemm(&l->gate_up->cfg, &layers[0].config);
    same_gemm(&l->down->cfg, &layers[1].config);
    assert_int_equal(layers[0].shared, l->shared_fused);
    assert_int_equal(layers[1].shared, l->shared_fused);
    assert_false(layers[0].a_per_slot); /* gate_up gathers token rows, down reads a row per slot */
    assert_true(layers[1].a_per_slot);
    const bool dense_pair = count > 2 && strcmp(layers[2].role, "shared.gate_up") == 0;
    assert_int_equal(dense_pair, l->shared_gate_up != NULL);
    if (dense_pair) {
      same_gemm(&l->shared_gate_up->cfg, &layers[2].config);
      same_gemm(&l->shared_down->cfg, &layers[3].config);
    }
    hm_moe_layer_destroy(l);
  }
  hm_engine_destroy(eng);
}

static void bad_configs_and_calls_are_refused(void **state) {
  (void)state;
  hm_engine *eng = hm_test_host_engine();
  hm_moe_layer *l = (hm_moe_layer *)0x1;
  hm_moe_config c = small_config(HM_MOE_ACT_SILU_MUL);
  hm_moe_config bad = c;
  bad.magic = 0;
  assert_int_equal(hm_moe_layer_create(eng, &bad, &l), HM_INVALID_ARGUMENT);
  assert_null(l);
  bad = c;
  bad.router.top_k = 17;
  assert_int_equal(hm_moe_layer_create(eng, &bad, &l), HM_INVALID_ARGUMENT);
  bad = c;
  bad.hidden = 0;
  assert_int_equal(hm_moe_layer_create(eng, &bad, &l), HM_INVALID_ARGUMENT);
  bad = c;
  bad.scheme.act = HM_F32;
  assert_int_equal(hm_moe_layer_create(eng, &bad, &l), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_moe_layer_create(NULL, &c, &l), HM_INVALID_ARGUMENT);
  hm_moe_layer_destroy(NULL);

  HM_ASSERT_OK(hm_moe_layer_create(eng, &c, &l));
  uint16_t x[256] = {0}, y[256];
  float logits[16] = {0};
  hm_moe_forward_args a = {.tokens = 1, .x = x, .router_logits = logits, .y = y};
  assert_int_equal(hm_moe_layer_forward(l, &a, NULL), HM_NOT_READY);
  assert_int_equal(hm_moe_layer_transform(l, NULL), HM_NOT_READY);
  float *w = calloc(16 * 256 * 256, sizeof(float));
  HM_ASSERT_OK(hm_moe_layer_quantize(l, w, w));
  assert_int_equal(hm_moe_layer_transform(l, NULL), HM_NOT_READY); /* shared weights missing */
  HM_ASSERT_OK(hm_moe_layer_quantize_shared(l, w, w));
  assert_int_equal(hm_moe_layer_transform(l, NULL), HM_NOT_READY); /* router bias missing */
  HM_ASSERT_OK(hm_moe_layer_set_router_bias(l, logits));
  HM_ASSERT_OK(hm_moe_layer_transform(l, NULL));
  HM_ASSERT_OK(hm_moe_layer_forward(l, &a, NULL));
  a.router_logits = NULL;
  assert_int_equal(hm_moe_layer_forward(l, &a, NULL), HM_INVALID_ARGUMENT);
  a.tokens = -1;
  assert_int_equal(hm_moe_layer_forward(l, &a, NULL), HM_INVALID_ARGUMENT);
  a.tokens = 0;
  HM_ASSERT_OK(hm_moe_layer_forward(l, &a, NULL));
  hm_moe_layer_destroy(l);

  c.shared_experts = 0;
  c.router.correction_bias = false;
  HM_ASSERT_OK(hm_moe_layer_create(eng, &c, &l));
  assert_int_equal(hm_moe_layer_quantize_shared(l, w, w), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_moe_layer_set_router_bias(l, logits), HM_INVALID_ARGUMENT);
  hm_moe_layer_destroy(l);
  free(w);
  hm_engine_destroy(eng);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(silu_with_shared_experts),
      cmocka_unit_test(caller_ids_with_masked_slots),
      cmocka_unit_test(dense_shared_pair),
      cmocka_unit_test(gelu_softmax_router),
      cmocka_unit_test(squared_relu_two_shared),
      cmocka_unit_test(int8_activations),
      cmocka_unit_test(auto_layout_and_stats),
      cmocka_unit_test(launches_per_layout),
      cmocka_unit_test(model_layers_are_the_layers_gemms),
      cmocka_unit_test(fused_shared_expert_weights),
      cmocka_unit_test(model_presets),
      cmocka_unit_test(bad_configs_and_calls_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
