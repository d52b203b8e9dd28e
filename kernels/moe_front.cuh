/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The front of a decode step in one kernel: routing, alignment and the permutation into
 * expert order, which otherwise take three dependent launches. Every block routes all the
 * step's tokens (at most HM_FRONT_MAX_TOKENS, a warp per token) and aligns them in its
 * shared memory: repeating that small work costs less than waiting for two more kernels.
 * Block 0 writes ids, weights and the alignment metadata; block b then copies the rows of
 * items b, b + grid, ... Same results as moe_router.cuh, moe_align.cuh and the permute.
 * The parameter struct is plain C so that moe/front.c shares its layout.
 * Specialized by the defines of moe_router.cuh and HM_ALIGN_E (the experts of the GEMMs).
 */
#ifndef HM_MOE_FRONT_CUH
#define HM_MOE_FRONT_CUH

#include "moe_align.cuh"
#include "moe_router.cuh"

#define HM_FRONT_MAX_TOKENS 16

struct hm_moe_front_params {
  struct hm_moe_router_params route;    /* logits NULL: the ids are given_ids */
  const int *given_ids;                 /* [tokens, TOP_K] */
  struct hm_moe_align_params align[2];  /* the first sets; their topk_ids are the kernel's */
  struct hm_moe_permute_params permute; /* dst NULL: no copy (indexed); row_of is the kernel's */
  int sets;
};

#if defined(__CUDACC__) && defined(HM_ROUTER_E) && defined(HM_ALIGN_E)

/* What block b > 0 keeps of a set: nothing goes to memory, block 0 writes it all. */
__device__ __forceinline__ void hm_front_silence(hm_moe_align_params &a) {
  a.row_of = nullptr;
  a.expert_counts = nullptr;
  a.expert_offsets = nullptr;
  a.num_padded = nullptr;
  a.sorted_ids = nullptr;
  a.expert_ids = nullptr;
}

extern "C" __global__ void __launch_bounds__(HM_ALIGN_THREADS) hm_moe_front(hm_moe_front_params p) {
  __shared__ int ids[HM_FRONT_MAX_TOKENS * HM_ROUTER_TOP_K];
  __shared__ int rows[HM_FRONT_MAX_TOKENS * (HM_ROUTER_TOP_K + 1)];
  const bool leader = blockIdx.x == 0;
  const long long ids_n = p.route.tokens * HM_ROUTER_TOP_K;
  if (p.route.logits) {
    const int lane = threadIdx.x & 31;
    for (long long t = threadIdx.x >> 5; t < p.route.tokens; t += HM_ALIGN_WARPS)
      hm_router_token(p.route, t, lane, ids + t * HM_ROUTER_TOP_K,
                      leader ? p.route.topk_weights + t * HM_ROUTER_TOP_K : nullptr);
  } else {
    for (long long i = threadIdx.x; i < ids_n; i += HM_ALIGN_THREADS) ids[i] = p.given_ids[i];
  }
  __syncthreads();
  if (leader && p.route.logits)
    for (long long i = threadIdx.x; i < ids_n; i += HM_ALIGN_THREADS) p.route.topk_ids[i] = ids[i];
  for (int s = 0; s < p.sets; s++) {
    hm_moe_align_params a = p.align[s];
    a.topk_ids = ids;
    if (!leader) hm_front_silence(a);
    hm_align_in_block(a, s == 0 ? rows : nullptr);
    __syncthreads(); /* the next set reuses the alignment's shared memory */
  }
  const hm_moe_permute_params &q = p.permute;
  if (q.dst == nullptr) return;
  for (long long i = blockIdx.x; i < q.items; i += gridDim.x) {
    const int row = rows[i];
    if (row < 0) continue;
    const long long token = i / q.top_k;
    hm_permute_copy(q.dst + row * q.row_bytes, q.src + token * q.row_bytes, q.row_bytes);
    if (q.dst2) hm_permute_copy(q.dst2 + row * q.row_bytes2, q.src2 + token * q.row_bytes2, q.row_bytes2);
  }
}

#endif
#endif
