/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Token alignment on the host: counts per expert, padded segment offsets, then each id
 * in increasing order takes the next row of its expert. kernels/moe_align.cuh gives the
 * same arrays on the GPU.
 */
#include <stdlib.h>

#include "check.h"
#include "moe_internal.h"

/* The ids as the alignment reads them: with an appended expert, each token's last slot is it. */
typedef struct align_ids {
  const int32_t *ids;
  bool appended;
} align_ids;

/* Expert of id i; *given (when not NULL) is where the caller's array holds it, -1 for the appended slot. */
static int32_t id_at(const hm_moe_align_config *c, const align_ids *a, int64_t i, int64_t *given) {
  int64_t at = i;
  if (a->appended) {
    int64_t t = i / c->top_k, j = i % c->top_k;
    at = j == c->top_k - 1 ? -1 : t * (c->top_k - 1) + j;
  }
  if (given) *given = at;
  return at < 0 ? (int32_t)(c->experts - 1) : a->ids[at];
}

static hm_status count_rows(const hm_moe_align_config *c, const align_ids *a, int32_t *counts) {
  int64_t n = c->tokens * c->top_k;
  /* A caller's id may not name the appended expert: it is not one of theirs. */
  int64_t callers = c->experts - a->appended;
  for (int64_t i = 0; i < n; i++) {
    int64_t given;
    int32_t e = id_at(c, a, i, &given);
    if (e == -1) continue;
    if (given >= 0 && (e < -1 || e >= callers))
      HM_FAIL(HM_INVALID_ARGUMENT, "topk_ids[%lld] = %d is outside [-1, experts = %lld)", (long long)given, e,
              (long long)callers);
    counts[e]++;
  }
  if (c->layout != HM_MOE_LAYOUT_MASKED) return HM_OK;
  int64_t max_m = c->max_m > 0 ? c->max_m : c->tokens;
  for (int64_t e = 0; e < c->experts; e++)
    if (counts[e] > max_m)
      HM_FAIL(HM_INVALID_ARGUMENT,
              "expert %lld receives %d rows, more than max_m = %lld (repeated ids in a token?)", (long long)e,
              counts[e], (long long)max_m);
  return HM_OK;
}

static void write_offsets(const hm_moe_align_config *c, const int32_t *counts, int32_t *offsets) {
  offsets[0] = 0;
  for (int64_t e = 0; e < c->experts; e++)
    offsets[e + 1] = offsets[e] + (counts[e] + c->block_m - 1) / c->block_m * c->block_m;
}

/* Metadata that depends on the counts only. */
static void write_meta(const hm_moe_align_config *c, const hm_moe_align_sizes *s, const int32_t *counts,
                       const int32_t *offsets, const hm_moe_alignment *out) {
  int64_t E = c->experts;
  for (int64_t e = 0; out->expert_counts && e < E; e++) out->expert_counts[e] = counts[e];
  if (c->layout == HM_MOE_LAYOUT_MASKED) return;
  for (int64_t e = 0; out->expert_offsets && e <= E; e++) out->expert_offsets[e] = offsets[e];
  if (out->num_padded) *out->num_padded = offsets[E];
  if (c->layout != HM_MOE_LAYOUT_INDEXED) return;
  for (int64_t q = 0; out->sorted_ids && q < s->max_padded; q++)
    out->sorted_ids[q] = (int32_t)(c->tokens * c->top_k);
  if (out->expert_ids == NULL) return;
  for (int64_t b = 0; b < s->max_blocks; b++) out->expert_ids[b] = -1;
  for (int64_t e = 0; e < E; e++)
    for (int64_t b = offsets[e] / c->block_m; b < offsets[e + 1] / c->block_m; b++)
      out->expert_ids[b] = (int32_t)e;
}

static void place_rows(const hm_moe_align_config *c, const align_ids *a, const int32_t *offsets,
                       int32_t *next, const hm_moe_alignment *out) {
  int64_t n = c->tokens * c->top_k;
  int64_t max_m = c->max_m > 0 ? c->max_m : c->tokens;
  for (int64_t i = 0; i < n; i++) {
    int32_t e = id_at(c, a, i, NULL), row = -1;
    if (e >= 0) {
      int32_t rank = next[e]++;
      if (c->layout == HM_MOE_LAYOUT_MASKED) {
        row = (int32_t)(e * max_m + rank);
      } else if (c->layout == HM_MOE_LAYOUT_CONTIGUOUS) {
        row = offsets[e] + rank;
      } else {
        row = (int32_t)i;
        if (out->sorted_ids) out->sorted_ids[offsets[e] + rank] = (int32_t)i;
      }
    }
    if (out->row_of) out->row_of[i] = row;
  }
}

hm_status hm_moe_align_host(const hm_moe_align_config *c, bool appended, const hm_moe_align_sizes *sizes,
                            const int32_t *ids, const hm_moe_alignment *out) {
  hm_status ret = HM_OK;
  size_t E = (size_t)c->experts;
  int32_t *counts = calloc(E, sizeof(int32_t));
  int32_t *next = calloc(E, sizeof(int32_t));
  int32_t *offsets = calloc(E + 1, sizeof(int32_t));
  if (counts == NULL || next == NULL || offsets == NULL)
    HM_FAIL_GOTO(HM_OUT_OF_MEMORY, done, "alignment scratch for %zu experts", E);
  align_ids a = {ids, appended};
  HM_CHECK_GOTO(count_rows(c, &a, counts), done);
  if (c->layout != HM_MOE_LAYOUT_MASKED) write_offsets(c, counts, offsets);
  write_meta(c, sizes, counts, offsets, out);
  place_rows(c, &a, offsets, next, out);
done:
  free(counts);
  free(next);
  free(offsets);
  return ret;
}
