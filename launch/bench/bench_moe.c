/* SPDX-License-Identifier: Apache-2.0 */
/* hm_moe_layer of a preset with random weights; its bytes and flops. */
#include <stdlib.h>
#include <string.h>

#include "bench/bench_data.h"
#include "bench/bench_gemm.h"
#include "bench/bench_moe.h"
#include "check.h"

static hm_moe_layout moe_layout(const char *name) {
  if (strcmp(name, "indexed") == 0) return HM_MOE_LAYOUT_INDEXED;
  if (strcmp(name, "contiguous") == 0 || strcmp(name, "grouped_contiguous") == 0)
    return HM_MOE_LAYOUT_CONTIGUOUS;
  if (strcmp(name, "masked") == 0 || strcmp(name, "grouped_masked") == 0) return HM_MOE_LAYOUT_MASKED;
  return HM_MOE_LAYOUT_AUTO;
}

bool hm_bench_moe_act_approximated(const hm_model_preset *m) {
  return m->act == HM_MODEL_ACT_SWIGLU_OAI;
}

hm_status hm_bench_moe_config(const hm_bench_opts *o, const hm_quant_scheme *scheme, hm_moe_config *out) {
  const hm_model_preset *m = &o->model;
  hm_moe_config c = HM_MOE_CONFIG_INIT;
  c.hidden = m->hidden;
  c.intermediate = m->moe_intermediate;
  bool sigmoid = m->router == HM_MODEL_ROUTER_SIGMOID_GROUPED;
  c.router.scoring = sigmoid ? HM_MOE_SCORING_SIGMOID : HM_MOE_SCORING_SOFTMAX;
  c.router.experts = m->experts;
  c.router.top_k = m->top_k;
  c.router.groups = m->n_group;
  c.router.topk_group = m->topk_group;
  c.router.correction_bias = sigmoid;
  c.router.renormalize = m->renormalize;
  c.router.scaling = (float)m->routed_scaling;
  /* gpt-oss's clamped SwiGLU is not a layer activation; SiLU*up costs the same. */
  c.activation = m->act == HM_MODEL_ACT_GELU ? HM_MOE_ACT_GELU_MUL : HM_MOE_ACT_SILU_MUL;
  c.scheme = *scheme;
  c.layout = moe_layout(o->layout_name);
  c.shared_experts = m->shared_experts;
  c.shared_intermediate = m->moe_intermediate;
  *out = c;
  return HM_OK;
}

hm_status hm_bench_moe_weights_shared(const hm_moe_config *c, uint64_t seed, hm_bench_moe_weights *w) {
  const hm_quant_format *f = &c->scheme.weight;
  int64_t e = c->router.experts, h = c->hidden;
  int64_t shared = c->shared_experts * (c->shared_intermediate ? c->shared_intermediate : c->intermediate);
  if (shared > 0) {
    HM_CHECK(hm_bench_random_weights(&w->shared_gate_up, f, 1, 2 * shared, h, seed + 2));
    HM_CHECK(hm_bench_random_weights(&w->shared_down, f, 1, h, shared, seed + 3));
  }
  if (c->router.correction_bias) {
    w->router_bias = malloc((size_t)e * sizeof(float));
    if (w->router_bias == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "router bias");
    hm_bench_random_f32(w->router_bias, e, -0.1f, 0.1f, seed + 4);
  }
  return HM_OK;
}

hm_status hm_bench_moe_weights_make(const hm_moe_config *c, uint64_t seed, hm_bench_moe_weights *out) {
  memset(out, 0, sizeof(*out));
  const hm_quant_format *f = &c->scheme.weight;
  int64_t e = c->router.experts, h = c->hidden, i = c->intermediate;
  hm_status ret = HM_OK;
  HM_CHECK_GOTO(hm_bench_random_weights(&out->gate_up, f, e, 2 * i, h, seed), fail);
  HM_CHECK_GOTO(hm_bench_random_weights(&out->down, f, e, h, i, seed + 1), fail);
  HM_CHECK_GOTO(hm_bench_moe_weights_shared(c, seed, out), fail);
  return HM_OK;
fail:
  hm_bench_moe_weights_free(out);
  return ret;
}

void hm_bench_moe_weights_free(hm_bench_moe_weights *w) {
  hm_host_weights_free(&w->gate_up);
  hm_host_weights_free(&w->down);
  hm_host_weights_free(&w->shared_gate_up);
  hm_host_weights_free(&w->shared_down);
  free(w->router_bias);
  w->router_bias = NULL;
}

static hm_status load_weights(hm_moe_layer *l, const hm_moe_config *c, const hm_bench_moe_weights *w) {
  hm_weights_view gate_up = hm_host_weights_view(&w->gate_up), down = hm_host_weights_view(&w->down);
  HM_CHECK(hm_moe_layer_load(l, &gate_up, &down));
  if (c->shared_experts > 0) {
    hm_weights_view sg = hm_host_weights_view(&w->shared_gate_up), sd = hm_host_weights_view(&w->shared_down);
    HM_CHECK(hm_moe_layer_load_shared(l, &sg, &sd));
  }
  if (w->router_bias) HM_CHECK(hm_moe_layer_set_router_bias(l, w->router_bias));
  return HM_OK;
}

hm_status hm_bench_moe_layer_make(hm_engine *engine, hm_stream *stream, const hm_moe_config *c,
                                  const hm_bench_moe_weights *w, int64_t max_tokens, hm_moe_layer **out) {
  hm_moe_layer *l = NULL;
  HM_CHECK(hm_moe_layer_create(engine, c, &l));
  hm_status ret = HM_OK;
  HM_CHECK_GOTO(load_weights(l, c, w), fail);
  HM_CHECK_GOTO(hm_moe_layer_transform(l, stream), fail);
  HM_CHECK_GOTO(hm_moe_layer_reserve(l, max_tokens, stream), fail);
  HM_CHECK_GOTO(hm_stream_synchronize(stream), fail);
  *out = l;
  return HM_OK;
fail:
  hm_moe_layer_destroy(l);
  return ret;
}

hm_status hm_bench_moe_forward(const hm_bench_moe *m, const hm_moe_forward_args *args, hm_stream *stream) {
  return m->dist ? hm_moe_dist_forward(m->dist, args, stream) : hm_moe_layer_forward(m->layer, args, stream);
}

void hm_bench_moe_destroy(hm_bench_moe *m) {
  hm_moe_layer_destroy(m->layer);
  hm_moe_dist_destroy(m->dist);
  m->layer = NULL;
  m->dist = NULL;
}

static double shared_bytes(const hm_moe_config *c) {
  int64_t s = c->shared_experts * (c->shared_intermediate ? c->shared_intermediate : c->intermediate);
  if (s == 0) return 0;
  const hm_quant_format *f = &c->scheme.weight;
  return hm_bench_weight_bytes(f, 2 * s, c->hidden) + hm_bench_weight_bytes(f, c->hidden, s);
}

static double expert_bytes(const hm_moe_config *c) {
  const hm_quant_format *f = &c->scheme.weight;
  return hm_bench_weight_bytes(f, 2 * c->intermediate, c->hidden) +
         hm_bench_weight_bytes(f, c->hidden, c->intermediate);
}

double hm_bench_moe_bytes(const hm_moe_config *c, int64_t tokens, int64_t active_experts) {
  double io = (double)tokens * (double)c->hidden * 2 * 2 + (double)tokens * (double)c->router.experts * 4;
  return (double)active_experts * expert_bytes(c) + shared_bytes(c) + io;
}

double hm_bench_moe_rank_bytes(const hm_moe_config *c, int64_t tokens, int64_t active_experts, int ranks) {
  double all = hm_bench_moe_bytes(c, tokens, active_experts),
         routed = (double)active_experts * expert_bytes(c);
  return all - routed + routed / ranks;
}

double hm_bench_moe_flops(const hm_moe_config *c, int64_t tokens) {
  int64_t s = c->shared_experts * (c->shared_intermediate ? c->shared_intermediate : c->intermediate);
  double routed = (double)c->router.top_k * (double)c->intermediate;
  return 2.0 * (double)tokens * 3.0 * (double)c->hidden * (routed + (double)s);
}

double hm_bench_moe_layer_bytes(const hm_moe_config *c) {
  return (double)c->router.experts * expert_bytes(c) + shared_bytes(c);
}
