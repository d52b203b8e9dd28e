/* SPDX-License-Identifier: Apache-2.0 */
/* The GEMM layers of a model preset (see choose_model.h). */
#include "check.h"
#include "heuristics/choose_model.h"

static void add(hm_choose_model_layer *out, int *count, const hm_quant_scheme *scheme, const char *role,
                int64_t n, int64_t k, int64_t experts, bool bias, int top_k) {
  hm_layer_config c = HM_LAYER_CONFIG_INIT;
  c.n = n;
  c.k = k;
  c.experts = experts;
  c.scheme = *scheme;
  c.out = scheme->act == HM_F16 ? HM_F16 : HM_BF16;
  c.bias = bias;
  c.top_k = top_k;
  out[*count] = (hm_choose_model_layer){c, role};
  (*count)++;
}

hm_status hm_choose_model_layers(const hm_model_preset *p, const hm_quant_scheme *scheme, int tp, int ep,
                                 hm_choose_model_layer *out, int *count) {
  HM_CHECK_NOT_NULL(p);
  HM_CHECK_NOT_NULL(scheme);
  HM_CHECK_NOT_NULL(out);
  HM_CHECK_NOT_NULL(count);
  *count = 0;
  if (tp < 1 || ep < 1 || p->experts % ep != 0 || p->moe_intermediate % tp != 0 ||
      (p->dense_layers > 0 && p->dense_intermediate % tp != 0))
    HM_FAIL(HM_INVALID_ARGUMENT, "model %s does not split over tp %d ep %d", p->name, tp, ep);
  const int64_t experts = p->experts / ep, inter = p->moe_intermediate / tp;
  const int top_k = hm_model_preset_launch_top_k(p, ep);
  add(out, count, scheme, "experts.gate_up", 2 * inter, p->hidden, experts, p->expert_bias, top_k);
  add(out, count, scheme, "experts.down", p->hidden, inter, experts, p->expert_bias, top_k);
  if (p->shared_experts > 0) {
    const int64_t width = p->shared_experts * p->moe_intermediate / tp;
    add(out, count, scheme, "shared.gate_up", 2 * width, p->hidden, 1, false, 1);
    add(out, count, scheme, "shared.down", p->hidden, width, 1, false, 1);
  }
  if (p->dense_layers > 0 && p->dense_intermediate > 0) {
    add(out, count, scheme, "dense.gate_up", 2 * p->dense_intermediate / tp, p->hidden, 1, false, 1);
    add(out, count, scheme, "dense.down", p->hidden, p->dense_intermediate / tp, 1, false, 1);
  }
  return HM_OK;
}
