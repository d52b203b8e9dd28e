/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The MoE router on the GPU: one warp per token, the token's scores in registers
 * (expert e on lane e % 32), selection by warp-wide reductions (redux.sync). Same rules as the host
 * router (moe/router.c): choice order with ties to the lower index, group values,
 * weights from the scores, renormalize then scale.
 * The parameter struct is plain C so that moe/router.c shares its layout; hm_router_token
 * also serves the decode front (moe_front.cuh).
 * Specialized by HM_ROUTER_E, HM_ROUTER_TOP_K, HM_ROUTER_GROUPS, HM_ROUTER_TOPK_GROUP,
 * HM_ROUTER_SIGMOID, HM_ROUTER_BIAS and HM_ROUTER_RENORM (0 or 1).
 */
#ifndef HM_MOE_ROUTER_CUH
#define HM_MOE_ROUTER_CUH

struct hm_moe_router_params {
  const float *logits;  /* [tokens, E] */
  const float *bias;    /* [E] correction bias, or NULL */
  int *topk_ids;        /* [tokens, TOP_K] */
  float *topk_weights;  /* [tokens, TOP_K] */
  long long tokens;
  float scaling;
};

#define HM_ROUTER_WARPS 4

#if defined(__CUDACC__) && defined(HM_ROUTER_E)

#define HM_ROUTER_PER_LANE ((HM_ROUTER_E + 31) / 32)
#define HM_ROUTER_GROUP_SIZE (HM_ROUTER_E / HM_ROUTER_GROUPS)
#define HM_ROUTER_NEG_INF __int_as_float(0xff800000)

/*
 * A choice as an unsigned key in the float's order, so that a warp finds the largest with
 * one redux.sync instead of five rounds of shuffles. -0 keys as +0 (they compare equal, and
 * equal choices go to the lower index); NaN keys as 0, below every number, which also
 * marks an expert that is not a candidate: neither is ever chosen.
 */
__device__ __forceinline__ unsigned hm_router_key(float v) {
  unsigned b = __float_as_uint(v);
  if (v != v) return 0u;
  if (b == 0x80000000u) b = 0u;
  return (b & 0x80000000u) ? ~b : b | 0x80000000u;
}

__device__ __forceinline__ float hm_router_warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

__device__ __forceinline__ float hm_router_warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

/* Scores (what the weights are made of) and choices (what experts are ranked by). */
__device__ __forceinline__ void hm_router_scores(const hm_moe_router_params &p, long long t, int lane,
                                                 float *score, float *choice) {
  const float *row = p.logits + t * HM_ROUTER_E;
#if HM_ROUTER_SIGMOID
#pragma unroll
  for (int j = 0; j < HM_ROUTER_PER_LANE; j++) {
    int e = lane + 32 * j;
    score[j] = 0.0f;
    choice[j] = HM_ROUTER_NEG_INF;
    if (e < HM_ROUTER_E) {
      score[j] = 1.0f / (1.0f + expf(-row[e]));
      choice[j] = HM_ROUTER_BIAS ? score[j] + p.bias[e] : score[j];
    }
  }
#else
  float mx = HM_ROUTER_NEG_INF;
#pragma unroll
  for (int j = 0; j < HM_ROUTER_PER_LANE; j++) {
    int e = lane + 32 * j;
    choice[j] = e < HM_ROUTER_E ? row[e] : HM_ROUTER_NEG_INF;
    mx = fmaxf(mx, choice[j]);
  }
  mx = hm_router_warp_max(mx);
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < HM_ROUTER_PER_LANE; j++) {
    score[j] = lane + 32 * j < HM_ROUTER_E ? expf(choice[j] - mx) : 0.0f;
    sum += score[j];
  }
  sum = hm_router_warp_sum(sum);
#pragma unroll
  for (int j = 0; j < HM_ROUTER_PER_LANE; j++) score[j] = score[j] / sum;
#endif
}

/* Bit g set for each group kept (all bits without grouping). */
__device__ __forceinline__ unsigned hm_router_groups(int lane, const float *choice) {
#if HM_ROUTER_GROUPS > 1
  float value[HM_ROUTER_GROUPS];
#pragma unroll
  for (int g = 0; g < HM_ROUTER_GROUPS; g++) {
    float top1 = HM_ROUTER_NEG_INF, top2 = HM_ROUTER_NEG_INF;
#pragma unroll
    for (int j = 0; j < HM_ROUTER_PER_LANE; j++) {
      int e = lane + 32 * j;
      if (e >= HM_ROUTER_E || e / HM_ROUTER_GROUP_SIZE != g) continue;
      float c = choice[j];
      if (c > top1) {
        top2 = top1;
        top1 = c;
      } else if (c > top2) {
        top2 = c;
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      float o1 = __shfl_xor_sync(0xffffffffu, top1, off);
      float o2 = __shfl_xor_sync(0xffffffffu, top2, off);
      float second = top1 >= o1 ? fmaxf(top2, o1) : fmaxf(top1, o2);
      top1 = fmaxf(top1, o1);
      top2 = second;
    }
    value[g] = HM_ROUTER_BIAS ? top1 + top2 : top1;
  }
  // The best value rides along with its group: value[best] would put value[] in local memory.
  unsigned keep = 0;
  for (int n = 0; n < HM_ROUTER_TOPK_GROUP; n++) {
    int best = -1;
    float best_value = 0.0f;
#pragma unroll
    for (int g = 0; g < HM_ROUTER_GROUPS; g++)
      if (!((keep >> g) & 1u) && (best < 0 || value[g] > best_value)) {
        best = g;
        best_value = value[g];
      }
    keep |= 1u << best;
  }
  return keep;
#else
  (void)lane, (void)choice;
  return 1u;
#endif
}

/*
 * Routes token t with the whole warp; lane 0 writes its TOP_K ids and weights (none when
 * weights_out is NULL). Every lane of the warp must call it with the same t.
 * Each choice: the largest key of the warp, then the lowest expert holding it, then that
 * expert's score from its lane (each lane offers the score of its own lowest expert with
 * the key); the chosen key becomes 0 (not a candidate).
 */
__device__ __forceinline__ void hm_router_token(const hm_moe_router_params &p, long long t, int lane,
                                                int *ids_out, float *weights_out) {
  float score[HM_ROUTER_PER_LANE], choice[HM_ROUTER_PER_LANE];
  hm_router_scores(p, t, lane, score, choice);
  const unsigned keep = hm_router_groups(lane, choice);
  unsigned key[HM_ROUTER_PER_LANE];
#pragma unroll
  for (int j = 0; j < HM_ROUTER_PER_LANE; j++) {
    const int e = lane + 32 * j;
    key[j] = e < HM_ROUTER_E && ((keep >> (e / HM_ROUTER_GROUP_SIZE)) & 1u) ? hm_router_key(choice[j]) : 0u;
  }
  int ids[HM_ROUTER_TOP_K];
  float weights[HM_ROUTER_TOP_K];
#pragma unroll
  for (int k = 0; k < HM_ROUTER_TOP_K; k++) {
    unsigned best = 0;
#pragma unroll
    for (int j = 0; j < HM_ROUTER_PER_LANE; j++) best = max(best, key[j]);
    const unsigned top = __reduce_max_sync(0xffffffffu, best);
    unsigned mine = 0xffffffffu;
    float mine_score = 0.0f;
#pragma unroll
    for (int j = HM_ROUTER_PER_LANE - 1; j >= 0; j--)
      if (key[j] == top) {
        mine = (unsigned)(lane + 32 * j);
        mine_score = score[j];
      }
    const unsigned e = __reduce_min_sync(0xffffffffu, mine);
#pragma unroll
    for (int j = 0; j < HM_ROUTER_PER_LANE; j++)
      if ((unsigned)(lane + 32 * j) == e) key[j] = 0u;
    const float s = __shfl_sync(0xffffffffu, mine_score, e & 31);
    ids[k] = top != 0u ? (int)e : -1;
    weights[k] = top != 0u ? s : 0.0f;
  }
  if (lane != 0) return;
#if HM_ROUTER_RENORM
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < HM_ROUTER_TOP_K; k++) sum += weights[k];
#endif
#pragma unroll
  for (int k = 0; k < HM_ROUTER_TOP_K; k++) {
    float w = weights[k];
#if HM_ROUTER_RENORM
    if (sum > 0.0f) w = w / sum;
#endif
    ids_out[k] = ids[k];
    if (weights_out) weights_out[k] = w * p.scaling;
  }
}

extern "C" __global__ void __launch_bounds__(HM_ROUTER_WARPS * 32) hm_moe_router(hm_moe_router_params p) {
  const int lane = threadIdx.x & 31;
  const long long t = (long long)blockIdx.x * HM_ROUTER_WARPS + (threadIdx.x >> 5);
  if (t >= p.tokens) return; /* whole warps leave together */
  hm_router_token(p, t, lane, p.topk_ids + t * HM_ROUTER_TOP_K, p.topk_weights + t * HM_ROUTER_TOP_K);
}

#endif
#endif
