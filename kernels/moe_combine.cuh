/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The top-k weighted combine on the GPU: a block per token and 2048 columns (blockIdx.y),
 * so that a decode step of one token still spreads over several SMs; eight columns a thread,
 * y[t] = sum_j w[t,j] * out[row_of[t,j]] (+ shared[t]) summed in f32 in j order with
 * fused multiply-adds, rounded to bf16 once: bit for bit the host combine (moe/combine.c).
 * With an appended expert (the shared expert run by the routed GEMMs) row_of has TOP_K + 1
 * columns and the last row is added with weight 1 where the shared buffer would be.
 * The parameter struct is plain C so that moe/combine.c shares its layout.
 * Specialized by HM_COMBINE_HIDDEN, HM_COMBINE_TOP_K, HM_COMBINE_SHARED and
 * HM_COMBINE_APPENDED (0 or 1).
 */
#ifndef HM_MOE_COMBINE_CUH
#define HM_MOE_COMBINE_CUH

#include "moe_act.cuh"

#define HM_COMBINE_THREADS 256
#define HM_COMBINE_COLUMNS (HM_COMBINE_THREADS * 8)

struct hm_moe_combine_params {
  const unsigned short *expert_out; /* bf16 rows of HIDDEN in expert order */
  const int *row_of;                /* [tokens, TOP_K (+ 1 appended)], -1 skipped */
  const float *topk_weights;        /* [tokens, TOP_K] */
  const unsigned short *shared;     /* [tokens, HIDDEN] bf16, or NULL */
  unsigned short *y;                /* [tokens, HIDDEN] bf16 */
  long long tokens;
};

#if defined(__CUDACC__) && defined(HM_COMBINE_HIDDEN)

/* Eight bf16 columns of a row from c0, packed two a word (vector: one 16-byte load); zeros
 * past HIDDEN. */
__device__ __forceinline__ uint4 hm_combine_load(const unsigned short *row, int c0, bool vector) {
  if (vector && c0 + 8 <= HM_COMBINE_HIDDEN) return *reinterpret_cast<const uint4 *>(row + c0);
  unsigned h[8];
#pragma unroll
  for (int j = 0; j < 8; j++) h[j] = c0 + j < HM_COMBINE_HIDDEN ? row[c0 + j] : 0u;
  return make_uint4(h[0] | h[1] << 16, h[2] | h[3] << 16, h[4] | h[5] << 16, h[6] | h[7] << 16);
}

/* Adds w times the eight packed columns q to acc. */
__device__ __forceinline__ void hm_combine_add(float *acc, uint4 q, float w) {
  const unsigned u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int j = 0; j < 4; j++) {
    acc[2 * j] = __fmaf_rn(w, __uint_as_float(u[j] << 16), acc[2 * j]);
    acc[2 * j + 1] = __fmaf_rn(w, __uint_as_float(u[j] & 0xffff0000u), acc[2 * j + 1]);
  }
}

extern "C" __global__ void __launch_bounds__(HM_COMBINE_THREADS) hm_moe_combine(hm_moe_combine_params p) {
  const long long t = blockIdx.x;
  if (t >= p.tokens) return;
  constexpr int slots = HM_COMBINE_TOP_K + HM_COMBINE_APPENDED;
  __shared__ int rows[HM_COMBINE_TOP_K + HM_COMBINE_APPENDED];
  __shared__ float weights[HM_COMBINE_TOP_K];
  if (threadIdx.x < slots) rows[threadIdx.x] = p.row_of[t * slots + threadIdx.x];
  if (threadIdx.x < HM_COMBINE_TOP_K)
    weights[threadIdx.x] = p.topk_weights[t * HM_COMBINE_TOP_K + threadIdx.x];
  __syncthreads();
  const bool vector = HM_COMBINE_HIDDEN % 8 == 0 &&
                      (((unsigned long long)p.expert_out | (unsigned long long)p.y |
                        (unsigned long long)p.shared) & 15) == 0;
  unsigned short *y = p.y + t * HM_COMBINE_HIDDEN;
  const int c0 = blockIdx.y * HM_COMBINE_COLUMNS + threadIdx.x * 8;
  if (c0 >= HM_COMBINE_HIDDEN) return;
  /* Every slot's columns are loaded before any is summed: one round trip to memory for the
   * token, where loading each after the previous sum took one a slot (7 us for a token of
   * DeepSeek-V3 on the H200, nine slots). */
  uint4 q[slots + HM_COMBINE_SHARED];
#pragma unroll
  for (int k = 0; k < slots; k++)
    q[k] = rows[k] >= 0 ? hm_combine_load(p.expert_out + (long long)rows[k] * HM_COMBINE_HIDDEN, c0, vector)
                        : make_uint4(0u, 0u, 0u, 0u);
#if HM_COMBINE_SHARED
  q[slots] = hm_combine_load(p.shared + t * HM_COMBINE_HIDDEN, c0, vector);
#endif
  float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int k = 0; k < HM_COMBINE_TOP_K; k++)
    if (rows[k] >= 0) hm_combine_add(acc, q[k], weights[k]);
#if HM_COMBINE_APPENDED
  if (rows[HM_COMBINE_TOP_K] >= 0) hm_combine_add(acc, q[HM_COMBINE_TOP_K], 1.0f);
#endif
#if HM_COMBINE_SHARED
  hm_combine_add(acc, q[slots], 1.0f);
#endif
  unsigned short out[8];
#pragma unroll
  for (int j = 0; j < 8; j++) out[j] = hm_f32_to_bf16(acc[j]);
  if (vector && c0 + 8 <= HM_COMBINE_HIDDEN) {
    reinterpret_cast<uint4 *>(y + c0)[0] =
        make_uint4(out[0] | (unsigned)out[1] << 16, out[2] | (unsigned)out[3] << 16,
                   out[4] | (unsigned)out[5] << 16, out[6] | (unsigned)out[7] << 16);
    return;
  }
  for (int j = 0; j < 8 && c0 + j < HM_COMBINE_HIDDEN; j++) y[c0 + j] = out[j];
}

#endif
#endif
