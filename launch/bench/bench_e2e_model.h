/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The model stack of the e2e mode: L decoder layers, each its attention projections
 * (bf16 GEMMs of the preset's shapes; the attention core over the KV cache is not
 * modelled), the router GEMM and a real hm_moe_layer (or a bf16 dense MLP for the
 * leading dense layers), then the LM head on the tokens that sample. Layers cycle over
 * a number of distinct weight sets, as many as fit in memory: each set is far larger
 * than L2, so reusing one never hits a cache.
 */
#ifndef HM_BENCH_E2E_MODEL_H
#define HM_BENCH_E2E_MODEL_H

#include "bench/bench.h"
#include "bench/bench_moe.h"

#define HM_E2E_MAX_GEMMS 8

/* One dense bf16 GEMM of a block: N x K, reading the hidden state or a scratch input. */
typedef struct hm_e2e_gemm {
  hm_layer *layer;
  int64_t n, k;
  bool from_x;
} hm_e2e_gemm;

/* The weights of one distinct layer. */
typedef struct hm_e2e_block {
  hm_e2e_gemm gemms[HM_E2E_MAX_GEMMS];
  int count;
  hm_bench_moe moe; /* none for a dense block */
} hm_e2e_block;

typedef struct hm_e2e_model {
  hm_bench *b;
  hm_moe_config moe;
  int layers, dense_layers;
  hm_e2e_block *moe_blocks, *dense_blocks;
  int moe_count, dense_count;
  hm_e2e_gemm lm_head;
  hm_comm *comm; /* the sharded MoE layers' (mpirun with --ep x --tp = ranks), else NULL */
  int64_t max_tokens;
  void *x, *y, *in_scratch, *out_scratch;
  float *logits;
  int64_t wrong; /* #wrong of the first MoE block against the host reference, -1 unchecked */
} hm_e2e_model;

/*
 * Builds the stack for scheme (MoE layers; the rest is bf16) for steps of up to
 * max_tokens. distinct 0 picks as many distinct MoE blocks as the device memory holds.
 */
hm_status hm_e2e_model_build(hm_bench *b, const hm_quant_scheme *scheme, int64_t max_tokens, int distinct,
                             hm_e2e_model *out);
void hm_e2e_model_destroy(hm_e2e_model *m);
/* Enqueues one batch step of tokens through every layer, and the LM head on sampled rows. */
hm_status hm_e2e_model_step(hm_e2e_model *m, int64_t tokens, int64_t sampled, hm_stream *stream);
/* Weight bytes of one MoE block and of the rest (dense blocks, LM head), for the header. */
double hm_e2e_moe_block_bytes(const hm_e2e_model *m);

#endif
