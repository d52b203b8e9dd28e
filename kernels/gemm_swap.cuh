// SPDX-License-Identifier: Apache-2.0
// The swapped-operand step of tiles of 8 rows (bm = 8): the dequantized weights are the
// mma.sync A operand (m16 = 16 unit columns) and the tile's tokens its n8 B operand, so
// a 64-column unit takes 4 MMAs instead of the 8 a 16-row tile pays even for one token.
// The accumulators hold C^T during the mainloop and are moved into the standard layout
// once per tile segment, so the k reduction, Stream-K and the epilogue are unchanged.
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

// One weight unit at k16 step s: m16 block J of the unit against the tokens' fragment
// bf; the C^T sums of block J accumulate in acc[J] (acc[4..7] stay unused until the
// layout change).
template <class C>
__device__ __forceinline__ void hm_swap_unit_mma(const unsigned char *st, int unit_col, int s, int lane,
                                                 const hm_u32 (&bf)[2], const hm_group_vals &g,
                                                 float (&acc)[8][4]) {
  using T = hm_gemm_traits<C>;
  hm_u32 w[C::bits];
  hm_load_lane_words<C::bits>(w, st + T::b_off + (unit_col * T::steps + s) * T::unit_bytes, lane);
#pragma unroll
  for (int J = 0; J < 4; ++J) {
    hm_u32 a[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) a[r] = hm_dq_pair<C>(w, hm_swap_a_slot(J, r), g);
    hm_mma_16816<T::bf16>(acc[J], a, bf[0], bf[1]);
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
