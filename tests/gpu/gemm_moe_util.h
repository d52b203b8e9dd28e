/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The MoE layouts of the device GEMM tests: a top-2 routing in which expert 1 gets no
 * tokens, and one run of each layout against the host reference (indexed gate-up gather
 * and down with top-k weights, a block of expert -1; grouped-contiguous with padded
 * segments; grouped-masked with rows past the counts). What runs the GEMM (a layer's
 * forward or one forced kernel) and the indexed block come from a gt_moe_runner.
 */
#ifndef TEST_GEMM_MOE_UTIL_H
#define TEST_GEMM_MOE_UTIL_H

#include "gemm_test_util.h"

#define GT_TOP_K 2

typedef struct gt_moe_runner {
  hm_engine *engine;
  gt_run_fn fn;
  void *ctx;
  int (*block_m)(void *ctx, int64_t valid_m); /* indexed metadata block for valid_m rows */
} gt_moe_runner;

/* Two distinct experts per token; expert 1 never chosen (an expert with 0 tokens). */
static inline void gt_route(hm_rng *rng, int64_t m, int64_t experts, int32_t *ids) {
  for (int64_t t = 0; t < m; t++) {
    int32_t a, b;
    do a = (int32_t)(hm_rng_next(rng) % (uint64_t)experts);
    while (a == 1);
    do b = (int32_t)(hm_rng_next(rng) % (uint64_t)experts);
    while (b == 1 || b == a);
    ids[t * GT_TOP_K] = a;
    ids[t * GT_TOP_K + 1] = b;
  }
}

typedef struct gt_indexed_meta {
  int32_t *sorted_ids, *expert_ids, num_padded;
  int64_t max_padded;
} gt_indexed_meta;

/* sorted_ids of the slots' ids per expert, padded to block_m with the sentinel (slots);
 * the last block, and every row past it up to max_padded, go to expert -1 (as moe_align
 * leaves them). */
static inline void gt_build_indexed(const int32_t *ids, int64_t slots, int64_t experts, int block_m,
                                    gt_indexed_meta *x) {
  x->max_padded = slots + (experts + 1) * block_m;
  x->sorted_ids = gt_alloc((size_t)x->max_padded * 4);
  x->expert_ids = gt_alloc((size_t)(x->max_padded / block_m + 1) * 4);
  int64_t p = 0;
  for (int32_t e = 0; e < experts; e++) {
    const int64_t start = p;
    for (int64_t s = 0; s < slots; s++)
      if (ids[s] == e) x->sorted_ids[p++] = (int32_t)s;
    while (p % block_m) x->sorted_ids[p++] = (int32_t)slots;
    for (int64_t b = start / block_m; b < p / block_m; b++) x->expert_ids[b] = e;
  }
  x->num_padded = (int32_t)(p + block_m);
  for (; p < x->max_padded; p++) x->sorted_ids[p] = (int32_t)slots;
  for (int64_t b = x->num_padded / block_m - 1; b < (x->max_padded + block_m - 1) / block_m; b++)
    x->expert_ids[b] = -1;
}

/* Top-k weights of `rows` output rows, uniform in [0, 1). */
static inline float *gt_topk_weights(hm_rng *rng, int64_t rows) {
  float *w = gt_alloc((size_t)rows * 4);
  hm_rng_fill_uniform(rng, w, (size_t)rows, 0.0f, 1.0f);
  return w;
}

/* An indexed GEMM over metadata x, A left to the caller: gate-up gathers token rows, down
 * reads slot rows, scaled by topk_w when given. */
static inline hm_gemm_args gt_indexed_args(const gt_indexed_meta *x, int64_t m, int block_m, int top_k,
                                           bool down, const float *topk_w) {
  return (hm_gemm_args){.type = HM_GEMM_INDEXED,
                        .m = m,
                        .sorted_ids = x->sorted_ids,
                        .expert_ids = x->expert_ids,
                        .num_padded = &x->num_padded,
                        .max_padded = x->max_padded,
                        .block_m = block_m,
                        .top_k = top_k,
                        .a_rows_per_token = down ? 1 : top_k,
                        .topk_weights = topk_w,
                        .routing_ready = down};
}

/* Per-expert counts of the slots' ids and segment starts in expert order, each segment
 * padded by 0..5 unused rows; returns the rows in all. */
static inline int64_t gt_contiguous_segments(hm_rng *rng, const int32_t *ids, int64_t slots, int64_t experts,
                                             int32_t **off, int32_t **cnt) {
  *off = gt_alloc((size_t)(experts + 1) * 4);
  *cnt = gt_alloc((size_t)experts * 4);
  int64_t rows = 0;
  for (int64_t e = 0; e < experts; e++) {
    for (int64_t s = 0; s < slots; s++) (*cnt)[e] += ids[s] == e;
    (*off)[e] = (int32_t)rows;
    rows += (*cnt)[e] + (int64_t)(hm_rng_next(rng) % 6);
  }
  (*off)[experts] = (int32_t)rows;
  return rows;
}

/* Per-expert counts of the slots' ids; returns max_m, the largest count and 3 rows past
 * it that stay unwritten. */
static inline int64_t gt_masked_counts(const int32_t *ids, int64_t slots, int64_t experts, int32_t **cnt) {
  *cnt = gt_alloc((size_t)experts * 4);
  int64_t max_m = 1;
  for (int64_t e = 0; e < experts; e++) {
    for (int64_t s = 0; s < slots; s++) (*cnt)[e] += ids[s] == e;
    if ((*cnt)[e] > max_m) max_m = (*cnt)[e];
  }
  return max_m + 3;
}

static inline bool gt_moe_check(const gt_case *c, const char *layout, int64_t m, const void *out,
                                const void *ref, int64_t rows) {
  char what[160];
  snprintf(what, sizeof(what), "%s %s", c->name, layout);
  const double err = gt_compare(out, ref, rows * c->n, c->out, c->n, what);
  const bool ok = err <= gt_tolerance(c);
  printf("%-48s M=%-4lld rel_err %.2e %s\n", what, (long long)m, err, ok ? "ok" : "FAIL");
  return ok;
}

/* An indexed run against the reference; past_bound: the device is told a count of
 * INT32_MAX, which the kernels hold to max_padded (gemm_sched.cuh hm_indexed_rows). */
static inline bool gt_moe_indexed_with(const gt_moe_runner *r, hm_rng *rng, const gt_case *c,
                                       const gt_layer_data *d, int64_t m, bool down, bool past_bound) {
  int32_t *ids = gt_alloc((size_t)(m * GT_TOP_K) * 4);
  gt_route(rng, m, c->experts, ids);
  gt_indexed_meta x;
  const int block_m = r->block_m(r->ctx, m * GT_TOP_K);
  gt_build_indexed(ids, m * GT_TOP_K, c->experts, block_m, &x);
  const int64_t a_rows = down ? m * GT_TOP_K : m, c_rows = m * GT_TOP_K;
  void *a = gt_random(rng, c->act, a_rows * c->k, 1.0f);
  float *topk_w = down ? gt_topk_weights(rng, c_rows) : NULL;
  hm_gemm_args args = gt_indexed_args(&x, m, block_m, GT_TOP_K, down, topk_w);
  args.a = a;
  void *out = gt_alloc((size_t)(c_rows * c->n) * 2), *ref = gt_alloc((size_t)(c_rows * c->n) * 2);
  gt_reference(c, d, &args, c_rows, ref);
  if (past_bound) x.num_padded = INT32_MAX;
  gt_device_run_with(r->engine, r->fn, r->ctx, &args, a_rows, c->k, c_rows, c->n, c->experts, out);
  char layout[48];
  snprintf(layout, sizeof(layout), "%s%s", down ? "indexed-down+topk_w" : "indexed-gate_up",
           past_bound ? " count INT32_MAX" : "");
  const bool ok = gt_moe_check(c, layout, m, out, ref, c_rows);
  free(ids), free(x.sorted_ids), free(x.expert_ids), free(a), free(topk_w), free(out), free(ref);
  return ok;
}

static inline bool gt_moe_indexed(const gt_moe_runner *r, hm_rng *rng, const gt_case *c,
                                  const gt_layer_data *d, int64_t m, bool down) {
  return gt_moe_indexed_with(r, rng, c, d, m, down, false);
}

/* Segments in expert order, each padded by 0..5 unused rows. */
static inline bool gt_moe_contiguous(const gt_moe_runner *r, hm_rng *rng, const gt_case *c,
                                     const gt_layer_data *d, int64_t m) {
  int32_t *ids = gt_alloc((size_t)(m * GT_TOP_K) * 4);
  gt_route(rng, m, c->experts, ids);
  int32_t *off, *cnt;
  const int64_t rows = gt_contiguous_segments(rng, ids, m * GT_TOP_K, c->experts, &off, &cnt);
  void *a = gt_random(rng, c->act, rows * c->k, 1.0f);
  hm_gemm_args args = {.type = HM_GEMM_GROUPED_CONTIGUOUS,
                       .m = rows,
                       .a = a,
                       .expert_offsets = off,
                       .expert_counts = cnt,
                       .routing_ready = true};
  void *out = gt_alloc((size_t)(rows * c->n) * 2), *ref = gt_alloc((size_t)(rows * c->n) * 2);
  gt_reference(c, d, &args, rows, ref);
  gt_device_run_with(r->engine, r->fn, r->ctx, &args, rows, c->k, rows, c->n, c->experts, out);
  const bool ok = gt_moe_check(c, "grouped-contiguous", m, out, ref, rows);
  free(ids), free(off), free(cnt), free(a), free(out), free(ref);
  return ok;
}

static inline bool gt_moe_masked(const gt_moe_runner *r, hm_rng *rng, const gt_case *c,
                                 const gt_layer_data *d, int64_t m) {
  int32_t *ids = gt_alloc((size_t)(m * GT_TOP_K) * 4);
  gt_route(rng, m, c->experts, ids);
  int32_t *cnt;
  const int64_t max_m = gt_masked_counts(ids, m * GT_TOP_K, c->experts, &cnt);
  const int64_t rows = c->experts * max_m;
  void *a = gt_random(rng, c->act, rows * c->k, 1.0f);
  hm_gemm_args args = {
      .type = HM_GEMM_GROUPED_MASKED, .m = max_m, .a = a, .expert_counts = cnt, .routing_ready = true};
  void *out = gt_alloc((size_t)(rows * c->n) * 2), *ref = gt_alloc((size_t)(rows * c->n) * 2);
  gt_reference(c, d, &args, rows, ref);
  gt_device_run_with(r->engine, r->fn, r->ctx, &args, rows, c->k, rows, c->n, c->experts, out);
  const bool ok = gt_moe_check(c, "grouped-masked", m, out, ref, rows);
  free(ids), free(cnt), free(a), free(out), free(ref);
  return ok;
}

#endif
