/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hm_moe_layer: configuration checks, the GEMM layers (routed gate_up and down with an
 * expert dimension; shared experts as one more expert of those, or as a dense pair when
 * their width differs), weights, router bias, transform.
 */
#include <stdlib.h>

#include "check.h"
#include "layer_internal.h"
#include "log.h"
#include "model_presets.h"

static hm_status check_scheme(const hm_quant_scheme *s) {
  bool wide = s->act == HM_BF16 || s->act == HM_F16;
  bool narrow = s->act == HM_F8E4M3 || s->act == HM_I8;
  if (!wide && !narrow)
    HM_FAIL(HM_INVALID_ARGUMENT, "MoE activation type %s is not bf16, f16, f8e4m3 or i8",
            hm_dtype_name(s->act));
  if (narrow && s->act_scale != HM_ACT_SCALE_TOKEN && s->act_scale != HM_ACT_SCALE_GROUP128)
    HM_FAIL(HM_INVALID_ARGUMENT, "MoE activation type %s needs per-token or 1x128 scales",
            hm_dtype_name(s->act));
  return HM_OK;
}

static hm_status check_config(const hm_moe_config *c) {
  HM_CHECK_NOT_NULL(c);
  if (c->magic != HM_MOE_CONFIG_MAGIC || c->size < sizeof(hm_moe_config))
    HM_FAIL(HM_INVALID_ARGUMENT, "MoE config not initialized with HM_MOE_CONFIG_INIT");
  if (c->hidden < 1 || c->hidden > INT32_MAX)
    HM_FAIL(HM_INVALID_ARGUMENT, "MoE hidden = %lld is outside [1, 2^31)", (long long)c->hidden);
  if (c->intermediate < 1 || c->intermediate > INT32_MAX)
    HM_FAIL(HM_INVALID_ARGUMENT, "MoE intermediate = %lld is outside [1, 2^31)", (long long)c->intermediate);
  HM_CHECK(hm_moe_router_config_check(&c->router));
  if (hm_moe_act_fn_of(c->activation) < 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "MoE activation %d is unknown", (int)c->activation);
  if (c->layout < HM_MOE_LAYOUT_AUTO || c->layout > HM_MOE_LAYOUT_MASKED)
    HM_FAIL(HM_INVALID_ARGUMENT, "MoE layout %d is unknown", (int)c->layout);
  if (c->shared_experts < 0 || c->shared_intermediate < 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "MoE shared_experts = %lld, shared_intermediate = %lld must not be negative",
            (long long)c->shared_experts, (long long)c->shared_intermediate);
  return check_scheme(&c->scheme);
}

static hm_status make_gemm(hm_moe_layer *l, int64_t n, int64_t k, int64_t experts, hm_layer **out) {
  hm_layer_config c = HM_LAYER_CONFIG_INIT;
  c.n = n;
  c.k = k;
  c.experts = experts;
  /* A fused shared expert is one more row of every token. */
  c.top_k = experts > 1 ? l->cfg.router.top_k + (int)l->shared_fused : 1;
  c.scheme = l->cfg.scheme;
  c.out = HM_BF16;
  return hm_layer_create(l->engine, &c, out);
}

/*
 * Shared experts of total width I are one more routed expert that every token takes with
 * weight 1: the GEMMs serve them without a pair of dense launches and an activation.
 */
static bool can_fuse_shared(const hm_moe_config *c, int64_t shared_width) {
  return hm_moe_fuses_shared(c->router.experts, c->router.top_k, shared_width, c->intermediate);
}

static hm_status make_gemms(hm_moe_layer *l) {
  const hm_moe_config *c = &l->cfg;
  int64_t experts = c->router.experts + l->shared_fused;
  HM_CHECK(make_gemm(l, l->gate_up_rows, c->hidden, experts, &l->gate_up));
  HM_CHECK(make_gemm(l, c->hidden, c->intermediate, experts, &l->down));
  if (l->shared_width == 0 || l->shared_fused) return HM_OK;
  int64_t rows = c->activation == HM_MOE_ACT_RELU2 ? l->shared_width : 2 * l->shared_width;
  HM_CHECK(make_gemm(l, rows, c->hidden, 1, &l->shared_gate_up));
  return make_gemm(l, c->hidden, l->shared_width, 1, &l->shared_down);
}

hm_status hm_moe_layer_create(hm_engine *engine, const hm_moe_config *config, hm_moe_layer **out) {
  HM_CHECK_NOT_NULL(out);
  *out = NULL;
  HM_CHECK_NOT_NULL(engine);
  HM_CHECK(check_config(config));
  hm_moe_layer *l = calloc(1, sizeof(*l));
  if (l == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "MoE layer");
  hm_status ret = HM_OK;
  l->engine = engine;
  l->cfg = *config;
  l->gate_up_rows = config->activation == HM_MOE_ACT_RELU2 ? config->intermediate : 2 * config->intermediate;
  int64_t per_shared = config->shared_intermediate > 0 ? config->shared_intermediate : config->intermediate;
  l->shared_width = config->shared_experts * per_shared;
  l->shared_fused = can_fuse_shared(config, l->shared_width);
  l->last_layout = HM_MOE_LAYOUT_AUTO;
  HM_CHECK_GOTO(make_gemms(l), fail);
  if (l->shared_width > 0 && !l->shared_fused && hm_engine_backend(engine) == HM_BACKEND_CUDA)
    HM_CHECK_GOTO(hm_stream_create(engine, &l->side), fail);
  if (config->router.correction_bias)
    HM_CHECK_GOTO(
        hm_mem_alloc(engine, (size_t)config->router.experts * sizeof(float), (void **)&l->router_bias), fail);
  HM_INFO(MOE, "MoE layer H=%lld I=%lld E=%lld top_k=%d shared=%lld%s", (long long)config->hidden,
          (long long)config->intermediate, (long long)config->router.experts, config->router.top_k,
          (long long)l->shared_width, l->shared_fused ? " (run as expert E of the routed GEMMs)" : "");
  *out = l;
  return HM_OK;
fail:
  hm_moe_layer_destroy(l);
  return ret;
}

void hm_moe_layer_destroy(hm_moe_layer *l) {
  if (l == NULL) return;
  for (int i = 0; i <= HM_MOE_STAGE_COUNT; i++) hm_event_destroy(l->events[i]);
  hm_stream_destroy(l->side);
  hm_mem_free(l->engine, l->workspace);
  hm_mem_free(l->engine, l->router_bias);
  hm_layer_destroy(l->gate_up);
  hm_layer_destroy(l->down);
  hm_layer_destroy(l->shared_gate_up);
  hm_layer_destroy(l->shared_down);
  free(l);
}

hm_moe_weights_at hm_moe_weights_of(const hm_moe_layer *l, bool shared) {
  int64_t routed = l->cfg.router.experts, all = routed + l->shared_fused;
  if (!shared) return (hm_moe_weights_at){l->gate_up, l->down, 0, routed, all};
  if (l->shared_fused) return (hm_moe_weights_at){l->gate_up, l->down, routed, 1, all};
  return (hm_moe_weights_at){l->shared_gate_up, l->shared_down, 0, 1, 1};
}

/* One GEMM layer's share of the experts at `at`, from src as kind says. */
static hm_status fill_one(hm_layer *layer, const hm_moe_weights_at *at, hm_moe_fill kind, const void *src,
                          hm_stream *stream) {
  switch (kind) {
    case HM_MOE_FILL_QUANTIZE: return hm_layer_quantize_experts(layer, at->first, at->count, src, NULL);
    case HM_MOE_FILL_HOST: return hm_layer_load_experts(layer, at->first, at->count, src);
    default: return hm_layer_load_experts_device(layer, at->first, at->count, src, stream);
  }
}

hm_status hm_moe_fill_experts(hm_moe_layer *l, bool shared, hm_moe_fill kind, const void *gate_up,
                              const void *down, hm_stream *stream) {
  HM_CHECK_NOT_NULL(l);
  HM_CHECK_NOT_NULL(gate_up);
  HM_CHECK_NOT_NULL(down);
  if (shared && l->shared_width == 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "shared expert weights given to a layer configured without shared experts");
  bool *filled = shared ? &l->shared_loaded : &l->loaded;
  *filled = l->transformed = false;
  const hm_moe_weights_at at = hm_moe_weights_of(l, shared);
  HM_CHECK(fill_one(at.gate_up, &at, kind, gate_up, stream));
  HM_CHECK(fill_one(at.down, &at, kind, down, stream));
  *filled = true;
  return HM_OK;
}

hm_status hm_moe_layer_quantize(hm_moe_layer *l, const float *gate_up, const float *down) {
  return hm_moe_fill_experts(l, false, HM_MOE_FILL_QUANTIZE, gate_up, down, NULL);
}

hm_status hm_moe_layer_load(hm_moe_layer *l, const hm_weights_view *gate_up, const hm_weights_view *down) {
  return hm_moe_fill_experts(l, false, HM_MOE_FILL_HOST, gate_up, down, NULL);
}

hm_status hm_moe_layer_quantize_shared(hm_moe_layer *l, const float *gate_up, const float *down) {
  return hm_moe_fill_experts(l, true, HM_MOE_FILL_QUANTIZE, gate_up, down, NULL);
}

hm_status hm_moe_layer_load_shared(hm_moe_layer *l, const hm_weights_view *gate_up,
                                   const hm_weights_view *down) {
  return hm_moe_fill_experts(l, true, HM_MOE_FILL_HOST, gate_up, down, NULL);
}

hm_status hm_moe_layer_set_router_bias(hm_moe_layer *l, const float *bias) {
  HM_CHECK_NOT_NULL(l);
  HM_CHECK_NOT_NULL(bias);
  if (!l->cfg.router.correction_bias)
    HM_FAIL(HM_INVALID_ARGUMENT, "a router bias was given to a layer whose router has no correction_bias");
  HM_CHECK(hm_mem_upload(l->engine, l->router_bias, bias, (size_t)l->cfg.router.experts * sizeof(float)));
  l->bias_set = true;
  return HM_OK;
}

hm_status hm_moe_layer_transform(hm_moe_layer *l, hm_stream *stream) {
  HM_CHECK_NOT_NULL(l);
  if (!l->loaded) HM_FAIL(HM_NOT_READY, "MoE transform before the expert weights were loaded or quantized");
  if (l->shared_width > 0 && !l->shared_loaded)
    HM_FAIL(HM_NOT_READY, "MoE transform before the shared expert weights were loaded or quantized");
  if (l->cfg.router.correction_bias && !l->bias_set)
    HM_FAIL(HM_NOT_READY, "MoE transform before the router's correction bias was set");
  l->transformed = false;
  HM_CHECK(hm_layer_transform(l->gate_up, stream));
  HM_CHECK(hm_layer_transform(l->down, stream));
  if (l->shared_gate_up != NULL) {
    HM_CHECK(hm_layer_transform(l->shared_gate_up, stream));
    HM_CHECK(hm_layer_transform(l->shared_down, stream));
  }
  if (hm_engine_backend(l->engine) == HM_BACKEND_CUDA) HM_CHECK(hm_moe_compile_kernels(l));
  l->transformed = true;
  return HM_OK;
}
