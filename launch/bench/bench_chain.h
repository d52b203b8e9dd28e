/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Kernel mode's --chain R: a timed sample is R forwards back to back, as a serving
 * engine runs layer after layer in one CUDA graph, so the fixed cost of a lone launch
 * (launch latency, first DRAM round trip, tail) is spread over R. Each member reads
 * weights no other member of the sample read: dense members are distinct layers, MoE
 * members distinct routings of one layer. Times are per forward. With --warm-next 1 each
 * member names the next one's layer as the layer that runs after it (next_layer), as an
 * engine that knows its layer order may.
 */
#ifndef HM_BENCH_CHAIN_H
#define HM_BENCH_CHAIN_H

#include "bench/bench_gemm.h"

/* Seed of chain member j; member 0 keeps the seed, so --chain 1 runs what it ran without it. */
uint64_t hm_bench_chain_seed(uint64_t seed, int member);

/*
 * Layers of one scheme a chain of count members needs: count for dense, one for MoE,
 * whose experts' weights are GBs a copy (more than host time or memory affords).
 */
int hm_bench_chain_layers(const hm_bench_gemm_shape *shape, int count);

/* The members' routed inputs at one M, each from its own seed. */
typedef struct hm_bench_chain_inputs {
  int count;
  hm_bench_gemm_inputs in[HM_BENCH_CHAIN_MAX];
} hm_bench_chain_inputs;

hm_status hm_bench_chain_inputs_make(const hm_bench_gemm_shape *shape, int64_t tokens, uint64_t seed,
                                     int count, hm_bench_chain_inputs *out);
void hm_bench_chain_inputs_free(hm_bench_chain_inputs *c);
/* Means over the members of hm_bench_gemm_bytes and of the active experts (1 for dense). */
double hm_bench_chain_bytes(const hm_bench_gemm_shape *shape, const hm_quant_scheme *scheme,
                            const hm_bench_chain_inputs *c);
double hm_bench_chain_active_experts(const hm_bench_gemm_shape *shape, const hm_bench_chain_inputs *c);

/* One run per member, each with its own A and C, over layers[member] (dense) or layers[0] (MoE). */
typedef struct hm_bench_chain {
  int count;
  hm_bench_gemm_run run[HM_BENCH_CHAIN_MAX];
} hm_bench_chain;

hm_status hm_bench_chain_make(hm_bench *b, const hm_bench_gemm_shape *shape,
                              const hm_bench_gemm_layer *layers, const hm_bench_chain_inputs *in,
                              hm_bench_chain *out);
void hm_bench_chain_free(hm_bench *b, hm_bench_chain *c);
/* Checks every member against the reference; #wrong summed over them. */
hm_status hm_bench_chain_check(hm_bench *b, const hm_bench_gemm_shape *shape,
                               const hm_bench_gemm_layer *layers, const hm_bench_chain_inputs *in,
                               hm_bench_chain *c, int64_t *wrong);
/* hm_bench_time of the whole chain as one sample, reported per forward. */
hm_status hm_bench_chain_time(hm_bench *b, hm_bench_chain *c, bool try_graph, hm_timing *out);

#endif
