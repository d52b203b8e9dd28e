/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The front of a decode step: routing (or the caller's ids), alignment and the
 * permutation into expert order as one kernel (kernels/moe_front.cuh), where they would
 * be three dependent launches. On the host the same stages run in turn and count as the
 * one launch they are on a GPU, so launch counts read the same on both backends.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "moe_internal.h"

/* The kernel's static shared memory: what hm_align_in_block and hm_moe_front declare. */
bool hm_moe_front_fits(int64_t experts, int top_k) {
  int64_t words = 3 * experts + 1 + HM_ALIGN_WARPS * experts + HM_ALIGN_WARPS +
                  (int64_t)HM_FRONT_MAX_TOKENS * (2 * top_k + 1);
  return words * (int64_t)sizeof(int32_t) <= 48 * 1024;
}

hm_status hm_moe_front_kernel(hm_moe_exec *x, hm_kernel **slot, const hm_moe_router_config *router,
                              int64_t experts, hm_kernel **out) {
  char defines[640];
  HM_CHECK(hm_moe_router_defines(router, defines, sizeof(defines)));
  size_t used = strlen(defines);
  int n = snprintf(defines + used, sizeof(defines) - used, "#define HM_ALIGN_E %lld\n", (long long)experts);
  if (n < 0 || (size_t)n >= sizeof(defines) - used) HM_FAIL(HM_INTERNAL, "front kernel defines too long");
  return hm_moe_kernel_get(x, slot, "hm_moe_front", defines, "moe_front.cuh", out);
}

static hm_status check_args(const hm_moe_front_args *a) {
  HM_CHECK_NOT_NULL(a);
  HM_CHECK(hm_moe_router_config_check(a->router));
  if (a->tokens < 1 || a->tokens > HM_FRONT_MAX_TOKENS)
    HM_FAIL(HM_INVALID_ARGUMENT, "front of %lld tokens: it takes 1..%d", (long long)a->tokens,
            HM_FRONT_MAX_TOKENS);
  if (a->sets < 1 || a->sets > 2)
    HM_FAIL(HM_INVALID_ARGUMENT, "front with %d alignments: it takes 1 or 2", a->sets);
  HM_CHECK_NOT_NULL(a->align);
  HM_CHECK_NOT_NULL(a->meta);
  if (a->logits == NULL) HM_CHECK_NOT_NULL(a->given_ids);
  if (a->logits != NULL) HM_CHECK_NOT_NULL(a->topk_ids);
  if (a->logits != NULL) HM_CHECK_NOT_NULL(a->topk_weights);
  if (a->logits != NULL && a->router->correction_bias != (a->bias != NULL))
    HM_FAIL(HM_INVALID_ARGUMENT, "front: the router's correction_bias is %s but a bias is %s",
            a->router->correction_bias ? "on" : "off", a->bias ? "given" : "missing");
  int slots = a->router->top_k + a->appended;
  for (int s = 0; s < a->sets; s++) {
    const hm_moe_align_config *c = &a->align[s];
    hm_moe_align_sizes sizes;
    HM_CHECK(hm_moe_align_get_sizes(c, &sizes));
    if (c->tokens != a->tokens || c->top_k != slots || c->experts != a->align[0].experts ||
        c->layout != a->align[0].layout)
      HM_FAIL(HM_INVALID_ARGUMENT,
              "front alignment %d: %s, %lld tokens, top_k %d, %lld experts for %lld tokens of %d slots", s,
              hm_moe_layout_name(c->layout), (long long)c->tokens, c->top_k, (long long)c->experts,
              (long long)a->tokens, slots);
  }
  if (!hm_moe_front_fits(a->align[0].experts, a->router->top_k))
    HM_FAIL(HM_UNSUPPORTED, "front: %lld experts and top_k %d exceed one block's shared memory",
            (long long)a->align[0].experts, a->router->top_k);
  if (a->permute.dst == NULL) return HM_OK;
  if (a->permute.items != a->tokens * slots || a->permute.top_k != slots ||
      a->permute.row_of != a->meta[0].row_of)
    HM_FAIL(HM_INVALID_ARGUMENT, "front permutation of %lld items, top_k %d, not the alignment's rows",
            (long long)a->permute.items, a->permute.top_k);
  return hm_moe_permute_check(&a->permute);
}

static hm_status front_cuda(hm_moe_exec *x, hm_kernel **slot, const hm_moe_front_args *a) {
  hm_kernel *k = NULL;
  HM_CHECK(hm_moe_front_kernel(x, slot, a->router, a->align[0].experts, &k));
  struct hm_moe_front_params p = {
      .route = {.logits = a->logits,
                .bias = a->bias,
                .topk_ids = a->topk_ids,
                .topk_weights = a->topk_weights,
                .tokens = a->tokens,
                .scaling = a->router->scaling},
      .given_ids = a->given_ids,
      .sets = a->sets,
  };
  for (int s = 0; s < a->sets; s++) {
    hm_moe_align_sizes sizes;
    HM_CHECK(hm_moe_align_get_sizes(&a->align[s], &sizes));
    hm_moe_align_params_make(&a->align[s], a->appended, &sizes, NULL, &a->meta[s], NULL, &p.align[s]);
  }
  hm_moe_permute_params_make(&a->permute, &p.permute);
  /* A block a row to copy, each with the whole front; one block when nothing is copied. */
  int64_t grid = a->permute.dst != NULL ? a->permute.items : 1;
  return hm_moe_kernel_launch(x, k, grid, 1, HM_ALIGN_THREADS, &p);
}

static hm_status front_host(hm_moe_exec *x, const hm_moe_front_args *a) {
  hm_moe_exec steps = *x;
  if (a->logits != NULL)
    HM_CHECK(hm_moe_route_run(&steps, NULL, a->router, a->tokens, a->logits, a->bias, a->topk_ids,
                              a->topk_weights));
  const int32_t *ids = a->logits != NULL ? a->topk_ids : a->given_ids;
  for (int s = 0; s < a->sets; s++)
    HM_CHECK(hm_moe_align_run(&steps, NULL, &a->align[s], a->appended, ids, &a->meta[s], NULL));
  if (a->permute.dst != NULL) HM_CHECK(hm_moe_permute_run(&steps, NULL, &a->permute));
  x->launches++;
  return HM_OK;
}

hm_status hm_moe_front_run(hm_moe_exec *x, hm_kernel **slot, const hm_moe_front_args *a) {
  HM_CHECK(check_args(a));
  if (hm_moe_on_host(x)) return front_host(x, a);
  return front_cuda(x, slot, a);
}
