/* SPDX-License-Identifier: Apache-2.0 */
/* The model presets: numbers copied from each model's config.json. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "model_presets.h"

#define SOFTMAX HM_MODEL_ROUTER_SOFTMAX, 1, 1
#define GQA(heads, kv, dim) HM_MODEL_ATTN_GQA, heads, kv, dim, 0, 0, 0, 0
#define MLA(heads, v_dim, q_lora, kv_lora, nope, rope) \
  HM_MODEL_ATTN_MLA, heads, heads, v_dim, q_lora, kv_lora, nope, rope

static const hm_model_preset presets[] = {
    /* name, H, I, E, k, shared, router + groups, scaling, renorm, act, bias, layers, dense, dense I, attn,
       vocab */
    {"tiny", 128, 128, 8, 2, 0, SOFTMAX, 1.0, true, HM_MODEL_ACT_SILU, false, 2, 0, 256, GQA(4, 2, 32), 1024},
    {"deepseek-mini", 256, 128, 16, 4, 1, HM_MODEL_ROUTER_SIGMOID_GROUPED, 4, 2, 2.5, true, HM_MODEL_ACT_SILU,
     false, 4, 1, 512, MLA(4, 32, 128, 64, 32, 16), 4096},
    {"deepseek-v3", 7168, 2048, 256, 8, 1, HM_MODEL_ROUTER_SIGMOID_GROUPED, 8, 4, 2.5, true,
     HM_MODEL_ACT_SILU, false, 61, 3, 18432, MLA(128, 128, 1536, 512, 128, 64), 129280},
    {"qwen3-30b-a3b", 2048, 768, 128, 8, 0, SOFTMAX, 1.0, true, HM_MODEL_ACT_SILU, false, 48, 0, 6144,
     GQA(32, 4, 128), 151936},
    {"qwen3-235b-a22b", 4096, 1536, 128, 8, 0, SOFTMAX, 1.0, true, HM_MODEL_ACT_SILU, false, 94, 0, 12288,
     GQA(64, 4, 128), 151936},
    {"mixtral-8x7b", 4096, 14336, 8, 2, 0, SOFTMAX, 1.0, true, HM_MODEL_ACT_SILU, false, 32, 0, 14336,
     GQA(32, 8, 128), 32000},
    /* gpt-oss applies softmax to the top-k logits only, which is softmax + renormalize. */
    {"gpt-oss-120b", 2880, 2880, 128, 4, 0, SOFTMAX, 1.0, true, HM_MODEL_ACT_SWIGLU_OAI, true, 36, 0, 2880,
     GQA(64, 8, 64), 201088},
};

#undef SOFTMAX
#undef GQA
#undef MLA

int hm_model_preset_count(void) {
  return (int)HM_ARRAY_SIZE(presets);
}

const hm_model_preset *hm_model_preset_at(int i) {
  return i >= 0 && i < hm_model_preset_count() ? &presets[i] : NULL;
}

hm_status hm_model_preset_get(const char *name, hm_model_preset *out) {
  HM_CHECK_NOT_NULL(name);
  HM_CHECK_NOT_NULL(out);
  char known[256] = "";
  for (int i = 0; i < hm_model_preset_count(); i++) {
    if (strcmp(presets[i].name, name) == 0) {
      *out = presets[i];
      return HM_OK;
    }
    if (i) strncat(known, ", ", sizeof(known) - strlen(known) - 1);
    strncat(known, presets[i].name, sizeof(known) - strlen(known) - 1);
  }
  HM_FAIL(HM_INVALID_ARGUMENT, "unknown model '%s' (%s)", name, known);
}

hm_status hm_model_preset_check(const hm_model_preset *p) {
  HM_CHECK_NOT_NULL(p);
  if (p->hidden <= 0 || p->moe_intermediate <= 0 || p->experts <= 0 || p->layers <= 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "model %s: hidden, intermediate, experts and layers must be positive",
            p->name);
  if (p->top_k <= 0 || p->top_k > p->experts)
    HM_FAIL(HM_INVALID_ARGUMENT, "model %s: top_k %d must be in [1, experts=%lld]", p->name, p->top_k,
            (long long)p->experts);
  if (p->n_group <= 0 || p->experts % p->n_group != 0 || p->topk_group <= 0 || p->topk_group > p->n_group)
    HM_FAIL(HM_INVALID_ARGUMENT, "model %s: %d groups of %lld experts, top %d groups is not a valid grouping",
            p->name, p->n_group, (long long)p->experts, p->topk_group);
  if ((int64_t)p->topk_group * (p->experts / p->n_group) < p->top_k)
    HM_FAIL(HM_INVALID_ARGUMENT, "model %s: top %d groups hold fewer than top_k=%d experts", p->name,
            p->topk_group, p->top_k);
  if (p->dense_layers < 0 || p->dense_layers > p->layers || p->shared_experts < 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "model %s: dense layers %d / shared experts %d out of range", p->name,
            p->dense_layers, p->shared_experts);
  if (p->vocab <= 0) HM_FAIL(HM_INVALID_ARGUMENT, "model %s: vocab must be positive", p->name);
  if (p->heads <= 0 || p->kv_heads <= 0 || p->head_dim <= 0 || p->heads % p->kv_heads != 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "model %s: %d heads, %d kv heads of %d is not a valid attention shape",
            p->name, p->heads, p->kv_heads, p->head_dim);
  return HM_OK;
}

const char *hm_model_router_name(hm_model_router router) {
  return router == HM_MODEL_ROUTER_SIGMOID_GROUPED ? "sigmoid-grouped" : "softmax";
}

const char *hm_model_act_name(hm_model_act act) {
  switch (act) {
    case HM_MODEL_ACT_SILU: return "silu";
    case HM_MODEL_ACT_GELU: return "gelu";
    case HM_MODEL_ACT_SWIGLU_OAI: return "swiglu-oai";
  }
  return "invalid";
}

int64_t hm_model_expert_params(const hm_model_preset *p) {
  return 3 * p->hidden * p->moe_intermediate;
}

void hm_model_preset_describe(const hm_model_preset *p, char *buf, size_t len) {
  if (p == NULL || buf == NULL || len == 0) return;
  char router[64];
  if (p->router == HM_MODEL_ROUTER_SIGMOID_GROUPED)
    snprintf(router, sizeof(router), "sigmoid-grouped %d/%d x%.2g", p->topk_group, p->n_group,
             p->routed_scaling);
  else
    snprintf(router, sizeof(router), "softmax%s", p->renormalize ? "+renorm" : "");
  snprintf(buf, len, "%s H=%lld I=%lld E=%lld k=%d shared=%d router=%s act=%s layers=%d", p->name,
           (long long)p->hidden, (long long)p->moe_intermediate, (long long)p->experts, p->top_k,
           p->shared_experts, router, hm_model_act_name(p->act), p->layers);
}

bool hm_moe_fuses_shared(int64_t experts, int top_k, int64_t shared_width, int64_t intermediate) {
  return shared_width == intermediate && experts < HM_MOE_MAX_EXPERTS && top_k < HM_MOE_MAX_TOP_K;
}

hm_model_routed hm_model_preset_routed(const hm_model_preset *p, int tp, int ep) {
  const bool one_rank = tp == 1 && ep == 1;
  const bool fused =
      one_rank &&
      hm_moe_fuses_shared(p->experts, p->top_k, p->shared_experts * p->moe_intermediate, p->moe_intermediate);
  return (hm_model_routed){p->experts / ep + fused, one_rank ? p->top_k + fused : 1, fused};
}
