/* SPDX-License-Identifier: Apache-2.0 */
/* The GEMM layers of a model preset (see model_layers.h). */
#include "model_layers.h"

#include "check.h"

static void add(hm_model_layer *out, int *count, const hm_quant_scheme *scheme, const char *role, int64_t n,
                int64_t k, int64_t experts, bool bias, int top_k, int shared) {
  hm_layer_config c = HM_LAYER_CONFIG_INIT;
  c.n = n;
  c.k = k;
  c.experts = experts;
  c.scheme = *scheme;
  c.out = HM_BF16; /* as moe/layer.c makes them */
  c.bias = bias;
  c.top_k = top_k;
  out[*count] = (hm_model_layer){c, role, shared, false};
  (*count)++;
}

hm_status hm_model_layers(const hm_model_preset *p, const hm_quant_scheme *scheme, int tp, int ep,
                          hm_model_layer *out, int *count) {
  HM_CHECK_NOT_NULL(p);
  HM_CHECK_NOT_NULL(scheme);
  HM_CHECK_NOT_NULL(out);
  HM_CHECK_NOT_NULL(count);
  *count = 0;
  if (tp < 1 || ep < 1 || p->experts % ep != 0 || p->moe_intermediate % tp != 0 ||
      (p->dense_layers > 0 && p->dense_intermediate % tp != 0))
    HM_FAIL(HM_INVALID_ARGUMENT, "model %s does not split over tp %d ep %d", p->name, tp, ep);
  const hm_model_routed routed = hm_model_preset_routed(p, tp, ep);
  const int64_t inter = p->moe_intermediate / tp;
  add(out, count, scheme, "experts.gate_up", 2 * inter, p->hidden, routed.experts, p->expert_bias,
      routed.top_k, routed.shared_fused);
  add(out, count, scheme, "experts.down", p->hidden, inter, routed.experts, p->expert_bias, routed.top_k,
      routed.shared_fused);
  out[*count - 1].a_per_slot = true; /* it reads the activation step's output, a row per slot */
  if (p->shared_experts > 0 && !routed.shared_fused) {
    const int64_t width = p->shared_experts * p->moe_intermediate / tp;
    add(out, count, scheme, "shared.gate_up", 2 * width, p->hidden, 1, false, 0, 0);
    add(out, count, scheme, "shared.down", p->hidden, width, 1, false, 0, 0);
  }
  if (p->dense_layers > 0 && p->dense_intermediate > 0) {
    add(out, count, scheme, "dense.gate_up", 2 * p->dense_intermediate / tp, p->hidden, 1, false, 0, 0);
    add(out, count, scheme, "dense.down", p->hidden, p->dense_intermediate / tp, 1, false, 0, 0);
  }
  return HM_OK;
}
