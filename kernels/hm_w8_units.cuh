// SPDX-License-Identifier: Apache-2.0
// The W8A8 weight unit (transform_w8.cuh): 32 (k) x 64 (n) 8-bit codes, 2048 bytes, as 16
// core matrices of 8 columns x 16 k-bytes, each 128 bytes with column c's 16 bytes at 16c.
// Core matrix w = 2j + h holds columns 8j..8j+7 at k 16h..16h+15.
//
// The order serves three readers without a copy:
//   - mma.sync m16n8k32 (gemm_w8a8_kernel.cuh): lane l = 4g + t of a core matrix holds
//     bytes 4t..4t+3 of column g, the B register of n8 block j at k half h. So word w of
//     lane l (byte 128w + 4l) is "word w" of the fragment order: 2j k 4t.., 2j+1 k 16+4t..
//     of column 8j+g; a warp's 4-byte load of one word reads 128 contiguous bytes.
//   - wgmma with the weights as A from registers (gemm_w8a8_wgmma.cuh): the A fragment of
//     rows 16w'.. is core matrices 4w'..4w'+3, one ldmatrix.x4, conflict-free.
//   - wgmma with the weights as B from shared memory (gemm_w8a8_ws.cuh): the unit is a
//     K-major tile without swizzle, core matrices 128 bytes apart along K and 256 along N.
#pragma once

#include "hm_half2.cuh"

constexpr int hm_w8_unit_bytes = 2048;

// Byte offset of word w of lane l within a unit.
__host__ __device__ constexpr int hm_w8_unit_offset(int lane, int w) {
  return 128 * w + 4 * lane;
}

// The part of a lane's ldmatrix address that does not depend on the unit: lanes 8i..8i+7
// address rows 0..7 of the x4's matrix i.
__device__ __forceinline__ unsigned hm_w8_unit_lane_offset(int lane) {
  return 128 * (lane >> 3) + 16 * (lane & 7);
}

// Four consecutive core matrices from lane_addr (their first's address plus
// hm_w8_unit_lane_offset): lane words 4q..4q+3 when lane_addr is the unit's plus 512q.
__device__ __forceinline__ void hm_w8_unit_words4(hm_u32 (&r)[4], unsigned lane_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(lane_addr));
}

// All 16 words of a lane, one 4-byte load each (128 bytes a warp, conflict-free). Plain
// loads: ptxas keeps as few of them live as the 16-byte loads of the earlier order, where
// the asm of ldmatrix left the 16- and 32-row mma.sync tiles 30-60 registers more and
// spilling (ptxas 13.0).
__device__ __forceinline__ void hm_w8_unit_words(hm_u32 (&w)[16], const unsigned char *unit, int lane) {
  const hm_u32 *u = (const hm_u32 *)unit + lane;
#pragma unroll
  for (int i = 0; i < 16; ++i) w[i] = u[32 * i];
}
