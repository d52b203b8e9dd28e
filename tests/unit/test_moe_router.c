/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host router against a naive one that sorts every candidate by (choice desc, index
 * asc): softmax and sigmoid scoring, correction bias, grouped top-k (DeepSeek-V2 and -V3
 * shapes), renormalization, scaling, ties to the lower index, and refused configs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hm_test.h"

typedef struct cand {
  float v;
  int i;
} cand;

static int by_value_then_index(const void *a, const void *b) {
  const cand *x = a, *y = b;
  if (x->v != y->v) return x->v > y->v ? -1 : 1;
  return x->i - y->i;
}

/* The router's rules, written the slow and obvious way. */
static void naive_route(const hm_moe_router_config *c, const float *logits, const float *bias, int32_t *ids,
                        float *weights) {
  int E = (int)c->experts, size = E / c->groups;
  float score[HM_MOE_MAX_EXPERTS], choice[HM_MOE_MAX_EXPERTS], sum = 0.0f, mx = -INFINITY;
  for (int e = 0; e < E; e++) mx = fmaxf(mx, logits[e]);
  for (int e = 0; e < E; e++) {
    if (c->scoring == HM_MOE_SCORING_SIGMOID) {
      score[e] = 1.0f / (1.0f + expf(-logits[e]));
      choice[e] = c->correction_bias ? score[e] + bias[e] : score[e];
    } else {
      score[e] = expf(logits[e] - mx);
      sum += score[e];
      choice[e] = logits[e];
    }
  }
  for (int e = 0; c->scoring == HM_MOE_SCORING_SOFTMAX && e < E; e++) score[e] = score[e] / sum;
  cand groups[HM_MOE_MAX_GROUPS], all[HM_MOE_MAX_EXPERTS];
  for (int g = 0; g < c->groups; g++) {
    for (int j = 0; j < size; j++) all[j] = (cand){choice[g * size + j], g * size + j};
    qsort(all, (size_t)size, sizeof(cand), by_value_then_index);
    groups[g] = (cand){c->correction_bias && c->groups > 1 ? all[0].v + all[1].v : all[0].v, g};
  }
  qsort(groups, (size_t)c->groups, sizeof(cand), by_value_then_index);
  bool kept[HM_MOE_MAX_GROUPS] = {false};
  for (int n = 0; n < c->topk_group; n++) kept[groups[n].i] = true;
  int count = 0;
  for (int e = 0; e < E; e++)
    if (kept[e / size]) all[count++] = (cand){choice[e], e};
  qsort(all, (size_t)count, sizeof(cand), by_value_then_index);
  float wsum = 0.0f;
  for (int k = 0; k < c->top_k; k++) {
    ids[k] = all[k].i;
    weights[k] = score[all[k].i];
    wsum += weights[k];
  }
  for (int k = 0; k < c->top_k; k++) {
    if (c->renormalize) weights[k] = weights[k] / wsum;
    weights[k] = weights[k] * c->scaling;
  }
}

/* Routes T tokens of random logits both ways; ids must match exactly, weights closely. */
static void check_router(const hm_moe_router_config *c, int64_t T, float logit_step) {
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_router"));
  size_t E = (size_t)c->experts, n = (size_t)T * (size_t)c->top_k;
  float *logits = malloc((size_t)T * E * sizeof(float)), *bias = malloc(E * sizeof(float));
  int32_t *ids = malloc(n * sizeof(int32_t)), *ref_ids = malloc(n * sizeof(int32_t));
  float *w = malloc(n * sizeof(float)), *ref_w = malloc(n * sizeof(float));
  hm_rng_fill_normal(&rng, logits, (size_t)T * E, 2.0f);
  /* A step quantizes the logits so that ties are frequent. */
  for (size_t i = 0; logit_step > 0 && i < (size_t)T * E; i++)
    logits[i] = roundf(logits[i] / logit_step) * logit_step;
  hm_rng_fill_uniform(&rng, bias, E, -0.1f, 0.1f);
  hm_engine *eng = hm_test_host_engine();
  const float *b = c->correction_bias ? bias : NULL;
  HM_ASSERT_OK(hm_moe_route(eng, c, T, logits, b, ids, w, NULL));
  for (int64_t t = 0; t < T; t++)
    naive_route(c, logits + t * E, b, ref_ids + t * c->top_k, ref_w + t * c->top_k);
  for (size_t i = 0; i < n; i++) {
    if (ids[i] != ref_ids[i])
      fail_msg("token %zu slot %zu: id %d, naive %d", i / c->top_k, i % c->top_k, ids[i], ref_ids[i]);
    assert_true(fabsf(w[i] - ref_w[i]) <= 1e-6f * fabsf(ref_w[i]) + 1e-7f);
  }
  for (int64_t t = 0; c->renormalize && t < T; t++) {
    float s = 0.0f;
    for (int k = 0; k < c->top_k; k++) s += w[t * c->top_k + k];
    assert_true(fabsf(s - c->scaling) < 1e-4f * c->scaling);
  }
  hm_engine_destroy(eng);
  free(logits), free(bias), free(ids), free(ref_ids), free(w), free(ref_w);
}

static void softmax_topk(void **state) {
  (void)state;
  hm_moe_router_config c = HM_MOE_ROUTER_CONFIG_INIT;
  c.experts = 8;
  c.top_k = 2;
  check_router(&c, 50, 0.0f);
  c.experts = 16;
  c.top_k = 4;
  c.renormalize = true;
  check_router(&c, 77, 0.0f);
  c.experts = 60; /* not a multiple of 32: lanes past E on the GPU */
  c.top_k = 6;
  c.scaling = 0.5f;
  check_router(&c, 33, 0.0f);
}

static void deepseek_v3_grouped_sigmoid(void **state) {
  (void)state;
  hm_moe_router_config c = {HM_MOE_SCORING_SIGMOID, 256, 8, 8, 4, true, true, 2.5f};
  check_router(&c, 64, 0.0f);
}

static void deepseek_v2_grouped_softmax(void **state) {
  (void)state;
  hm_moe_router_config c = {HM_MOE_SCORING_SOFTMAX, 64, 6, 8, 3, false, false, 16.0f};
  check_router(&c, 40, 0.0f);
}

static void sigmoid_without_bias(void **state) {
  (void)state;
  hm_moe_router_config c = {HM_MOE_SCORING_SIGMOID, 32, 4, 1, 1, false, true, 1.0f};
  check_router(&c, 25, 0.0f);
}

static void ties_go_to_the_lower_index(void **state) {
  (void)state;
  hm_moe_router_config c = {HM_MOE_SCORING_SOFTMAX, 16, 4, 1, 1, false, true, 1.0f};
  check_router(&c, 100, 1.0f);
  hm_moe_router_config g = {HM_MOE_SCORING_SIGMOID, 64, 8, 8, 4, true, true, 2.5f};
  check_router(&g, 100, 0.5f);
  /* All logits equal: experts 0..k-1, in order; with groups, the lowest groups. */
  float logits[64] = {0};
  int32_t ids[8];
  float w[8], bias[64] = {0};
  hm_engine *eng = hm_test_host_engine();
  HM_ASSERT_OK(hm_moe_route(eng, &c, 1, logits, NULL, ids, w, NULL));
  for (int k = 0; k < 4; k++) assert_int_equal(ids[k], k);
  HM_ASSERT_OK(hm_moe_route(eng, &g, 1, logits, bias, ids, w, NULL));
  for (int k = 0; k < 8; k++) assert_int_equal(ids[k], k);
  hm_engine_destroy(eng);
}

static void bad_configs_are_refused(void **state) {
  (void)state;
  hm_engine *eng = hm_test_host_engine();
  float logits[16] = {0}, w[4], bias[16] = {0};
  int32_t ids[4];
  hm_moe_router_config good = {HM_MOE_SCORING_SIGMOID, 16, 4, 4, 2, true, true, 1.0f};
  HM_ASSERT_OK(hm_moe_route(eng, &good, 1, logits, bias, ids, w, NULL));
  HM_ASSERT_OK(hm_moe_route(eng, &good, 0, NULL, bias, NULL, NULL, NULL));
  struct {
    hm_moe_router_config c;
    const char *message;
  } bad[] = {
      {{HM_MOE_SCORING_SIGMOID, 16, 17, 1, 1, false, true, 1.0f}, "top_k = 17"},
      {{HM_MOE_SCORING_SIGMOID, 16, 0, 1, 1, false, true, 1.0f}, "top_k = 0"},
      {{HM_MOE_SCORING_SIGMOID, 16, 4, 3, 1, false, true, 1.0f}, "groups = 3"},
      {{HM_MOE_SCORING_SIGMOID, 16, 4, 4, 5, false, true, 1.0f}, "topk_group = 5"},
      {{HM_MOE_SCORING_SIGMOID, 16, 8, 4, 1, false, true, 1.0f}, "exceeds"},
      {{HM_MOE_SCORING_SIGMOID, 16, 4, 16, 4, true, true, 1.0f}, "two best"},
      {{HM_MOE_SCORING_SIGMOID, 16, 4, 1, 1, false, true, 0.0f}, "scaling"},
      {{HM_MOE_SCORING_SIGMOID, 0, 1, 1, 1, false, true, 1.0f}, "experts = 0"},
      {{(hm_moe_scoring)7, 16, 4, 1, 1, false, true, 1.0f}, "scoring 7"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    assert_int_equal(hm_moe_route(eng, &bad[i].c, 1, logits, NULL, ids, w, NULL), HM_INVALID_ARGUMENT);
    if (strstr(hm_last_error(), bad[i].message) == NULL)
      fail_msg("'%s' lacks '%s'", hm_last_error(), bad[i].message);
  }
  assert_int_equal(hm_moe_route(eng, &good, 1, logits, NULL, ids, w, NULL), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "bias is NULL"));
  assert_int_equal(hm_moe_route(eng, &good, -1, logits, bias, ids, w, NULL), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_moe_route(eng, &good, 1, NULL, bias, ids, w, NULL), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_moe_route(NULL, &good, 1, logits, bias, ids, w, NULL), HM_INVALID_ARGUMENT);
  hm_engine_destroy(eng);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(softmax_topk),
      cmocka_unit_test(deepseek_v3_grouped_sigmoid),
      cmocka_unit_test(deepseek_v2_grouped_softmax),
      cmocka_unit_test(sigmoid_without_bias),
      cmocka_unit_test(ties_go_to_the_lower_index),
      cmocka_unit_test(bad_configs_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
