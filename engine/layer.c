/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hm_layer: a quantized linear layer, dense or per expert. Create checks the scheme
 * against the engine's support matrix; load/quantize keep canonical weights on the
 * host; transform prepares them for the backend; forward runs the backend's GEMM.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/gemm_config_w8a8.h"
#include "layer_internal.h"
#include "numfmt.h"

static bool is_16bit_act(hm_dtype t) { return t == HM_F16 || t == HM_BF16; }

static hm_status check_act(const hm_quant_scheme *s) {
  if (is_16bit_act(s->act)) {
    if (s->act_scale != HM_ACT_SCALE_NONE)
      HM_FAIL(HM_INVALID_ARGUMENT, "%s activations take no activation scales", hm_dtype_name(s->act));
    return HM_OK;
  }
  if (s->act != HM_F8E4M3 && s->act != HM_I8)
    HM_FAIL(HM_INVALID_ARGUMENT, "activation type %s (use f16, bf16, f8e4m3, i8)", hm_dtype_name(s->act));
  if (s->act_scale != HM_ACT_SCALE_TOKEN && s->act_scale != HM_ACT_SCALE_GROUP128)
    HM_FAIL(HM_INVALID_ARGUMENT, "%s activations need per-token or 1x128 scales", hm_dtype_name(s->act));
  return HM_OK;
}

/* The kernels' rule for f16 accumulation, applied on every backend alike although the host
 * reference sums in f32 whatever it is asked. */
static hm_status check_fp16_accumulate(const hm_layer_config *c) {
  hm_gemm_config g;
  HM_CHECK(hm_gemm_config_from_layer(c, c->experts > 1 ? HM_GEMM_INDEXED : HM_GEMM_DENSE, 0, &g));
  return hm_gemm_f16_acc_check(&g.layer);
}

static hm_status check_config(const hm_layer_config *c) {
  if (c->size != sizeof(hm_layer_config) || c->magic != HM_LAYER_CONFIG_MAGIC)
    HM_FAIL(HM_INVALID_ARGUMENT, "layer config has size %u magic 0x%x (use HM_LAYER_CONFIG_INIT)", c->size, c->magic);
  if (c->n <= 0 || c->k <= 0 || c->experts <= 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "layer shape N=%lld K=%lld experts=%lld must be positive", (long long)c->n,
            (long long)c->k, (long long)c->experts);
  if (c->top_k < 0 || c->top_k > c->experts)
    HM_FAIL(HM_INVALID_ARGUMENT, "layer top_k=%d must be in [0, experts=%lld]", c->top_k,
            (long long)c->experts);
  if (c->out != HM_F16 && c->out != HM_BF16)
    HM_FAIL(HM_INVALID_ARGUMENT, "layer output type %s (use f16 or bf16)", hm_dtype_name(c->out));
  HM_CHECK(hm_quant_format_check(&c->scheme.weight, c->n, c->k));
  HM_CHECK(check_act(&c->scheme));
  return c->fp16_accumulate ? check_fp16_accumulate(c) : HM_OK;
}

hm_status hm_layer_create(hm_engine *engine, const hm_layer_config *config, hm_layer **out) {
  HM_CHECK_NOT_NULL(out);
  *out = NULL;
  HM_CHECK_NOT_NULL(engine);
  HM_CHECK_NOT_NULL(config);
  HM_CHECK(check_config(config));
  hm_layer *l = calloc(1, sizeof(*l));
  if (l == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "layer");
  l->engine = engine;
  l->cfg = *config;
  hm_status st = hm_plan_source_from_env(&l->plan_source);
  if (st == HM_OK && engine->kind == HM_BACKEND_CUDA) st = hm_layer_cuda_check(l);
  if (st != HM_OK) {
    free(l);
    return st;
  }
  *out = l;
  return HM_OK;
}

void hm_layer_destroy(hm_layer *l) {
  if (l == NULL) return;
  hm_layer_cuda_release(l);
  hm_host_weights_free(&l->host);
  free(l->host_bias);
  free(l);
}

static size_t bias_bytes(const hm_layer *l) { return (size_t)(l->cfg.experts * l->cfg.n) * 2; }

void hm_layer_install(hm_layer *l, hm_host_weights *w, void *bias) {
  hm_host_weights_free(&l->host);
  free(l->host_bias);
  l->host = *w;
  l->host_bias = bias;
  l->loaded = true;
  l->transformed = false;
}

static hm_status copy_array(void *dst, const void *src, int64_t count, size_t elem, const char *what) {
  if (count == 0) return HM_OK;
  if (src == NULL) HM_FAIL(HM_INVALID_ARGUMENT, "layer load: weights->%s must not be NULL for this format", what);
  memcpy(dst, src, (size_t)count * elem);
  return HM_OK;
}

hm_status hm_layer_check_bias(const hm_layer *l, const void *bias) {
  if (l->cfg.bias && bias == NULL) HM_FAIL(HM_INVALID_ARGUMENT, "the layer has a bias: pass one");
  if (!l->cfg.bias && bias != NULL) HM_FAIL(HM_INVALID_ARGUMENT, "the layer has no bias (config.bias is false)");
  return HM_OK;
}

hm_status hm_layer_load(hm_layer *l, const hm_weights_view *w) {
  HM_CHECK_NOT_NULL(l);
  HM_CHECK_NOT_NULL(w);
  HM_CHECK(hm_layer_check_bias(l, w->bias));
  const hm_quant_format *f = &l->cfg.scheme.weight;
  const int64_t e = l->cfg.experts, n = l->cfg.n, k = l->cfg.k;
  hm_status ret = HM_OK;
  hm_host_weights fresh;
  memset(&fresh, 0, sizeof(fresh));
  void *bias = NULL;
  HM_CHECK(hm_host_weights_alloc(&fresh, f, e, n, k));
  HM_CHECK_GOTO(copy_array(fresh.qweight, w->qweight, e * hm_quant_qweight_words(f, n, k), 4, "qweight"), fail);
  HM_CHECK_GOTO(copy_array(fresh.scales, w->scales, e * hm_quant_scale_count(f, n, k),
                           (size_t)hm_quant_scale_bytes(f), "scales"),
                fail);
  HM_CHECK_GOTO(copy_array(fresh.zeros, w->zeros, e * hm_quant_zero_words(f, n, k), 4, "zeros"), fail);
  HM_CHECK_GOTO(copy_array(fresh.global_scale, w->global_scale, f->global_scale ? e : 0, 4, "global_scale"), fail);
  if (l->cfg.bias) {
    bias = malloc(bias_bytes(l));
    if (bias == NULL) HM_FAIL_GOTO(HM_OUT_OF_MEMORY, fail, "layer bias of %zu bytes", bias_bytes(l));
    memcpy(bias, w->bias, bias_bytes(l));
  }
  hm_layer_install(l, &fresh, bias);
  return HM_OK;
fail:
  hm_host_weights_free(&fresh);
  free(bias);
  return ret;
}

hm_status hm_layer_quantize(hm_layer *l, const float *weights, const float *bias) {
  HM_CHECK_NOT_NULL(l);
  HM_CHECK_NOT_NULL(weights);
  HM_CHECK(hm_layer_check_bias(l, bias));
  hm_status ret = HM_OK;
  hm_host_weights fresh;
  memset(&fresh, 0, sizeof(fresh));
  void *out_bias = NULL;
  HM_CHECK(hm_host_weights_alloc(&fresh, &l->cfg.scheme.weight, l->cfg.experts, l->cfg.n, l->cfg.k));
  HM_CHECK_GOTO(hm_quantize_weights(weights, &fresh), fail);
  if (bias != NULL) {
    out_bias = malloc(bias_bytes(l));
    if (out_bias == NULL) HM_FAIL_GOTO(HM_OUT_OF_MEMORY, fail, "layer bias of %zu bytes", bias_bytes(l));
    HM_CHECK_GOTO(hm_convert_from_f32(l->cfg.out, bias, out_bias, l->cfg.experts * l->cfg.n), fail);
  }
  hm_layer_install(l, &fresh, out_bias);
  return HM_OK;
fail:
  hm_host_weights_free(&fresh);
  free(out_bias);
  return ret;
}

hm_status hm_layer_transform(hm_layer *l, hm_stream *stream) {
  HM_CHECK_NOT_NULL(l);
  if (!l->loaded) HM_FAIL(HM_NOT_READY, "layer transform before load or quantize");
  if (stream != NULL && stream->engine != l->engine)
    HM_FAIL(HM_INVALID_ARGUMENT, "layer transform on a stream of another engine");
  HM_CHECK(hm_layer_make_plans(l));
  if (l->engine->kind == HM_BACKEND_CUDA) HM_CHECK(hm_layer_cuda_transform(l, stream));
  l->transformed = true;
  return HM_OK;
}

hm_status hm_layer_forward(hm_layer *l, const hm_gemm_args *args, hm_stream *stream) {
  HM_CHECK_NOT_NULL(l);
  HM_CHECK_NOT_NULL(args);
  if (!l->transformed) HM_FAIL(HM_NOT_READY, "layer forward before transform");
  if (stream != NULL && stream->engine != l->engine)
    HM_FAIL(HM_INVALID_ARGUMENT, "layer forward on a stream of another engine");
  if (args->next_layer != NULL && args->next_layer->engine != l->engine)
    HM_FAIL(HM_INVALID_ARGUMENT, "layer forward: next_layer belongs to another engine");
  if (args->next_layer != NULL && !args->next_layer->transformed)
    HM_FAIL(HM_NOT_READY, "layer forward: next_layer is not transformed");
  if (l->engine->kind == HM_BACKEND_CUDA) return hm_layer_cuda_forward(l, args, stream);
  return hm_layer_host_forward(l, args);
}

hm_status hm_layer_gemm_base(const hm_layer *l, hm_gemm_type type, hm_gemm_config *out) {
  int arch = 0;
  HM_CHECK(hm_heuristics_arch(l->engine, &arch));
  return hm_gemm_config_from_layer(&l->cfg, type, arch, out);
}
