/* SPDX-License-Identifier: Apache-2.0 */
/* MoE layer configurations from the model presets of engine/model_presets.c. */
#include "check.h"
#include "model_presets.h"
#include "moe_internal.h"

hm_status hm_moe_config_for_model(const char *model, hm_moe_config *config) {
  HM_CHECK_NOT_NULL(config);
  hm_model_preset p;
  HM_CHECK(hm_model_preset_get(model, &p));
  if (p.act != HM_MODEL_ACT_SILU && p.act != HM_MODEL_ACT_GELU)
    HM_FAIL(HM_UNSUPPORTED, "model %s: activation %s is not one the MoE layer has", model,
            hm_model_act_name(p.act));
  if (p.expert_bias) HM_FAIL(HM_UNSUPPORTED, "model %s: expert GEMM biases are not supported", model);
  config->hidden = p.hidden;
  config->intermediate = p.moe_intermediate;
  config->activation = p.act == HM_MODEL_ACT_GELU ? HM_MOE_ACT_GELU_MUL : HM_MOE_ACT_SILU_MUL;
  bool sigmoid = p.router == HM_MODEL_ROUTER_SIGMOID_GROUPED;
  config->router = (hm_moe_router_config){
      .scoring = sigmoid ? HM_MOE_SCORING_SIGMOID : HM_MOE_SCORING_SOFTMAX,
      .experts = p.experts,
      .top_k = p.top_k,
      .groups = p.n_group,
      .topk_group = p.topk_group,
      .correction_bias = sigmoid,
      .renormalize = p.renormalize,
      .scaling = (float)p.routed_scaling,
  };
  config->shared_experts = p.shared_experts;
  config->shared_intermediate = p.moe_intermediate;
  return HM_OK;
}
