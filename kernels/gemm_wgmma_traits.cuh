// SPDX-License-Identifier: Apache-2.0
// Constants of the wgmma (sm_90a) GEMM kernel derived from a generated config C, and its
// shared-memory map; kernels/gemm_config_wgmma.c mirrors the byte counts.
//
// The output tile is computed transposed: a warpgroup's wgmma M is 64 weight columns
// (dequantized into registers), its N the tile's tokens (the activation tile in shared
// memory, K-major, 128-byte swizzle). Warps count as in the mma.sync kernel: warps_n is
// a multiple of 4 (the four warps of a warpgroup share its columns), warps_k is 1.
#pragma once

#include "gemm_traits.cuh"

// A stage (hm_wo_stage) holds the activation tile as bk/64 sub-tiles of bm rows x 128
// bytes, each 1024-byte aligned, then weight units, scales and zero points.
template <class C>
struct hm_wg_traits : hm_wo_stage<C, 1024> {
  using S = hm_wo_stage<C, 1024>;
  static constexpr bool bf16 = C::act_bf16;
  static constexpr int threads = 32 * C::warps_m * C::warps_n;
  static constexpr int wg_m = C::warps_m;      // warpgroups along tokens
  static constexpr int wg_n = C::warps_n / 4;  // warpgroups along columns
  static constexpr int wtm = C::bm / wg_m;     // tokens of a warpgroup: the wgmma N
  static constexpr int wtn = C::bn / wg_n;     // columns of a warpgroup
  static constexpr int mb = wtn / 64;          // 64-column wgmma M blocks (weight units) of a warpgroup
  static constexpr int acc_regs = mb * wtm / 2;
  static constexpr int map_rows = C::bm;       // rows of the row maps
  static constexpr bool fill_before_wait = false;  // waits on entry (gemm_pdl.cuh)
  // The output tile in f32, staged for coalesced stores; reuses the drained pipeline.
  // A row pitch of 2 (mod 32) words keeps the paired 8-byte stores conflict-free.
  static constexpr int c_pitch = C::bn * 4 + 8;
  static constexpr int c_bytes = C::bm * c_pitch;
  static constexpr int region_bytes = S::pipe_bytes > c_bytes ? S::pipe_bytes : c_bytes;
  // Slack to align the dynamic shared memory to 1024 bytes (the swizzle repeat), then
  // the region, then a_row[bm], c_row[bm], row_scale[bm], flag, prefix[experts].
  static constexpr int smem_bytes = 1024 + region_bytes + hm_maps_bytes<C, C::bm>;
  // A fragments in registers: a ring of two k16 steps, so that one step's wgmmas run
  // while the next step's weights are dequantized.
  static constexpr int af_ring = 2;

  // The column (within its 64-column block) of wgmma row 16*wq + g + 8*h: permuted as
  // weight-only units are read (hm_wg_src_of, gemm_wgmma_mainloop.cuh), in order for W8A8's
  // core matrices (hm_w8_units.cuh).
  __device__ static __forceinline__ int column(int wq, int lane, int h) {
    if constexpr (C::w8a8) return 16 * wq + (lane >> 2) + 8 * h;
    return 16 * (lane >> 3) + 8 * h + 2 * wq + ((lane >> 2) & 1);
  }

  static_assert(C::bits == 4 || C::bits == 8 || C::bits == 16,
                "the wgmma kernel takes 4-, 8- or 16-bit weights");
  static_assert(C::warps_k == 1 && C::warps_n % 4 == 0, "warps come in warpgroups of 4 along n");
  static_assert(C::bn % (64 * wg_n) == 0, "a warpgroup takes whole 64-column blocks");
  static_assert(C::bm % wg_m == 0 && wtm % 32 == 0 && wtm >= 32 && wtm <= 256, "wgmma N is 32..256, step 32");
  static_assert(acc_regs <= 128, "at most 128 accumulators per thread");
  static_assert(C::bk % 64 == 0 && S::steps % af_ring == 0, "bk is a multiple of 64");
  static_assert(C::stages >= 3, "wgmma may still read the stage before the one computed while a third loads");
  static_assert(C::bm <= threads, "one thread per tile row fills the row maps");
};

// One thread's accumulators: [64-column block][wgmma D fragment].
template <class C>
using hm_wg_acc_t = float[hm_wg_traits<C>::mb][hm_wg_traits<C>::wtm / 2];
