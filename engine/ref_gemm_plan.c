/* SPDX-License-Identifier: Apache-2.0 */
/* Validation of each GEMM layout's metadata and its reduction to a row plan. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ref_gemm_plan.h"

void hm_ref_plan_free(hm_ref_plan *plan) {
  if (plan == NULL) return;
  free(plan->expert_start);
  free(plan->a_row);
  free(plan->c_row);
  free(plan->row_weight);
  memset(plan, 0, sizeof(*plan));
}

/* Allocates the arrays for rows_per_expert (experts) and sets expert_start from it. */
static hm_status plan_alloc(hm_ref_plan *plan, int64_t experts, const int64_t *rows_per_expert,
                            bool weighted) {
  int64_t rows = 0;
  for (int64_t e = 0; e < experts; e++) rows += rows_per_expert[e];
  plan->experts = experts;
  plan->rows = rows;
  size_t n = rows > 0 ? (size_t)rows : 1;
  plan->expert_start = malloc(((size_t)experts + 1) * sizeof(int64_t));
  plan->a_row = malloc(n * sizeof(int64_t));
  plan->c_row = malloc(n * sizeof(int64_t));
  if (weighted) plan->row_weight = malloc(n * sizeof(float));
  if (plan->expert_start == NULL || plan->a_row == NULL || plan->c_row == NULL ||
      (weighted && plan->row_weight == NULL)) {
    hm_ref_plan_free(plan);
    HM_FAIL(HM_OUT_OF_MEMORY, "reference GEMM plan of %lld rows", (long long)rows);
  }
  plan->expert_start[0] = 0;
  for (int64_t e = 0; e < experts; e++)
    plan->expert_start[e + 1] = plan->expert_start[e] + rows_per_expert[e];
  return HM_OK;
}

/* Plan rows of expert e are rows first, first+1, ... of both A and C. */
static void fill_identity(hm_ref_plan *plan, int64_t e, int64_t first) {
  for (int64_t r = plan->expert_start[e]; r < plan->expert_start[e + 1]; r++) {
    plan->a_row[r] = first + (r - plan->expert_start[e]);
    plan->c_row[r] = plan->a_row[r];
  }
}

static hm_status build_dense(const hm_gemm_args *g, int64_t experts, hm_ref_plan *plan) {
  int64_t *counts = calloc((size_t)experts, sizeof(int64_t));
  if (counts == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "reference GEMM plan");
  counts[0] = g->m;
  hm_status ret = plan_alloc(plan, experts, counts, false);
  free(counts);
  HM_CHECK(ret);
  fill_identity(plan, 0, 0);
  return HM_OK;
}

static hm_status check_contiguous(const hm_gemm_args *g, int64_t experts) {
  const int32_t *off = g->expert_offsets, *cnt = g->expert_counts;
  HM_CHECK_NOT_NULL(g->expert_offsets);
  HM_CHECK_NOT_NULL(g->expert_counts);
  if (off[0] < 0) HM_FAIL(HM_INVALID_ARGUMENT, "expert_offsets[0] = %d is negative", off[0]);
  for (int64_t e = 0; e < experts; e++) {
    if (off[e + 1] < off[e])
      HM_FAIL(HM_INVALID_ARGUMENT, "expert_offsets[%lld] = %d is below expert_offsets[%lld] = %d",
              (long long)e + 1, off[e + 1], (long long)e, off[e]);
    if (cnt[e] < 0 || cnt[e] > off[e + 1] - off[e])
      HM_FAIL(HM_INVALID_ARGUMENT, "expert_counts[%lld] = %d does not fit its segment [%d, %d)", (long long)e,
              cnt[e], off[e], off[e + 1]);
  }
  if (off[experts] > g->m)
    HM_FAIL(HM_INVALID_ARGUMENT, "expert_offsets[%lld] = %d is past m = %lld rows", (long long)experts,
            off[experts], (long long)g->m);
  return HM_OK;
}

static hm_status build_grouped(const hm_gemm_args *g, int64_t experts, hm_ref_plan *plan) {
  bool masked = g->type == HM_GEMM_GROUPED_MASKED;
  if (masked) {
    HM_CHECK_NOT_NULL(g->expert_counts);
    for (int64_t e = 0; e < experts; e++)
      if (g->expert_counts[e] < 0 || g->expert_counts[e] > g->m)
        HM_FAIL(HM_INVALID_ARGUMENT, "expert_counts[%lld] = %d is outside [0, max_m = %lld]", (long long)e,
                g->expert_counts[e], (long long)g->m);
  } else {
    HM_CHECK(check_contiguous(g, experts));
  }
  int64_t *counts = malloc((size_t)experts * sizeof(int64_t));
  if (counts == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "reference GEMM plan");
  for (int64_t e = 0; e < experts; e++) counts[e] = g->expert_counts[e];
  hm_status ret = plan_alloc(plan, experts, counts, false);
  free(counts);
  HM_CHECK(ret);
  for (int64_t e = 0; e < experts; e++) fill_identity(plan, e, masked ? e * g->m : g->expert_offsets[e]);
  return HM_OK;
}

static hm_status check_indexed_args(const hm_gemm_args *g) {
  HM_CHECK_NOT_NULL(g->sorted_ids);
  HM_CHECK_NOT_NULL(g->expert_ids);
  HM_CHECK_NOT_NULL(g->num_padded);
  if (g->block_m < 1) HM_FAIL(HM_INVALID_ARGUMENT, "block_m = %d must be >= 1", g->block_m);
  if (g->top_k < 1) HM_FAIL(HM_INVALID_ARGUMENT, "top_k = %d must be >= 1", g->top_k);
  if (g->a_rows_per_token < 1 || g->top_k % g->a_rows_per_token != 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "a_rows_per_token = %d must divide top_k = %d (top_k or 1)",
            g->a_rows_per_token, g->top_k);
  if (g->m * g->top_k > INT32_MAX)
    HM_FAIL(HM_INVALID_ARGUMENT, "m * top_k = %lld does not fit the int32 row ids",
            (long long)g->m * g->top_k);
  if (*g->num_padded < 0 || *g->num_padded > g->max_padded)
    HM_FAIL(HM_INVALID_ARGUMENT, "*num_padded = %d is outside [0, max_padded = %lld]", *g->num_padded,
            (long long)g->max_padded);
  return HM_OK;
}

/*
 * Counts the rows of each expert and checks every id and expert of the padded range.
 * A repeated id would have two experts write one C row, so it is refused too.
 */
static hm_status count_indexed(const hm_gemm_args *g, int64_t experts, int64_t *counts) {
  hm_status ret = HM_OK;
  int64_t valid_ids = g->m * g->top_k;
  unsigned char *seen = calloc(valid_ids > 0 ? (size_t)valid_ids : 1, 1);
  if (seen == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "row id map of %lld entries", (long long)valid_ids);
  for (int64_t p = 0; p < *g->num_padded; p++) {
    int32_t id = g->sorted_ids[p];
    int32_t e = g->expert_ids[p / g->block_m];
    if (id < 0)
      HM_FAIL_GOTO(HM_INVALID_ARGUMENT, done, "sorted_ids[%lld] = %d is negative", (long long)p, id);
    if (e < -1 || e >= experts)
      HM_FAIL_GOTO(HM_INVALID_ARGUMENT, done, "expert_ids[%lld] = %d is outside [-1, %lld)",
                   (long long)(p / g->block_m), e, (long long)experts);
    if (id >= valid_ids || e < 0) continue;
    if (seen[id])
      HM_FAIL_GOTO(HM_INVALID_ARGUMENT, done, "sorted_ids[%lld] = %d repeats a row id", (long long)p, id);
    seen[id] = 1;
    counts[e]++;
  }
done:
  free(seen);
  return ret;
}

static void fill_indexed(const hm_gemm_args *g, hm_ref_plan *plan) {
  int64_t valid_ids = g->m * g->top_k;
  int64_t *next = plan->expert_start; /* advanced while filling, restored below */
  for (int64_t p = 0; p < *g->num_padded; p++) {
    int32_t id = g->sorted_ids[p];
    int32_t e = g->expert_ids[p / g->block_m];
    if (id >= valid_ids || e < 0) continue;
    int64_t r = next[e]++;
    plan->a_row[r] = id / g->a_rows_per_token;
    plan->c_row[r] = id;
    if (plan->row_weight != NULL) plan->row_weight[r] = g->topk_weights[id];
  }
  for (int64_t e = plan->experts; e > 0; e--) next[e] = next[e - 1];
  next[0] = 0;
}

static hm_status build_indexed(const hm_gemm_args *g, int64_t experts, hm_ref_plan *plan) {
  HM_CHECK(check_indexed_args(g));
  int64_t *counts = calloc((size_t)experts, sizeof(int64_t));
  if (counts == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "reference GEMM plan");
  hm_status ret = count_indexed(g, experts, counts);
  if (ret == HM_OK) ret = plan_alloc(plan, experts, counts, g->topk_weights != NULL);
  free(counts);
  HM_CHECK(ret);
  fill_indexed(g, plan);
  return HM_OK;
}

hm_status hm_ref_plan_build(const hm_gemm_args *args, int64_t experts, hm_ref_plan *plan) {
  HM_CHECK_NOT_NULL(args);
  HM_CHECK_NOT_NULL(plan);
  memset(plan, 0, sizeof(*plan));
  if (experts < 1) HM_FAIL(HM_INVALID_ARGUMENT, "experts = %lld must be >= 1", (long long)experts);
  if (args->m < 0 || args->m > INT32_MAX)
    HM_FAIL(HM_INVALID_ARGUMENT, "m = %lld is outside [0, 2^31)", (long long)args->m);
  switch (args->type) {
    case HM_GEMM_DENSE: return build_dense(args, experts, plan);
    case HM_GEMM_GROUPED_CONTIGUOUS:
    case HM_GEMM_GROUPED_MASKED: return build_grouped(args, experts, plan);
    case HM_GEMM_INDEXED: return build_indexed(args, experts, plan);
  }
  HM_FAIL(HM_INVALID_ARGUMENT, "unknown GEMM type %d", (int)args->type);
}
