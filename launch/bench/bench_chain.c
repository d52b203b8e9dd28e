/* SPDX-License-Identifier: Apache-2.0 */
/* The members of a kernel-mode chain: their seeds, inputs and runs, checked and timed as one sample. */
#include <string.h>

#include "bench/bench_align.h"
#include "bench/bench_chain.h"
#include "check.h"

/* Far apart, so no member's seed (nor the +7 its rows use) meets another member's or another M's. */
#define MEMBER_SEED_STRIDE 1000003u

uint64_t hm_bench_chain_seed(uint64_t seed, int member) {
  return seed + (uint64_t)member * MEMBER_SEED_STRIDE;
}

/*
 * Dense members are distinct layers: each forward reads weights that are cold after the
 * flush, and that would not stay in L2 across a serving engine's layers either (R x
 * 34.9 MB for N = K = 8192 W4A16 exceeds the H200's 50 MB L2 from R = 2). MoE members
 * share the layer; distinct routings touch distinct experts at decode sizes. Where the
 * routings overlap a later member may find an expert in L2 that a new layer would not.
 */
int hm_bench_chain_layers(const hm_bench_gemm_shape *shape, int count) {
  return shape->type == HM_GEMM_DENSE ? count : 1;
}

hm_status hm_bench_chain_inputs_make(const hm_bench_gemm_shape *shape, int64_t tokens, uint64_t seed,
                                     int count, hm_bench_chain_inputs *out) {
  memset(out, 0, sizeof(*out));
  hm_status ret = HM_OK;
  for (; out->count < count; out->count++)
    HM_CHECK_GOTO(
        hm_bench_gemm_inputs_make(shape, tokens, hm_bench_chain_seed(seed, out->count), &out->in[out->count]),
        fail);
  return HM_OK;
fail:
  hm_bench_chain_inputs_free(out);
  return ret;
}

void hm_bench_chain_inputs_free(hm_bench_chain_inputs *c) {
  for (int j = 0; j < c->count; j++) hm_bench_gemm_inputs_free(&c->in[j]);
  c->count = 0;
}

double hm_bench_chain_bytes(const hm_bench_gemm_shape *shape, const hm_quant_scheme *scheme,
                            const hm_bench_chain_inputs *c) {
  double sum = 0;
  for (int j = 0; j < c->count; j++) sum += hm_bench_gemm_bytes(shape, scheme, &c->in[j]);
  return sum / c->count;
}

double hm_bench_chain_active_experts(const hm_bench_gemm_shape *shape, const hm_bench_chain_inputs *c) {
  if (shape->type == HM_GEMM_DENSE) return 1;
  double sum = 0;
  for (int j = 0; j < c->count; j++)
    sum += (double)hm_bench_active_experts(c->in[j].ids, c->in[j].tokens * shape->top_k, shape->experts);
  return sum / c->count;
}

static const hm_bench_gemm_layer *member_layer(const hm_bench_gemm_shape *shape,
                                               const hm_bench_gemm_layer *layers, int count, int member) {
  return &layers[hm_bench_chain_layers(shape, count) > 1 ? member : 0];
}

hm_status hm_bench_chain_make(hm_bench *b, const hm_bench_gemm_shape *shape,
                              const hm_bench_gemm_layer *layers, const hm_bench_chain_inputs *in,
                              hm_bench_chain *out) {
  out->count = 0;
  hm_status ret = HM_OK;
  for (int j = 0; j < in->count; j++, out->count++)
    HM_CHECK_GOTO(
        hm_bench_gemm_run_make(b, shape, member_layer(shape, layers, in->count, j), &in->in[j], &out->run[j]),
        fail);
  /* The last member names none: the sample ends there, and the flush before the next evicts L2. */
  if (b->o.warm_next)
    for (int j = 0; j + 1 < out->count; j++) out->run[j].args.next_layer = out->run[j + 1].layer;
  return HM_OK;
fail:
  hm_bench_chain_free(b, out);
  return ret;
}

void hm_bench_chain_free(hm_bench *b, hm_bench_chain *c) {
  for (int j = 0; j < c->count; j++) hm_bench_gemm_run_free(b, &c->run[j]);
  c->count = 0;
}

hm_status hm_bench_chain_check(hm_bench *b, const hm_bench_gemm_shape *shape,
                               const hm_bench_gemm_layer *layers, const hm_bench_chain_inputs *in,
                               hm_bench_chain *c, int64_t *wrong) {
  *wrong = 0;
  for (int j = 0; j < c->count; j++) {
    int64_t member_wrong = 0;
    HM_CHECK(hm_bench_gemm_check(b, shape, member_layer(shape, layers, c->count, j), &in->in[j], &c->run[j],
                                 &member_wrong));
    *wrong += member_wrong;
  }
  return HM_OK;
}

/* The bench body: every member's forward, in order, on one stream (one graph when captured). */
static hm_status chain_forward(void *ctx, hm_stream *stream) {
  hm_bench_chain *c = ctx;
  for (int j = 0; j < c->count; j++) HM_CHECK(hm_bench_gemm_forward(&c->run[j], stream));
  return HM_OK;
}

/* The flush stays before the sample, outside the events; spread is relative, so it stays as measured. */
hm_status hm_bench_chain_time(hm_bench *b, hm_bench_chain *c, bool try_graph, hm_timing *out) {
  HM_CHECK(hm_bench_time(b, chain_forward, c, try_graph, out));
  out->median_us /= c->count;
  out->min_us /= c->count;
  out->max_us /= c->count;
  return HM_OK;
}
