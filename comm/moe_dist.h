/* SPDX-License-Identifier: Apache-2.0 */
/* The expert/tensor-parallel MoE layer, private to comm/: its object and its config check. */
#ifndef HM_COMM_MOE_DIST_H
#define HM_COMM_MOE_DIST_H

#include "comm.h"

struct hm_moe_dist {
  hm_engine *engine;
  hm_comm *comm;
  hm_moe_config cfg; /* the whole layer: every expert, the full intermediate */
  hm_comm_plan plan;
  hm_moe_layer *shard;  /* the local experts and TP slice, routed experts only */
  hm_moe_layer *shared; /* the shared experts as one expert that every token takes, or NULL */
  hm_comm_batch *batch;
  float *router_bias; /* engine [E], correction_bias only */
  bool bias_set;
  int32_t *ids;     /* engine [max_tokens, top_k]: the router's choice */
  float *weights;   /* engine [max_tokens, top_k] */
  int32_t *zeros;   /* engine [max_tokens]: every token to the shared layer's one expert */
  float *ones;      /* engine [max_tokens]: with weight 1 */
  void *shared_out; /* engine [max_tokens, H] bf16 */
};

/*
 * Every rank's outcome of create (local, with the reason in error) and its layer config
 * go to every rank; all fail together, naming the first rank that failed or differs.
 */
hm_status hm_moe_dist_agree(hm_comm *c, const hm_moe_config *cfg, hm_status local, const char *error);

#endif
