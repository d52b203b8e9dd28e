/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Routing inputs of the kernel mode and the reference checks: random top-k choices,
 * their alignment metadata computed by the library's own hm_moe_align on the host
 * backend, and copies of it in device memory.
 */
#ifndef HM_BENCH_ALIGN_H
#define HM_BENCH_ALIGN_H

#include <stdint.h>

#include "humming.h"

/* Random distinct experts for each token, with weights summing to 1 per token; each token's
 * last `shared` slots take the last `shared` experts, as a layer's fused shared expert does. */
hm_status hm_bench_random_topk(int64_t tokens, int top_k, int64_t experts, int shared, uint64_t seed,
                               int32_t *ids, float *weights);
/* Distinct experts among count ids (ids of -1 ignored). */
int64_t hm_bench_active_experts(const int32_t *ids, int64_t count, int64_t experts);

/* An alignment with its arrays; host or device memory as made. */
typedef struct hm_bench_align {
  hm_moe_align_config config;
  hm_moe_align_sizes sizes;
  hm_moe_alignment arrays;
} hm_bench_align;

/*
 * Aligns ids [tokens, top_k] on the host engine for layout and block_m; the masked
 * layout gets max_m = the busiest expert's rows rounded up to block_m.
 */
hm_status hm_bench_align_host(hm_engine *host, hm_moe_layout layout, int64_t tokens, int64_t experts,
                              int top_k, int block_m, const int32_t *ids, hm_bench_align *out);
/* A device copy of a host alignment. */
hm_status hm_bench_align_upload(hm_engine *engine, const hm_bench_align *host, hm_bench_align *out);
/* Frees the arrays with engine's allocator (host: free()); a zeroed struct is fine. */
void hm_bench_align_free(hm_engine *engine, hm_bench_align *a);

#endif
