/* SPDX-License-Identifier: Apache-2.0 */
/* Uniform routing and its layouts for the tuner's bench (see tuner_routing.h). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "heuristics/tuner_routing.h"

/* A token's last `shared` slots take the last `shared` experts, as the MoE layer appends a
 * fused shared expert to every token's routing. Its routed slot s goes to the routed expert
 * after slot s - 1's, from a multiplicative hash of the token: distinct experts while the
 * routed slots are no more than the routed experts, spread uniformly over tokens. */
static int64_t expert_of(const hm_tuner_routing *r, int64_t token, int slot) {
  const int64_t routed = r->experts - r->shared;
  if (slot >= r->top_k - r->shared) return routed + (slot - (r->top_k - r->shared));
  const uint64_t h = (uint64_t)token * 2654435761u;
  return (int64_t)((h + (uint64_t)slot) % (uint64_t)routed);
}

static int64_t expert_of_slot(const hm_tuner_routing *r, int64_t s) {
  return expert_of(r, s / r->top_k, (int)(s % r->top_k));
}

static hm_status alloc_i32(int64_t count, int32_t **out) {
  *out = malloc((size_t)(count > 0 ? count : 1) * sizeof(int32_t));
  if (*out == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "tuner routing: %lld ids", (long long)count);
  return HM_OK;
}

static void count_rows(hm_tuner_routing *r) {
  memset(r->counts, 0, (size_t)r->experts * sizeof(int32_t));
  r->max_count = 0;
  for (int64_t s = 0; s < r->slots; s++) {
    const int64_t e = expert_of_slot(r, s);
    if (++r->counts[e] > r->max_count) r->max_count = r->counts[e];
  }
  r->starts[0] = 0;
  for (int64_t e = 0; e < r->experts; e++)
    r->starts[e + 1] = r->starts[e] + (r->counts[e] + r->block - 1) / r->block * r->block;
}

static void place_ids(hm_tuner_routing *r, int32_t *filled) {
  const int64_t padded = r->starts[r->experts];
  for (int64_t i = 0; i < padded; i++) r->sorted_ids[i] = (int32_t)r->slots;
  for (int64_t e = 0; e < r->experts; e++) {
    filled[e] = r->starts[e];
    for (int64_t i = r->starts[e]; i < r->starts[e + 1]; i += r->block)
      r->block_experts[i / r->block] = (int32_t)e;
  }
  for (int64_t s = 0; s < r->slots; s++) r->sorted_ids[filled[expert_of_slot(r, s)]++] = (int32_t)s;
}

hm_status hm_tuner_routing_make(int64_t tokens, int top_k, int64_t experts, int shared, int block,
                                hm_tuner_routing *out) {
  HM_CHECK_NOT_NULL(out);
  memset(out, 0, sizeof(*out));
  if (tokens < 0 || top_k < 1 || experts < 1 || top_k > experts || block < 1 || shared < 0 || shared >= top_k)
    HM_FAIL(HM_INVALID_ARGUMENT,
            "tuner routing: %lld tokens x top_k %d over %lld experts (%d shared by every token), block %d",
            (long long)tokens, top_k, (long long)experts, shared, block);
  /* Padded rows stay below INT32_MAX: they are int32 on the device. */
  if (tokens * top_k + experts * (block - 1) > INT32_MAX - 1)
    HM_FAIL(HM_INVALID_ARGUMENT, "tuner routing: %lld slots padded to %d overflow 32-bit row ids",
            (long long)(tokens * top_k), block);
  out->experts = experts;
  out->top_k = top_k;
  out->shared = shared;
  out->slots = tokens * top_k;
  out->block = block;
  hm_status ret = HM_OK;
  int32_t *filled = NULL;
  HM_CHECK_GOTO(alloc_i32(experts, &out->counts), fail);
  HM_CHECK_GOTO(alloc_i32(experts + 1, &out->starts), fail);
  count_rows(out);
  HM_CHECK_GOTO(alloc_i32(out->starts[experts], &out->sorted_ids), fail);
  HM_CHECK_GOTO(alloc_i32(out->starts[experts] / block, &out->block_experts), fail);
  HM_CHECK_GOTO(alloc_i32(experts, &filled), fail);
  place_ids(out, filled);
  free(filled);
  return HM_OK;
fail:
  free(filled);
  hm_tuner_routing_free(out);
  return ret;
}

void hm_tuner_routing_free(hm_tuner_routing *r) {
  if (r == NULL) return;
  free(r->counts);
  free(r->starts);
  free(r->sorted_ids);
  free(r->block_experts);
  memset(r, 0, sizeof(*r));
}
