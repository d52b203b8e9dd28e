/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The router: logits [T, E] -> top-k ids and f32 weights, on the host or the GPU
 * (kernels/moe_router.cuh). The rules are those of hm_moe_router_config in humming/moe.h.
 */
#include <math.h>
#include <stdio.h>

#include "check.h"
#include "kernels/moe_router.cuh"
#include "moe_internal.h"

hm_status hm_moe_router_config_check(const hm_moe_router_config *c) {
  HM_CHECK_NOT_NULL(c);
  if (c->scoring != HM_MOE_SCORING_SOFTMAX && c->scoring != HM_MOE_SCORING_SIGMOID)
    HM_FAIL(HM_INVALID_ARGUMENT, "router scoring %d is neither softmax nor sigmoid", (int)c->scoring);
  if (c->experts < 1 || c->experts > HM_MOE_MAX_EXPERTS)
    HM_FAIL(HM_INVALID_ARGUMENT, "router experts = %lld is outside [1, %d]", (long long)c->experts,
            HM_MOE_MAX_EXPERTS);
  if (c->top_k < 1 || c->top_k > c->experts || c->top_k > HM_MOE_MAX_TOP_K)
    HM_FAIL(HM_INVALID_ARGUMENT, "router top_k = %d is outside [1, min(experts = %lld, %d)]", c->top_k,
            (long long)c->experts, HM_MOE_MAX_TOP_K);
  if (c->groups < 1 || c->groups > HM_MOE_MAX_GROUPS || c->experts % c->groups != 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "router groups = %d must divide experts = %lld and be in [1, %d]", c->groups,
            (long long)c->experts, HM_MOE_MAX_GROUPS);
  if (c->topk_group < 1 || c->topk_group > c->groups)
    HM_FAIL(HM_INVALID_ARGUMENT, "router topk_group = %d is outside [1, groups = %d]", c->topk_group,
            c->groups);
  int64_t group_size = c->experts / c->groups;
  if (c->top_k > c->topk_group * group_size)
    HM_FAIL(HM_INVALID_ARGUMENT, "router top_k = %d exceeds the %lld experts of topk_group = %d groups",
            c->top_k, (long long)(c->topk_group * group_size), c->topk_group);
  if (c->groups > 1 && c->correction_bias && group_size < 2)
    HM_FAIL(HM_INVALID_ARGUMENT,
            "router groups = %d leave one expert a group; a group's value with a correction "
            "bias is the sum of its two best",
            c->groups);
  if (!isfinite(c->scaling) || c->scaling <= 0.0f)
    HM_FAIL(HM_INVALID_ARGUMENT, "router scaling = %g must be positive and finite", (double)c->scaling);
  return HM_OK;
}

/* What the weights are made of (score) and what experts are ranked by (choice). */
static void token_scores(const hm_moe_router_config *c, const float *logits, const float *bias, float *score,
                         float *choice) {
  if (c->scoring == HM_MOE_SCORING_SIGMOID) {
    for (int64_t e = 0; e < c->experts; e++) {
      score[e] = 1.0f / (1.0f + expf(-logits[e]));
      choice[e] = c->correction_bias ? score[e] + bias[e] : score[e];
    }
    return;
  }
  float mx = -INFINITY, sum = 0.0f;
  for (int64_t e = 0; e < c->experts; e++) mx = fmaxf(mx, logits[e]);
  for (int64_t e = 0; e < c->experts; e++) {
    score[e] = expf(logits[e] - mx);
    sum += score[e];
  }
  for (int64_t e = 0; e < c->experts; e++) {
    score[e] = score[e] / sum;
    choice[e] = logits[e];
  }
}

/* Bit g set for each group kept; bit 0 alone without grouping. */
static uint32_t kept_groups(const hm_moe_router_config *c, const float *choice) {
  if (c->groups == 1) return 1u;
  int64_t size = c->experts / c->groups;
  float value[HM_MOE_MAX_GROUPS];
  for (int g = 0; g < c->groups; g++) {
    float top1 = -INFINITY, top2 = -INFINITY;
    for (int64_t e = g * size; e < (g + 1) * size; e++) {
      if (choice[e] > top1) {
        top2 = top1;
        top1 = choice[e];
      } else if (choice[e] > top2) {
        top2 = choice[e];
      }
    }
    value[g] = c->correction_bias ? top1 + top2 : top1;
  }
  uint32_t keep = 0;
  for (int n = 0; n < c->topk_group; n++) {
    int best = -1;
    for (int g = 0; g < c->groups; g++)
      if (!((keep >> g) & 1u) && (best < 0 || value[g] > value[best])) best = g;
    keep |= 1u << best;
  }
  return keep;
}

static void route_token(const hm_moe_router_config *c, const float *logits, const float *bias, int32_t *ids,
                        float *weights) {
  float score[HM_MOE_MAX_EXPERTS], choice[HM_MOE_MAX_EXPERTS];
  bool taken[HM_MOE_MAX_EXPERTS] = {false};
  token_scores(c, logits, bias, score, choice);
  uint32_t keep = kept_groups(c, choice);
  int64_t size = c->experts / c->groups;
  float sum = 0.0f;
  for (int k = 0; k < c->top_k; k++) {
    int64_t best = -1;
    for (int64_t e = 0; e < c->experts; e++) {
      if (taken[e] || !((keep >> (e / size)) & 1u)) continue;
      if (best < 0 || choice[e] > choice[best]) best = e;
    }
    taken[best] = true;
    ids[k] = (int32_t)best;
    weights[k] = score[best];
    sum += weights[k];
  }
  for (int k = 0; k < c->top_k; k++) {
    if (c->renormalize && sum > 0.0f) weights[k] = weights[k] / sum;
    weights[k] = weights[k] * c->scaling;
  }
}

hm_status hm_moe_router_defines(const hm_moe_router_config *c, char *buf, size_t len) {
  int n =
      snprintf(buf, len,
               "#define HM_ROUTER_E %lld\n#define HM_ROUTER_TOP_K %d\n#define HM_ROUTER_GROUPS %d\n"
               "#define HM_ROUTER_TOPK_GROUP %d\n#define HM_ROUTER_SIGMOID %d\n#define HM_ROUTER_BIAS %d\n"
               "#define HM_ROUTER_RENORM %d\n",
               (long long)c->experts, c->top_k, c->groups, c->topk_group,
               c->scoring == HM_MOE_SCORING_SIGMOID, c->correction_bias, c->renormalize);
  if (n < 0 || (size_t)n >= len) HM_FAIL(HM_INTERNAL, "router defines need %d bytes, %zu given", n, len);
  return HM_OK;
}

hm_status hm_moe_route_kernel(hm_moe_exec *x, hm_kernel **slot, const hm_moe_router_config *c,
                              hm_kernel **out) {
  char defines[512];
  HM_CHECK(hm_moe_router_defines(c, defines, sizeof(defines)));
  return hm_moe_kernel_get(x, slot, "hm_moe_router", defines, "moe_router.cuh", out);
}

static hm_status route_cuda(hm_moe_exec *x, hm_kernel **slot, const hm_moe_router_config *c, int64_t tokens,
                            const float *logits, const float *bias, int32_t *ids, float *weights) {
  hm_kernel *kernel = NULL;
  HM_CHECK(hm_moe_route_kernel(x, slot, c, &kernel));
  struct hm_moe_router_params p = {.logits = logits,
                                   .bias = bias,
                                   .topk_ids = ids,
                                   .topk_weights = weights,
                                   .tokens = tokens,
                                   .scaling = c->scaling};
  int64_t grid = (tokens + HM_ROUTER_WARPS - 1) / HM_ROUTER_WARPS;
  return hm_moe_kernel_launch(x, kernel, grid, 1, HM_ROUTER_WARPS * 32, &p);
}

hm_status hm_moe_route_run(hm_moe_exec *x, hm_kernel **slot, const hm_moe_router_config *c, int64_t tokens,
                           const float *logits, const float *bias, int32_t *topk_ids, float *topk_weights) {
  HM_CHECK(hm_moe_router_config_check(c));
  if (tokens < 0) HM_FAIL(HM_INVALID_ARGUMENT, "router tokens = %lld is negative", (long long)tokens);
  if (tokens * c->top_k > INT32_MAX)
    HM_FAIL(HM_INVALID_ARGUMENT, "router tokens = %lld times top_k = %d does not fit int32 row ids",
            (long long)tokens, c->top_k);
  if (tokens == 0) return HM_OK;
  HM_CHECK_NOT_NULL(logits);
  HM_CHECK_NOT_NULL(topk_ids);
  HM_CHECK_NOT_NULL(topk_weights);
  if (c->correction_bias && bias == NULL)
    HM_FAIL(HM_INVALID_ARGUMENT, "router correction_bias is set but the bias is NULL");
  if (!c->correction_bias && bias != NULL)
    HM_FAIL(HM_INVALID_ARGUMENT, "a router bias was given but correction_bias is off");
  if (!hm_moe_on_host(x)) return route_cuda(x, slot, c, tokens, logits, bias, topk_ids, topk_weights);
  for (int64_t t = 0; t < tokens; t++)
    route_token(c, logits + t * c->experts, bias, topk_ids + t * c->top_k, topk_weights + t * c->top_k);
  x->launches++;
  return HM_OK;
}

hm_status hm_moe_route(hm_engine *engine, const hm_moe_router_config *config, int64_t tokens,
                       const float *logits, const float *bias, int32_t *topk_ids, float *topk_weights,
                       hm_stream *stream) {
  HM_CHECK_NOT_NULL(engine);
  hm_moe_exec x = {.engine = engine, .stream = stream};
  return hm_moe_route_run(&x, NULL, config, tokens, logits, bias, topk_ids, topk_weights);
}
