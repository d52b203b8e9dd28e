/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The distributed layer's config agreement, the comm config check's counterpart for what
 * hm_comm does not know: scheme, activation, router and shared experts. A rank whose
 * shard could not be made reports why through the same exchange, so no rank is left
 * waiting for it in the first dispatch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe_dist.h"

#define HM_MOE_FINGERPRINT(X)                                             \
  X(activation, "activation", c->activation)                              \
  X(weight, "weight type", c->scheme.weight.weight)                       \
  X(scale, "scale type", c->scheme.weight.scale)                          \
  X(scale_kind, "scale kind", c->scheme.weight.scale_kind)                \
  X(group_k, "group_k", c->scheme.weight.group_k)                         \
  X(group_n, "group_n", c->scheme.weight.group_n)                         \
  X(zero_point, "zero_point", c->scheme.weight.zero_point)                \
  X(global_scale, "global_scale", c->scheme.weight.global_scale)          \
  X(act, "activation type", c->scheme.act)                                \
  X(act_scale, "activation scales", c->scheme.act_scale)                  \
  X(scoring, "router scoring", c->router.scoring)                         \
  X(groups, "router groups", c->router.groups)                            \
  X(topk_group, "router topk_group", c->router.topk_group)                \
  X(correction_bias, "router correction_bias", c->router.correction_bias) \
  X(renormalize, "router renormalize", c->router.renormalize)             \
  X(scaling, "router scaling (x1e6)", (int64_t)(c->router.scaling * 1e6)) \
  X(shared_experts, "shared_experts", c->shared_experts)                  \
  X(shared_intermediate, "shared_intermediate", c->shared_intermediate)

struct moe_fingerprint {
  int32_t status;
  char error[256];
#define HM_FP_FIELD_(field, name, value) int64_t field;
  HM_MOE_FINGERPRINT(HM_FP_FIELD_)
#undef HM_FP_FIELD_
};

static void fingerprint_of(const hm_moe_config *c, hm_status local, const char *error,
                           struct moe_fingerprint *f) {
  memset(f, 0, sizeof(*f));
  f->status = (int32_t)local;
  if (local != HM_OK) snprintf(f->error, sizeof(f->error), "%s", error);
  if (c == NULL) return;
#define HM_FP_SET_(field, name, value) f->field = (int64_t)(value);
  HM_MOE_FINGERPRINT(HM_FP_SET_)
#undef HM_FP_SET_
}

static hm_status report(const hm_comm *c, const struct moe_fingerprint *all) {
  int world = c->plan.world, me = c->plan.rank;
  for (int r = 0; r < world; r++) {
    if (all[r].status == HM_OK) continue;
    hm_status mine = (hm_status)all[me].status;
    HM_FAIL(mine != HM_OK ? mine : HM_REMOTE, "rank %d: rank %d could not make its MoE shard: %s", me, r,
            all[r].error);
  }
  for (int r = 1; r < world; r++) {
#define HM_FP_CMP_(field, name, value)                                                                    \
  if (all[r].field != all[0].field)                                                                       \
    HM_FAIL(HM_INVALID_ARGUMENT, "MoE config mismatch: rank %d has %s=%lld, rank 0 has %s=%lld", r, name, \
            (long long)all[r].field, name, (long long)all[0].field);
    HM_MOE_FINGERPRINT(HM_FP_CMP_)
#undef HM_FP_CMP_
  }
  return HM_OK;
}

hm_status hm_moe_dist_agree(hm_comm *c, const hm_moe_config *cfg, hm_status local, const char *error) {
  struct moe_fingerprint mine;
  fingerprint_of(local == HM_OK ? cfg : NULL, local, error, &mine);
  struct moe_fingerprint *all = calloc((size_t)c->plan.world, sizeof(*all));
  if (all == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "MoE config check of %d ranks", c->plan.world);
  hm_transport *t = c->boot ? c->boot : c->tr;
  hm_status ret = hm_comm_allgather_host(c, t, &mine, all, sizeof(mine), NULL, "MoE config check");
  if (ret == HM_OK) ret = report(c, all);
  free(all);
  return ret;
}
