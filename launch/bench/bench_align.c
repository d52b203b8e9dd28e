/* SPDX-License-Identifier: Apache-2.0 */
/* Random routing and its alignment through hm_moe_align on the host backend. */
#include <stdlib.h>
#include <string.h>

#include "bench/bench_align.h"
#include "bench/bench_data.h"
#include "check.h"

/* Rejection keeps ids of a token distinct; top_k is small next to experts in every model. */
hm_status hm_bench_random_topk(int64_t tokens, int top_k, int64_t experts, int shared, uint64_t seed,
                               int32_t *ids, float *weights) {
  if (top_k > experts) HM_FAIL(HM_INVALID_ARGUMENT, "top_k %d > experts %lld", top_k, (long long)experts);
  if (shared < 0 || shared >= top_k)
    HM_FAIL(HM_INVALID_ARGUMENT, "%d shared experts with top_k %d", shared, top_k);
  const int routed = top_k - shared;
  uint64_t state = seed;
  for (int64_t t = 0; t < tokens; t++) {
    int32_t *row = ids + t * top_k;
    float sum = 0;
    for (int j = 0; j < top_k; j++) {
      if (j >= routed) {
        row[j] = (int32_t)(experts - top_k + j); /* the shared experts, in order */
      } else {
        bool dup;
        do {
          row[j] = (int32_t)(hm_bench_rng(&state) % (uint64_t)(experts - shared));
          dup = false;
          for (int i = 0; i < j; i++) dup |= row[i] == row[j];
        } while (dup);
      }
      weights[t * top_k + j] = 0.5f + (float)(hm_bench_rng(&state) >> 40) / 16777216.0f;
      sum += weights[t * top_k + j];
    }
    for (int j = 0; j < top_k; j++) weights[t * top_k + j] /= sum;
  }
  return HM_OK;
}

int64_t hm_bench_active_experts(const int32_t *ids, int64_t count, int64_t experts) {
  bool *seen = calloc((size_t)experts, 1);
  if (seen == NULL) return experts;
  int64_t active = 0;
  for (int64_t i = 0; i < count; i++) {
    if (ids[i] < 0 || ids[i] >= experts || seen[ids[i]]) continue;
    seen[ids[i]] = true;
    active++;
  }
  free(seen);
  return active;
}

static int64_t busiest_expert_rows(const int32_t *ids, int64_t count, int64_t experts) {
  int64_t *rows = calloc((size_t)experts, sizeof(int64_t));
  if (rows == NULL) return count;
  int64_t most = 0;
  for (int64_t i = 0; i < count; i++)
    if (ids[i] >= 0 && ids[i] < experts && ++rows[ids[i]] > most) most = rows[ids[i]];
  free(rows);
  return most;
}

static hm_status alloc_i32(hm_engine *engine, int64_t count, int32_t **out) {
  void *p = NULL;
  HM_CHECK(hm_mem_alloc(engine, (size_t)count * sizeof(int32_t), &p));
  *out = p;
  return HM_OK;
}

/* Allocates each array the layout uses (NULL members stay unwritten). */
static hm_status alloc_arrays(hm_engine *engine, const hm_bench_align *shape, hm_bench_align *out) {
  const hm_moe_align_config *c = &shape->config;
  const hm_moe_align_sizes *s = &shape->sizes;
  hm_moe_alignment *a = &out->arrays;
  bool padded = c->layout != HM_MOE_LAYOUT_MASKED;
  HM_CHECK(alloc_i32(engine, c->tokens * c->top_k, &a->row_of));
  HM_CHECK(alloc_i32(engine, c->experts, &a->expert_counts));
  if (padded) HM_CHECK(alloc_i32(engine, c->experts + 1, &a->expert_offsets));
  if (padded) HM_CHECK(alloc_i32(engine, 1, &a->num_padded));
  if (c->layout != HM_MOE_LAYOUT_INDEXED) return HM_OK;
  HM_CHECK(alloc_i32(engine, s->max_padded, &a->sorted_ids));
  return alloc_i32(engine, s->max_blocks, &a->expert_ids);
}

hm_status hm_bench_align_host(hm_engine *host, hm_moe_layout layout, int64_t tokens, int64_t experts,
                              int top_k, int block_m, const int32_t *ids, hm_bench_align *out) {
  memset(out, 0, sizeof(*out));
  hm_moe_align_config *c = &out->config;
  c->layout = layout;
  c->tokens = tokens;
  c->experts = experts;
  c->top_k = top_k;
  c->block_m = block_m;
  if (layout == HM_MOE_LAYOUT_MASKED) {
    int64_t most = busiest_expert_rows(ids, tokens * top_k, experts);
    c->max_m = (most + block_m - 1) / block_m * block_m;
    if (c->max_m == 0) c->max_m = block_m;
  }
  hm_status ret = HM_OK;
  void *workspace = NULL;
  HM_CHECK(hm_moe_align_get_sizes(c, &out->sizes));
  HM_CHECK_GOTO(alloc_arrays(host, out, out), fail);
  HM_CHECK_GOTO(hm_mem_alloc(host, out->sizes.workspace_bytes, &workspace), fail);
  HM_CHECK_GOTO(hm_moe_align(host, c, ids, &out->arrays, workspace, NULL), fail);
  hm_mem_free(host, workspace);
  return HM_OK;
fail:
  hm_mem_free(host, workspace);
  hm_bench_align_free(host, out);
  return ret;
}

static hm_status upload(hm_engine *engine, void *dst, const void *src, int64_t count) {
  return dst == NULL ? HM_OK : hm_mem_upload(engine, dst, src, (size_t)count * 4);
}

hm_status hm_bench_align_upload(hm_engine *engine, const hm_bench_align *host, hm_bench_align *out) {
  memset(out, 0, sizeof(*out));
  out->config = host->config;
  out->sizes = host->sizes;
  hm_status ret = HM_OK;
  const hm_moe_alignment *h = &host->arrays;
  hm_moe_alignment *d = &out->arrays;
  const hm_moe_align_config *c = &host->config;
  HM_CHECK_GOTO(alloc_arrays(engine, host, out), fail);
  HM_CHECK_GOTO(upload(engine, d->row_of, h->row_of, c->tokens * c->top_k), fail);
  HM_CHECK_GOTO(upload(engine, d->expert_counts, h->expert_counts, c->experts), fail);
  HM_CHECK_GOTO(upload(engine, d->expert_offsets, h->expert_offsets, c->experts + 1), fail);
  HM_CHECK_GOTO(upload(engine, d->num_padded, h->num_padded, 1), fail);
  HM_CHECK_GOTO(upload(engine, d->sorted_ids, h->sorted_ids, host->sizes.max_padded), fail);
  HM_CHECK_GOTO(upload(engine, d->expert_ids, h->expert_ids, host->sizes.max_blocks), fail);
  return HM_OK;
fail:
  hm_bench_align_free(engine, out);
  return ret;
}

void hm_bench_align_free(hm_engine *engine, hm_bench_align *a) {
  hm_moe_alignment *x = &a->arrays;
  hm_mem_free(engine, x->row_of);
  hm_mem_free(engine, x->expert_counts);
  hm_mem_free(engine, x->expert_offsets);
  hm_mem_free(engine, x->num_padded);
  hm_mem_free(engine, x->sorted_ids);
  hm_mem_free(engine, x->expert_ids);
  memset(x, 0, sizeof(*x));
}
