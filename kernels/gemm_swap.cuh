// SPDX-License-Identifier: Apache-2.0
// The swapped-operand step of tiles of 8 rows (bm = 8): the dequantized weights are the
// mma.sync A operand (m16 = 16 unit columns) and the tile's tokens its n8 B operand, so
// a 64-column unit takes 4 MMAs instead of the 8 a 16-row tile pays even for one token.
// The accumulators hold C^T during the mainloop and are moved into the standard layout
// once per tile segment, so the k reduction, Stream-K and the epilogue are unchanged.
// Codes that fit the activation type's mantissa skip the dequant (late scale, below).
#pragma once

#include "gemm_group.cuh"
#include "hm_mma.cuh"
#include "hm_swap_map.cuh"

// Two 8x8 matrices of 16-bit values; lanes 0..15 give the row addresses (row l % 8 of
// matrix l / 8), lane l receives row l / 4, columns 2(l % 4), 2(l % 4) + 1 of each.
__device__ __forceinline__ void hm_ldmatrix_x2(hm_u32 (&r)[2], unsigned smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr));
}

// One weight unit at a k16 step (words: the lane's words of it): m16 block J of the unit
// against the tokens' fragment bf; the C^T sums of block J accumulate in acc[J]
// (acc[4..7] stay unused until the layout change).
template <class C>
__device__ __forceinline__ void hm_swap_unit_mma(const unsigned char *words, const hm_u32 (&bf)[2],
                                                 const hm_group_vals &g, float (&acc)[8][4]) {
  using T = hm_gemm_traits<C>;
  hm_u32 w[C::bits];
  hm_load_lane_words_at<C::bits>(w, words);
#pragma unroll
  for (int J = 0; J < 4; ++J) {
    hm_u32 a[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) a[r] = hm_dq_pair<C>(w, hm_swap_a_slot(J, r), g);
    hm_mma_16816<T::bf16>(acc[J], a, bf[0], bf[1]);
  }
}

/*
 * Late scale (hm_gemm_traits::late_scale): the A operand is the codes as magic + q
 * (hm_dq::pair: a shift and one lop3 a pair instead of also a subtract and a multiply),
 * summed into partials acc[4 + J] (C^T, slots unused until the layout change) over each
 * run of a warp's k16 steps within one scale group. At the end of a run every partial
 * folds into its accumulator, acc += s (part - (magic + z) sa) (hm_swap_fold_one), with
 * sa the tokens' activation sums over the run, which one MMA of an all-ones A a step
 * gives for all units of the warp. The sum is linear in k, so runs, stages, k-warps and
 * Stream-K pieces add up as before and only the mainloop changes.
 * Precision: the codes, magic + z and the ones are exact, so only the f32 sums round.
 * The fold cancels part against (magic + z) sa, both near magic |a| per k (1024 for f16,
 * 128 for bf16) while their difference sum (q - z) a grows like sqrt(k) |a| |q - z|; a run is
 * at most 16 steps (256 k) with bf16 and 4 with f16 (hm_gemm_traits::late_run). Modelled
 * on the CPU with every MMA add truncated (tests/unit/test_gemm_swap_fold.c), the error
 * over K = 8192 stays below 1e-5 (bf16) and 4e-5 (f16) for zero-mean activations, and
 * 1e-4 (bf16) and 2.5e-4 (f16) for activations all of one sign, where 16-step f16 runs
 * would reach 1.1e-3: within a tenth of the formats' bounds (1.2e-2, 3e-3). Zero-mean
 * sums come out more precise than the old path's, which rounds every weight to bf16/f16.
 */

// The activation sums of the tile's tokens over a k16 step, added to sa (restarted when
// first): c[i] holds token 2t + i % 2 (hm_swap_fold_token).
template <class C>
__device__ __forceinline__ void hm_swap_sum_a(const hm_u32 (&bf)[2], bool first, float (&sa)[4]) {
  using T = hm_gemm_traits<C>;
  constexpr hm_u32 one2 = hm_dq<T::bf16, C::bits>::one2;
  const hm_u32 ones[4] = {one2, one2, one2, one2};
  if (first)
#pragma unroll
    for (int i = 0; i < 4; ++i) sa[i] = 0.0f;
  hm_mma_16816<T::bf16>(sa, ones, bf[0], bf[1]);
}

// One weight unit at a k16 step on biased codes (words: the lane's words of it): block
// J's partial sums in acc[4 + J], restarted when first.
template <class C>
__device__ __forceinline__ void hm_swap_unit_mma_biased(const unsigned char *words, const hm_u32 (&bf)[2],
                                                        bool first, float (&acc)[8][4]) {
  using T = hm_gemm_traits<C>;
  using D = hm_dq<T::bf16, C::bits>;
  hm_u32 w[C::bits];
  hm_load_lane_words_at<C::bits>(w, words);
#pragma unroll
  for (int J = 0; J < 4; ++J) {
    hm_u32 a[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) a[r] = D::pair(w, hm_swap_a_slot(J, r));
    float(&part)[4] = acc[4 + J];
    if (first)
#pragma unroll
      for (int i = 0; i < 4; ++i) part[i] = 0.0f;
    hm_mma_16816<T::bf16>(part, a, bf[0], bf[1]);
  }
}

// The end of a run: partials of the unit into its accumulators, with the scale and zero
// words sc and zp of the run's group.
template <class C>
__device__ __forceinline__ void hm_swap_fold(const unsigned char *sc, const unsigned char *zp,
                                             const float (&sa)[4], float (&acc)[8][4]) {
  float s[8], zb[8];
  hm_fold_load<C>(sc, zp, s, zb);
#pragma unroll
  for (int J = 0; J < 4; ++J)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int j = hm_swap_fold_block(J, i);
      acc[J][i] = hm_swap_fold_one(acc[J][i], acc[4 + J][i], s[j], zb[j], sa[hm_swap_fold_token(i)]);
    }
}

// Late-scale k16 step ss of a warp in stage st, for its units: runs of T::late_run
// steps, which divides the warp's steps within a scale group.
template <class C>
__device__ __forceinline__ void hm_swap_late_step(const unsigned char *st, const hm_lane_addr<C> &la, int ss,
                                                  const hm_u32 (&bf)[2], float (&sa)[4], hm_acc_t<C> &acc) {
  using T = hm_gemm_traits<C>;
  const bool first = ss % T::late_run == 0;
  const bool last = (ss + 1) % T::late_run == 0;
  hm_swap_sum_a<C>(bf, first, sa);
#pragma unroll
  for (int u = 0; u < T::nu; ++u)
    hm_swap_unit_mma_biased<C>(st + la.b + (u * T::steps + ss) * T::unit_bytes, bf, first, acc[u][0]);
  if (last) {
    const int g = hm_lane_group<C>(ss) * T::bn_units;
#pragma unroll
    for (int u = 0; u < T::nu; ++u)
      hm_swap_fold<C>(st + la.s + (g + u) * 128, st + la.z + (g + u) * 64, sa, acc[u][0]);
  }
}

// C^T sums of one unit (acc[0..3]) -> the standard accumulators of a 16-row m block
// (acc[j][0..1] for token g, acc[j][2..3] = 0 for the empty rows 8..15).
__device__ __forceinline__ void hm_swap_unit_to_std(float (&acc)[8][4], int lane) {
  float ct[4][4];
#pragma unroll
  for (int J = 0; J < 4; ++J)
#pragma unroll
    for (int r = 0; r < 4; ++r) ct[J][r] = acc[J][r];
#pragma unroll
  for (int J = 0; J < 4; ++J)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float got[2];
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        const float send = hm_swap_send_reg(lane, x) ? ct[J][2 * h + 1] : ct[J][2 * h];
        got[x] = __shfl_sync(0xffffffffu, send, hm_swap_src_lane(lane, x));
      }
      float *c = acc[2 * J + h];
      const bool flip = hm_swap_recv_col(lane, 0) != 0;
      c[0] = flip ? got[1] : got[0];
      c[1] = flip ? got[0] : got[1];
      c[2] = 0.0f;
      c[3] = 0.0f;
    }
}
