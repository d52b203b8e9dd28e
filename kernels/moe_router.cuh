/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The MoE router on the GPU: one warp per token, the token's scores in registers
 * (expert e on lane e % 32), selection by warp-wide arg-max. Same rules as the host
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
#define HM_ROUTER_NO_EXPERT 0x7fffffff

/* Larger value first; on equal values the lower index. */
__device__ __forceinline__ bool hm_router_better(float v, int i, float best_v, int best_i) {
  return v > best_v || (v == best_v && i < best_i);
}

/* Every lane ends with the warp's best (value, index) and the score that goes with it. */
__device__ __forceinline__ void hm_router_warp_argmax(float &v, int &i, float &s) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, v, off);
    int oi = __shfl_xor_sync(0xffffffffu, i, off);
    float os = __shfl_xor_sync(0xffffffffu, s, off);
    if (hm_router_better(ov, oi, v, i)) {
      v = ov;
      i = oi;
      s = os;
    }
  }
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
  unsigned keep = 0;
  for (int n = 0; n < HM_ROUTER_TOPK_GROUP; n++) {
    int best = -1;
#pragma unroll
    for (int g = 0; g < HM_ROUTER_GROUPS; g++)
      if (!((keep >> g) & 1u) && (best < 0 || value[g] > value[best])) best = g;
    keep |= 1u << best;
  }
  return keep;
#else
  (void)lane, (void)choice;
  return 1u;
#endif
}

/* The chosen ids and their scores, in choice order, out as ids and weights: renormalized
 * (summed in choice order), then scaled. weights_out NULL: ids only. */
__device__ __forceinline__ void hm_router_write(const hm_moe_router_params &p, const int *ids,
                                                const float *weights, int *ids_out, float *weights_out) {
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

/*
 * Routes token t with the whole warp; lane 0 writes its TOP_K ids and weights (none when
 * weights_out is NULL). Every lane of the warp must call it with the same t.
 */
__device__ __forceinline__ void hm_router_token(const hm_moe_router_params &p, long long t, int lane,
                                                int *ids_out, float *weights_out) {
  float score[HM_ROUTER_PER_LANE], choice[HM_ROUTER_PER_LANE];
  hm_router_scores(p, t, lane, score, choice);
  const unsigned keep = hm_router_groups(lane, choice);
  unsigned taken = 0;
  int ids[HM_ROUTER_TOP_K];
  float weights[HM_ROUTER_TOP_K];
#pragma unroll
  for (int k = 0; k < HM_ROUTER_TOP_K; k++) {
    float bv = HM_ROUTER_NEG_INF, bs = 0.0f;
    int bi = HM_ROUTER_NO_EXPERT;
#pragma unroll
    for (int j = 0; j < HM_ROUTER_PER_LANE; j++) {
      int e = lane + 32 * j;
      bool candidate = e < HM_ROUTER_E && !((taken >> j) & 1u) && ((keep >> (e / HM_ROUTER_GROUP_SIZE)) & 1u);
      if (candidate && hm_router_better(choice[j], e, bv, bi)) {
        bv = choice[j];
        bi = e;
        bs = score[j];
      }
    }
    hm_router_warp_argmax(bv, bi, bs);
    if (bi < HM_ROUTER_E && (bi & 31) == lane) taken |= 1u << (bi >> 5);
    ids[k] = bi < HM_ROUTER_E ? bi : -1;
    weights[k] = bs;
  }
  if (lane == 0) hm_router_write(p, ids, weights, ids_out, weights_out);
}

#if HM_ROUTER_SIGMOID
/*
 * Routes token t with every warp of a block of WARPS (all its threads call it), for a step
 * of a token or two, where one warp routing alone kept the rest of the block waiting (half
 * of the decode front's 13.5 us, DeepSeek-V3 on the H200). Scores and choices go to shared
 * memory; warp w takes the values of groups w, w + WARPS, ..., then the TOP_K best of the
 * kept groups' experts w * 32 + lane + 32 * WARPS * j; warp 0 picks the TOP_K best of the
 * warps' candidates. A sigmoid score is one expert's own, so the choices, ties (the lower
 * index) and weights are those of hm_router_token. Thread 0 writes ids and weights.
 */
#define HM_ROUTER_GROUP_LANES ((HM_ROUTER_GROUP_SIZE + 31) / 32)
template <int WARPS>
__device__ void hm_router_token_block(const hm_moe_router_params &p, long long t, int *ids_out,
                                      float *weights_out) {
  constexpr int per_lane = (HM_ROUTER_E + 32 * WARPS - 1) / (32 * WARPS), cands = WARPS * HM_ROUTER_TOP_K;
  __shared__ float score_s[HM_ROUTER_E], choice_s[HM_ROUTER_E];
#if HM_ROUTER_GROUPS > 1
  __shared__ float group_s[HM_ROUTER_GROUPS];
#endif
  __shared__ float cand_v[cands], cand_s[cands];
  __shared__ int cand_i[cands];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const float *row = p.logits + t * HM_ROUTER_E;
  for (int e = threadIdx.x; e < HM_ROUTER_E; e += 32 * WARPS) {
    const float s = 1.0f / (1.0f + expf(-row[e]));
    score_s[e] = s;
    choice_s[e] = HM_ROUTER_BIAS ? s + p.bias[e] : s;
  }
  __syncthreads();
  unsigned keep = 1u;
#if HM_ROUTER_GROUPS > 1
  for (int g = warp; g < HM_ROUTER_GROUPS; g += WARPS) {
    float top1 = HM_ROUTER_NEG_INF, top2 = HM_ROUTER_NEG_INF;
    for (int j = 0; j < HM_ROUTER_GROUP_LANES; j++) {
      const int local = lane + 32 * j;
      if (local >= HM_ROUTER_GROUP_SIZE) break;
      const float c = choice_s[g * HM_ROUTER_GROUP_SIZE + local];
      if (c > top1) {
        top2 = top1;
        top1 = c;
      } else if (c > top2) {
        top2 = c;
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float o1 = __shfl_xor_sync(0xffffffffu, top1, off);
      const float o2 = __shfl_xor_sync(0xffffffffu, top2, off);
      const float second = top1 >= o1 ? fmaxf(top2, o1) : fmaxf(top1, o2);
      top1 = fmaxf(top1, o1);
      top2 = second;
    }
    if (lane == 0) group_s[g] = HM_ROUTER_BIAS ? top1 + top2 : top1;
  }
  __syncthreads();
  keep = 0;
  for (int n = 0; n < HM_ROUTER_TOPK_GROUP; n++) {
    int best = -1;
    for (int g = 0; g < HM_ROUTER_GROUPS; g++)
      if (!((keep >> g) & 1u) && (best < 0 || group_s[g] > group_s[best])) best = g;
    keep |= 1u << best;
  }
#endif
  unsigned taken = 0;
#pragma unroll
  for (int k = 0; k < HM_ROUTER_TOP_K; k++) {
    float bv = HM_ROUTER_NEG_INF, bs = 0.0f;
    int bi = HM_ROUTER_NO_EXPERT;
#pragma unroll
    for (int j = 0; j < per_lane; j++) {
      const int e = warp * 32 + lane + 32 * WARPS * j;
      const bool candidate =
          e < HM_ROUTER_E && !((taken >> j) & 1u) && ((keep >> (e / HM_ROUTER_GROUP_SIZE)) & 1u);
      if (candidate && hm_router_better(choice_s[e], e, bv, bi)) {
        bv = choice_s[e];
        bi = e;
        bs = score_s[e];
      }
    }
    hm_router_warp_argmax(bv, bi, bs);
    if (bi < HM_ROUTER_E && ((bi >> 5) % WARPS) == warp && (bi & 31) == lane) taken |= 1u << (bi / (32 * WARPS));
    if (lane == 0) {
      cand_v[warp * HM_ROUTER_TOP_K + k] = bv;
      cand_i[warp * HM_ROUTER_TOP_K + k] = bi;
      cand_s[warp * HM_ROUTER_TOP_K + k] = bs;
    }
  }
  __syncthreads();
  if (warp == 0) {
    constexpr int per = (cands + 31) / 32;
    unsigned used = 0;
    int ids[HM_ROUTER_TOP_K];
    float weights[HM_ROUTER_TOP_K];
#pragma unroll
    for (int k = 0; k < HM_ROUTER_TOP_K; k++) {
      float bv = HM_ROUTER_NEG_INF, bs = 0.0f;
      int bi = HM_ROUTER_NO_EXPERT, slot = -1;
#pragma unroll
      for (int j = 0; j < per; j++) {
        const int c = lane + 32 * j;
        if (c < cands && !((used >> j) & 1u) && hm_router_better(cand_v[c], cand_i[c], bv, bi)) {
          bv = cand_v[c];
          bi = cand_i[c];
          bs = cand_s[c];
          slot = j;
        }
      }
      const int mine = bi;
      hm_router_warp_argmax(bv, bi, bs);
      if (slot >= 0 && mine == bi && bi < HM_ROUTER_E) used |= 1u << slot;
      ids[k] = bi < HM_ROUTER_E ? bi : -1;
      weights[k] = bs;
    }
    if (lane == 0) hm_router_write(p, ids, weights, ids_out, weights_out);
  }
  __syncthreads(); /* the next token reuses the shared memory */
}
#endif

extern "C" __global__ void __launch_bounds__(HM_ROUTER_WARPS * 32) hm_moe_router(hm_moe_router_params p) {
  const int lane = threadIdx.x & 31;
  const long long t = (long long)blockIdx.x * HM_ROUTER_WARPS + (threadIdx.x >> 5);
  if (t >= p.tokens) return; /* whole warps leave together */
  hm_router_token(p, t, lane, p.topk_ids + t * HM_ROUTER_TOP_K, p.topk_weights + t * HM_ROUTER_TOP_K);
}

#endif
#endif
