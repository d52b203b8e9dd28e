/* SPDX-License-Identifier: Apache-2.0 */
/*
 * MoE layers of a model preset with random weights, for the layer and e2e modes: the
 * hm_moe_config of a preset and scheme, host weights made once and loaded into as many
 * layers (device, host reference, the cycled layers of e2e) as needed, and the bytes
 * and flops of a forward.
 */
#ifndef HM_BENCH_MOE_H
#define HM_BENCH_MOE_H

#include "bench/bench.h"
#include "quant.h"

typedef struct hm_bench_moe_weights {
  hm_host_weights gate_up, down;               /* (E, 2I, H), (E, H, I) */
  hm_host_weights shared_gate_up, shared_down; /* (2*S*I, H), (H, S*I); empty without shared experts */
  float *router_bias;                          /* [E] with a correction bias, else NULL */
} hm_bench_moe_weights;

/* The layer configuration of the model in a scheme; layout from --layout ("auto" by default). */
hm_status hm_bench_moe_config(const hm_bench_opts *o, const hm_quant_scheme *scheme, hm_moe_config *out);
/* Whether the preset's activation had to be replaced by the closest one the layer has. */
bool hm_bench_moe_act_approximated(const hm_model_preset *m);

hm_status hm_bench_moe_weights_make(const hm_moe_config *c, uint64_t seed, hm_bench_moe_weights *out);
/* Only the shared experts and the router bias into w (zeroed by the caller), drawn as _make draws them. */
hm_status hm_bench_moe_weights_shared(const hm_moe_config *c, uint64_t seed, hm_bench_moe_weights *w);
void hm_bench_moe_weights_free(hm_bench_moe_weights *w);

/* The layer a mode runs: one GPU's whole layer, or this rank's part of the distributed one. */
typedef struct hm_bench_moe {
  hm_moe_layer *layer;
  hm_moe_dist *dist;
} hm_bench_moe;

hm_status hm_bench_moe_forward(const hm_bench_moe *m, const hm_moe_forward_args *args, hm_stream *stream);
void hm_bench_moe_destroy(hm_bench_moe *m);

/* A layer on engine with weights loaded, transformed and workspace reserved for max_tokens. */
hm_status hm_bench_moe_layer_make(hm_engine *engine, hm_stream *stream, const hm_moe_config *c,
                                  const hm_bench_moe_weights *w, int64_t max_tokens, hm_moe_layer **out);

/* Bytes of a forward that touched active routed experts: their weights, the shared experts', x, logits, y. */
double hm_bench_moe_bytes(const hm_moe_config *c, int64_t tokens, int64_t active_experts);
/*
 * The same for one of `ranks` ranks of a sharded layer, each with tokens of its own: the
 * active experts' weights spread over the ranks, the shared experts' on each.
 */
double hm_bench_moe_rank_bytes(const hm_moe_config *c, int64_t tokens, int64_t active_experts, int ranks);
/* 2 * tokens * (top_k routed + shared) * 3 * H * I. */
double hm_bench_moe_flops(const hm_moe_config *c, int64_t tokens);
/* Bytes of all the weights of one layer (routed and shared), to size what fits in memory. */
double hm_bench_moe_layer_bytes(const hm_moe_config *c);

#endif
