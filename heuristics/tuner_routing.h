/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tuner's routing: tokens x top_k slots spread uniformly over the experts (each token's
 * slots on distinct experts; a fused shared expert takes every token, as in the MoE layer),
 * with each expert's rows padded to a block, as the MoE
 * layouts hold them: counts for the masked and contiguous GEMMs, padded segment starts for
 * the contiguous one, sorted slot ids and the expert of each block for the indexed one.
 * Host arrays only; the tuner's bench uploads what a layout reads.
 */
#ifndef HM_TUNER_ROUTING_H
#define HM_TUNER_ROUTING_H

#include <stdint.h>

#include "humming.h"

typedef struct hm_tuner_routing {
  int64_t experts, slots; /* slots: tokens x top_k, the rows routed */
  int top_k, shared;      /* shared: the last experts, which every token takes */
  int block;
  int32_t *counts; /* [experts]: rows of each expert */
  int32_t *starts; /* [experts + 1]: first padded row of each expert's segment; starts[experts] padded rows */
  int32_t *sorted_ids;    /* [starts[experts]]: the segment's slot ids, then `slots` (no row) to its end */
  int32_t *block_experts; /* [starts[experts] / block]: the expert each block of rows belongs to */
  int32_t max_count;      /* the busiest expert's rows */
} hm_tuner_routing;

/* Routes tokens x top_k slots over experts, each token's last `shared` slots to the last
 * `shared` experts (0 <= shared < top_k); segments padded to block rows. */
hm_status hm_tuner_routing_make(int64_t tokens, int top_k, int64_t experts, int shared, int block,
                                hm_tuner_routing *out);
void hm_tuner_routing_free(hm_tuner_routing *r);

#endif
