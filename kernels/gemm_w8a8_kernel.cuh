// SPDX-License-Identifier: Apache-2.0
// The W8A8 mma.sync GEMM: int8 x int8 -> s32 (sm_80+) or fp8 e4m3 x e4m3 -> f32 (sm_89+),
// m16n8k32, on the schedule, row maps and epilogue of the weight-only kernel
// (gemm_kernel.cuh). The MMAs sum raw codes; scales are applied in f32 outside them:
// those that change along K (128x128 weight blocks, 1x128 activation groups) when a
// stage's partial sums are folded into the accumulators, the per-channel and per-token
// ones once at the end of a segment. All of it is linear, so warps_k and Stream-K
// partials still add up after it.
//
// C adds to the weight-only constants (bits 8, group 0): a_int8 (else fp8 e4m3), w_block
// (f32 weight scales per 128x128 block, else per channel), a_group (activation scales per
// row and 128 columns, else per row).
#pragma once

#include "gemm_kernel.cuh"
#include "hm_mma8.cuh"

template <class C>
struct hm_w8_traits : hm_gemm_traits<C> {
  using G = hm_gemm_traits<C>;
  static constexpr int steps = C::bk / 32;  // k32 steps a stage
  static constexpr int wk_steps = steps / C::warps_k;
  static constexpr int k16 = (C::k + 31) / 32;  // k32 steps of the weights (the name hm_load_b reads)
  static constexpr int unit_bytes = 32 * 64;    // a 32 (k) x 64 (n) unit of 8-bit codes
  static constexpr int a_bytes = C::bm * C::bk;
  static constexpr int b_off = a_bytes;
  static constexpr int b_bytes = G::bn_units * steps * unit_bytes;
  static constexpr int stage_bytes = (b_off + b_bytes + 127) / 128 * 128;
  static constexpr int pipe_bytes = stage_bytes * C::stages;
  static constexpr int pipe_or_red = pipe_bytes > G::red_bytes ? pipe_bytes : G::red_bytes;
  static constexpr int smem_bytes =
      pipe_or_red + 3 * G::map_rows * 4 + 4 +
      ((C::gemm_type == HM_GT_CONTIGUOUS || C::gemm_type == HM_GT_MASKED) ? C::experts * 4 : 0);
  static constexpr bool k_scaled = C::w_block || C::a_group;  // scales that change along K
  static constexpr int k_blocks = (C::k + 127) / 128;         // 1x128 scales a row, block scales a column

  static_assert(!G::swap_ab, "the W8A8 kernel has no swapped 8-row tile");
  static_assert(steps % C::warps_k == 0, "warps_k must divide bk/32");
  static_assert(!k_scaled || 128 % C::bk == 0, "a stage must lie in one 128-wide K scale block");
  static_assert(C::k % 16 == 0, "A rows are copied in 16-byte pieces");
};

template <bool INT8>
struct hm_w8_sum {
  typedef float type;
};
template <>
struct hm_w8_sum<true> {
  typedef int type;
};

// A stage's partial sums of one thread, in the MMA's accumulator type: [unit][m16][n8][c0..c3].
template <class C>
using hm_w8_part_t = typename hm_w8_sum<C::a_int8>::type[hm_gemm_traits<C>::nu][hm_gemm_traits<C>::mi][8][4];

// A rows are bk bytes, in 16-byte chunks swizzled within 128-byte lines, so that the eight
// rows an ldmatrix phase reads fall in eight different bank groups. bk = 64 puts two rows
// in a line.
template <class C>
__device__ __forceinline__ int hm_w8_a_offset(int r, int ch) {
  if constexpr (C::bk >= 128) return r * C::bk + ((ch ^ (r & 7)) << 4);
  return (r >> 1) * 128 + (((((r & 1) << 2) | ch) ^ ((r >> 1) & 7)) << 4);
}

template <class C>
__device__ __forceinline__ void hm_w8_load_a(const hm_gemm_params &p, int kt, unsigned char *st,
                                             const int *a_row) {
  hm_load_a_tile<C, hm_w8_traits<C>::threads, 1>(p, kt, st, a_row,
                                                 [](int r, int ch) { return hm_w8_a_offset<C>(r, ch); });
}

template <class C>
__device__ __forceinline__ void hm_w8_load_stage(const hm_gemm_params &p, const hm_tile &tile, int kt,
                                                 unsigned char *st, const int *a_row) {
  hm_w8_load_a<C>(p, kt, st, a_row);
  hm_load_b<C, hm_w8_traits<C>>(p, tile, kt, st);
}

// The warp's k32 steps of one stage into its partial sums.
template <class C>
__device__ __forceinline__ void hm_w8_compute_stage(const unsigned char *st, int wm, int wn, int wk, int lane,
                                                    hm_w8_part_t<C> &part) {
  using T = hm_w8_traits<C>;
  const unsigned a_base = hm_smem_addr(st);
#pragma unroll
  for (int ss = 0; ss < T::wk_steps; ++ss) {
    const int s = wk * T::wk_steps + ss;
    hm_u32 af[T::mi][4];
#pragma unroll
    for (int m = 0; m < T::mi; ++m) {
      const int r = wm * T::wtm + m * 16 + (lane & 15);
      hm_ldmatrix_x4(af[m], a_base + hm_w8_a_offset<C>(r, s * 2 + (lane >> 4)));
    }
#pragma unroll
    for (int u = 0; u < T::nu; ++u) {
      // Word 2j: k 4t..4t+3 of column j*8+g; word 2j+1: k 16+4t.. (transform_w8.cuh).
      hm_u32 w[16];
      hm_load_lane_words<16>(w, st + T::b_off + ((wn * T::nu + u) * T::steps + s) * T::unit_bytes, lane);
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int m = 0; m < T::mi; ++m) hm_mma_16832(part[u][m][j], af[m], w[2 * j], w[2 * j + 1]);
    }
  }
}

// The scale of A row r of the tile for K block kb (0 for rows the tile does not have).
template <class C, bool PER_K>
__device__ __forceinline__ float hm_w8_row_scale(const hm_gemm_params &p, const int *a_row, int r, int kb) {
  const int row = a_row[r];
  if (row < 0) return 0.0f;
  if constexpr (PER_K) return p.a_scale[(long long)row * hm_w8_traits<C>::k_blocks + kb];
  return p.a_scale[row];
}

// acc += part * (the K-varying scales of K block kb); part = 0.
template <class C>
__device__ __forceinline__ void hm_w8_fold(const hm_gemm_params &p, const hm_tile &tile, int kb,
                                           const int *a_row, int wm, int wn, int lane, hm_w8_part_t<C> &part,
                                           hm_acc_t<C> &acc) {
  using T = hm_w8_traits<C>;
  float ra[T::mi][2];
#pragma unroll
  for (int m = 0; m < T::mi; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = wm * T::wtm + m * 16 + (lane >> 2) + 8 * h;
      ra[m][h] = C::a_group ? hm_w8_row_scale<C, true>(p, a_row, r, kb) : 1.0f;
    }
#pragma unroll
  for (int u = 0; u < T::nu; ++u) {
    float ws = 1.0f;
    if constexpr (C::w_block) {
      // A unit's 64 columns lie in one 128-row block of the weights.
      const int nb = (tile.n_tile * C::bn + wn * T::wtn + u * 64) / 128;
      ws = nb < C::n / 128
               ? ((const float *)p.scales)[((long long)tile.e * (C::n / 128) + nb) * T::k_blocks + kb]
               : 0.0f;
    }
#pragma unroll
    for (int m = 0; m < T::mi; ++m)
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          acc[u][m][j][c] += (float)part[u][m][j][c] * (ra[m][c >> 1] * ws);
          part[u][m][j][c] = 0;
        }
  }
}

// acc *= the scales constant along K: per token (A row) and per channel (weight column).
template <class C>
__device__ __forceinline__ void hm_w8_finish(const hm_gemm_params &p, const hm_tile &tile, const int *a_row,
                                             int wm, int wn, int lane, hm_acc_t<C> &acc) {
  using T = hm_w8_traits<C>;
  float ra[T::mi][2];
#pragma unroll
  for (int m = 0; m < T::mi; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = wm * T::wtm + m * 16 + (lane >> 2) + 8 * h;
      ra[m][h] = C::a_group ? 1.0f : hm_w8_row_scale<C, false>(p, a_row, r, 0);
    }
  const float *ws = (const float *)p.scales + (long long)tile.e * C::n;
#pragma unroll
  for (int u = 0; u < T::nu; ++u)
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int col = tile.n_tile * C::bn + wn * T::wtn + u * 64 + j * 8 + (lane & 3) * 2;
      float w0 = 1.0f, w1 = 1.0f;
      if constexpr (!C::w_block) {
        w0 = col < C::n ? ws[col] : 0.0f;  // N is even: col + 1 < N with col
        w1 = col < C::n ? ws[col + 1] : 0.0f;
      }
#pragma unroll
      for (int m = 0; m < T::mi; ++m)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[u][m][j][c] *= ra[m][c >> 1] * (c & 1 ? w1 : w0);
    }
}

// Accumulates k-tiles [kb, ke) of a tile into acc (zeroed first), scales applied. Leaves
// the pipeline drained and the CTA synchronized, so shared memory may be reused on return.
template <class C>
__device__ void hm_w8_mainloop(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke,
                               unsigned char *smem, const int *a_row, int wm, int wn, int wk, int lane,
                               hm_acc_t<C> &acc) {
  using T = hm_w8_traits<C>;
  hm_acc_zero<C>(acc);
  hm_w8_part_t<C> part;
#pragma unroll
  for (int u = 0; u < T::nu; ++u)
#pragma unroll
    for (int m = 0; m < T::mi; ++m)
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) part[u][m][j][c] = 0;
  const int count = ke - kb;
#pragma unroll
  for (int s = 0; s < C::stages - 1; ++s) {
    if (s < count) hm_w8_load_stage<C>(p, tile, kb + s, smem + s * T::stage_bytes, a_row);
    hm_cp_async_commit();
  }
  for (int i = 0; i < count; ++i) {
    hm_cp_async_wait<C::stages - 2>();
    __syncthreads();
    const int next = i + C::stages - 1;
    if (next < count)
      hm_w8_load_stage<C>(p, tile, kb + next, smem + (next % C::stages) * T::stage_bytes, a_row);
    hm_cp_async_commit();
    hm_w8_compute_stage<C>(smem + (i % C::stages) * T::stage_bytes, wm, wn, wk, lane, part);
    if constexpr (T::k_scaled) hm_w8_fold<C>(p, tile, (kb + i) * C::bk / 128, a_row, wm, wn, lane, part, acc);
  }
  if constexpr (!T::k_scaled) hm_w8_fold<C>(p, tile, 0, a_row, wm, wn, lane, part, acc);
  hm_w8_finish<C>(p, tile, a_row, wm, wn, lane, acc);
  hm_cp_async_wait<0>();
  __syncthreads();
}

template <class C>
struct hm_w8_loop {
  static constexpr int maps_off = hm_w8_traits<C>::pipe_or_red;
  __device__ static __forceinline__ void run(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke,
                                             unsigned char *smem, const int *a_row, int wm, int wn, int wk,
                                             int lane, hm_acc_t<C> &acc) {
    hm_w8_mainloop<C>(p, tile, kb, ke, smem, a_row, wm, wn, wk, lane, acc);
  }
};

template <class C>
__device__ __forceinline__ void hm_w8_run(const hm_gemm_params &p) {
  hm_gemm_run<C, hm_w8_loop<C>>(p);
}
