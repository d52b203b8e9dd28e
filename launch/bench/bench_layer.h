/* SPDX-License-Identifier: Apache-2.0 */
/* Inputs of one MoE layer forward and its check against the host backend (layer and e2e modes). */
#ifndef HM_BENCH_LAYER_H
#define HM_BENCH_LAYER_H

#include "bench/bench.h"
#include "bench/bench_moe.h"

typedef struct hm_bench_layer_inputs {
  int64_t tokens, hidden, experts;
  uint16_t *x_host;   /* [T, H] bf16 */
  float *logits_host; /* [T, E] */
  void *x, *y;        /* device [T, H] bf16 */
  float *logits;      /* device [T, E] */
  hm_moe_forward_args args;
  int64_t active_experts; /* distinct experts the router picks for these tokens (of every rank, sharded) */
} hm_bench_layer_inputs;

/* Random x and logits for tokens, uploaded; router_bias (or NULL) only counts active experts. */
hm_status hm_bench_layer_inputs_make(hm_bench *b, const hm_moe_config *c, const float *router_bias,
                                     int64_t tokens, uint64_t seed, hm_bench_layer_inputs *out);
void hm_bench_layer_inputs_free(hm_bench *b, hm_bench_layer_inputs *in);
/* Tokens the host reference checks out of tokens (all of them when it can afford it). */
int64_t hm_bench_layer_sample(const hm_bench *b, const hm_moe_config *c, int64_t tokens);
/* One forward of layer, the sampled tokens through ref on the host, #wrong over their rows. */
hm_status hm_bench_layer_check(hm_bench *b, const hm_moe_config *c, const hm_bench_moe *layer,
                               hm_moe_layer *ref, const hm_bench_layer_inputs *in, int64_t *wrong);

#endif
