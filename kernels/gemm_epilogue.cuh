// SPDX-License-Identifier: Apache-2.0
// After the mainloop: the reduction across warps that split K inside the CTA, the
// Stream-K fix-up across CTAs (partials in a workspace; the last contributor sums them
// in k order, so results are deterministic), and the store of C with bias, global scale
// and per-row (top-k) weights.
#pragma once

#include "gemm_mainloop.cuh"

// Whether accumulator pair h (c0, c1: the lane's row; c2, c3: eight rows below) of m16
// block m holds rows of the warp tile: an 8-row tile's (bm = 8) rows 8..15 never do.
template <class C>
__host__ __device__ constexpr bool hm_rows_live(int m, int h) {
  return m * 16 + 8 * h < hm_gemm_traits<C>::wtm;
}

// Pair q of a thread's accumulators viewed as float2 ([u][m][j][h]).
template <class C>
__host__ __device__ constexpr bool hm_pair_live(int q) {
  return hm_rows_live<C>((q / 16) % hm_gemm_traits<C>::mi, q % 2);
}

// Warps with wk > 0 hand their sums to the wk == 0 warp of the same (wm, wn), which adds
// them in wk order, through red_smem (the drained ring, or the decode tile's own region:
// hm_sync_smem). Only pairs with rows move, as float2: an 8-row tile's reduction was about 0.5 us
// of the unit tile's 1 us tail with every register moved one float at a time (H100, traced,
// thirty-second session).
template <class C>
__device__ __forceinline__ void hm_reduce_warps_k(unsigned char *red_smem, int wmn, int wk, int lane,
                                                  hm_acc_t<C> &acc) {
  using T = hm_gemm_traits<C>;
  if constexpr (C::warps_k > 1) {
    constexpr int pairs = T::acc_regs / 2;
    float2 *red = (float2 *)red_smem;
    float *a = &acc[0][0][0][0];
    if (wk > 0) {
      float2 *dst = red + ((wk - 1) * T::warps_mn + wmn) * pairs * 32 + lane;
#pragma unroll
      for (int q = 0; q < pairs; ++q)
        if (hm_pair_live<C>(q)) dst[q * 32] = make_float2(a[2 * q], a[2 * q + 1]);
    }
    __syncthreads();
    if (wk == 0) {
#pragma unroll
      for (int w = 1; w < C::warps_k; ++w) {
        const float2 *src = red + ((w - 1) * T::warps_mn + wmn) * pairs * 32 + lane;
#pragma unroll
        for (int q = 0; q < pairs; ++q)
          if (hm_pair_live<C>(q)) {
            const float2 v = src[q * 32];
            a[2 * q] += v.x, a[2 * q + 1] += v.y;
          }
      }
    }
  }
}

// A partial tile of one contributor: [warp (wm, wn)][float4 q][lane], coalesced.
template <class C>
__device__ __forceinline__ float4 *hm_partial_slot(const hm_gemm_params &p, int slot, int wmn, int lane) {
  using T = hm_gemm_traits<C>;
  return (float4 *)(p.partials + (long long)slot * T::map_rows * C::bn) + wmn * (T::acc_regs / 4) * 32 + lane;
}

// Every lane stores and loads its whole partial, rows without output included, so that the
// last contributor's L2 loads sit in one basic block and issue back to back. Skipping the
// dead rows put each load behind its own branch (serialized round trips) to save under
// 2 MiB of L2 traffic a decode launch.
template <class C>
__device__ __forceinline__ void hm_partial_store(const hm_gemm_params &p, int slot, int wmn, int lane,
                                                 const hm_acc_t<C> &acc) {
  using T = hm_gemm_traits<C>;
  float4 *dst = hm_partial_slot<C>(p, slot, wmn, lane);
  const float *a = &acc[0][0][0][0];
#pragma unroll
  for (int q = 0; q < T::acc_regs / 4; ++q)
    __stcg(dst + q * 32, make_float4(a[4 * q], a[4 * q + 1], a[4 * q + 2], a[4 * q + 3]));
}

template <class C>
__device__ __forceinline__ void hm_partial_add(const hm_gemm_params &p, int slot, int wmn, int lane, hm_acc_t<C> &acc) {
  using T = hm_gemm_traits<C>;
  const float4 *src = hm_partial_slot<C>(p, slot, wmn, lane);
  float *a = &acc[0][0][0][0];
#pragma unroll
  for (int q = 0; q < T::acc_regs / 4; ++q) {
    const float4 v = __ldcg(src + q * 32);
    a[4 * q] += v.x, a[4 * q + 1] += v.y, a[4 * q + 2] += v.z, a[4 * q + 3] += v.w;
  }
}

// Writes the tile from the wk == 0 warps: c = (acc * global_scale + bias) * row_scale.
// Rows outer: a row's map entries are read once, not once a column block behind each
// store to c, which the compiler must assume may alias them (traced about 0.5 us of the unit
// tile's tail, thirty-second session).
template <class C>
__device__ __forceinline__ void hm_store_tile(const hm_gemm_params &p, const hm_tile &tile, const int *c_row,
                                              const float *row_scale, int wm, int wn, int lane,
                                              const hm_acc_t<C> &acc) {
  using T = hm_gemm_traits<C>;
  const float gs = C::global_scale ? p.global_scale[tile.e] : 1.0f;
  hm_u32 *c = (hm_u32 *)p.c;
  const hm_u32 *bias = (const hm_u32 *)p.bias;
#pragma unroll
  for (int m = 0; m < T::mi; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (!hm_rows_live<C>(m, h)) continue;
      const int r = wm * T::wtm + m * 16 + (lane >> 2) + 8 * h;
      const int row = c_row[r];
      if (row < 0) continue;
      const float rs = row_scale[r];
#pragma unroll
      for (int u = 0; u < T::nu; ++u)
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int col = tile.n_tile * C::bn + wn * T::wtn + u * 64 + j * 8 + (lane & 3) * 2;
          if (col >= C::n) continue;
          float b0 = 0.0f, b1 = 0.0f;
          if constexpr (C::bias) {
            const hm_u32 bb = bias[((long long)tile.e * C::n + col) >> 1];
            b0 = hm_h_to_f32<C::out_bf16>(bb), b1 = hm_h_to_f32<C::out_bf16>(bb >> 16);
          }
          const float v0 = (acc[u][m][j][2 * h] * gs + b0) * rs;
          const float v1 = (acc[u][m][j][2 * h + 1] * gs + b1) * rs;
          c[((long long)row * C::n + col) >> 1] = hm_h2_from_f32<C::out_bf16>(v0, v1);
        }
    }
}
