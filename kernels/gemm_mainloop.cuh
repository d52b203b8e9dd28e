// SPDX-License-Identifier: Apache-2.0
// The mainloop shared by every GEMM type: a ring of `stages` shared-memory stages filled
// with cp.async (A tile swizzled for ldmatrix, weight units, scales, zero points), and
// per k16 step: ldmatrix A, dequantize B in registers, mma.sync (operands swapped for
// 8-row tiles, gemm_swap.cuh).
#pragma once

#include "gemm_sched.cuh"
#include "gemm_swap.cuh"
#include "hm_cp_async.cuh"
#include "hm_mma.cuh"

template <class C>
__device__ __forceinline__ void hm_acc_zero(hm_acc_t<C> &acc) {
  float *a = &acc[0][0][0][0];
#pragma unroll
  for (int i = 0; i < hm_gemm_traits<C>::acc_regs; ++i) a[i] = 0.0f;
}

// A rows are bk*2 bytes; 16-byte chunk ch of row r sits at chunk ch ^ (r % 8), so the
// eight rows an ldmatrix phase reads fall in eight different bank groups.
template <class C>
__device__ __forceinline__ int hm_a_offset(int r, int ch) {
  return r * C::bk * 2 + ((ch ^ (r & 7)) << 4);
}

// The bm x bk A tile of k-tile kt in 16-byte chunks (cp.async): row r is the gathered row
// a_row[r], and rows of -1 or chunks past K are zero-filled. Chunk ch of row r lands at
// st + offset(r, ch): each kernel brings its own swizzle. EB: bytes an element.
template <class C, int THREADS, int EB, class Offset>
__device__ __forceinline__ void hm_load_a_tile(const hm_gemm_params &p, int kt, unsigned char *st, const int *a_row,
                                               Offset offset) {
  constexpr int per_chunk = 16 / EB;
  constexpr int per_row = C::bk / per_chunk;
  constexpr int total = C::bm * per_row;
  const unsigned char *a = (const unsigned char *)p.a;
#pragma unroll
  for (int it = 0; it < (total + THREADS - 1) / THREADS; ++it) {
    const int i = it * THREADS + (int)threadIdx.x;
    if (total % THREADS == 0 || i < total) {
      const int r = i / per_row, ch = i % per_row;
      const int row = a_row[r];
      const int k = kt * C::bk + ch * per_chunk;
      const bool ok = row >= 0 && k < C::k;
      hm_cp_async16(st + offset(r, ch), ok ? a + ((long long)row * C::k + k) * EB : a, ok);
    }
  }
}

template <class C>
__device__ __forceinline__ void hm_load_a(const hm_gemm_params &p, int kt, unsigned char *st, const int *a_row) {
  hm_load_a_tile<C, hm_gemm_traits<C>::threads, 2>(p, kt, st, a_row,
                                                   [](int r, int ch) { return hm_a_offset<C>(r, ch); });
}

// Weight units of the tile's columns for k-tile kt; each column of units is contiguous.
// T: the kernel's traits (sizes, offsets, threads), so that the wgmma kernel shares this.
template <class C, class T = hm_gemm_traits<C>>
__device__ __forceinline__ void hm_load_b(const hm_gemm_params &p, const hm_tile &tile, int kt, unsigned char *st) {
  constexpr int unit_chunks = T::unit_bytes / 16;
  constexpr int col_chunks = T::steps * unit_chunks;
  constexpr int total = T::bn_units * col_chunks;
  const unsigned char *b = (const unsigned char *)p.b;
#pragma unroll
  for (int it = 0; it < (total + T::threads - 1) / T::threads; ++it) {
    const int i = it * T::threads + (int)threadIdx.x;
    if (total % T::threads == 0 || i < total) {
      const int col = i / col_chunks, rem = i % col_chunks;
      const int unit = tile.n_tile * T::bn_units + col;
      const int k16 = kt * T::steps + rem / unit_chunks;
      const bool ok = unit < T::n_units && k16 < T::k16;
      const long long src = (((long long)tile.e * T::n_units + unit) * T::k16 + kt * T::steps) * T::unit_bytes + rem * 16;
      hm_cp_async16(st + T::b_off + col * T::steps * T::unit_bytes + rem * 16, ok ? b + src : b, ok);
    }
  }
}

// Scales (128 bytes) or zero points (64 bytes) per group and unit column.
template <class C, int BYTES, class T = hm_gemm_traits<C>>
__device__ __forceinline__ void hm_load_group_data(const unsigned char *src, const hm_tile &tile, int kt,
                                                   unsigned char *dst) {
  constexpr int chunks = BYTES / 16;
  constexpr int total = T::stage_groups * T::bn_units * chunks;
  const int g0 = C::group == 0 ? 0 : kt * C::bk / C::group;
#pragma unroll
  for (int it = 0; it < (total + T::threads - 1) / T::threads; ++it) {
    const int i = it * T::threads + (int)threadIdx.x;
    if (total % T::threads == 0 || i < total) {
      const int gi = i / (T::bn_units * chunks), col = (i / chunks) % T::bn_units, ch = i % chunks;
      const int g = g0 + gi, unit = tile.n_tile * T::bn_units + col;
      const bool ok = g < T::groups && unit < T::n_units;
      const long long off = (((long long)tile.e * T::groups + g) * T::n_units + unit) * BYTES + ch * 16;
      hm_cp_async16(dst + (gi * T::bn_units + col) * BYTES + ch * 16, ok ? src + off : src, ok);
    }
  }
}

template <class C>
__device__ __forceinline__ void hm_load_stage(const hm_gemm_params &p, const hm_tile &tile, int kt, unsigned char *st,
                                              const int *a_row) {
  using T = hm_gemm_traits<C>;
  hm_load_a<C>(p, kt, st, a_row);
  hm_load_b<C>(p, tile, kt, st);
  if constexpr (T::quant) hm_load_group_data<C, 128>((const unsigned char *)p.scales, tile, kt, st + T::s_off);
  if constexpr (T::z_bytes > 0) hm_load_group_data<C, 64>(p.zeros, tile, kt, st + T::z_off);
}

// One weight unit: dequantized B fragments of the eight n8 blocks, MMAs for all m16 rows.
template <class C>
__device__ __forceinline__ void hm_unit_mma(const unsigned char *st, int unit_col, int s, int lane,
                                            const hm_u32 (&af)[hm_gemm_traits<C>::mi][4], const hm_group_vals &g,
                                            float (&acc)[hm_gemm_traits<C>::mi][8][4]) {
  using T = hm_gemm_traits<C>;
  hm_u32 w[C::bits];
  hm_load_lane_words<C::bits>(w, st + T::b_off + (unit_col * T::steps + s) * T::unit_bytes, lane);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const hm_u32 b0 = hm_dq_pair<C>(w, 2 * j, g), b1 = hm_dq_pair<C>(w, 2 * j + 1, g);
#pragma unroll
    for (int m = 0; m < T::mi; ++m) hm_mma_16816<T::bf16>(acc[m][j], af[m], b0, b1);
  }
}

template <class C>
__device__ __forceinline__ void hm_compute_stage(const unsigned char *st, int wm, int wn, int wk, int lane,
                                                 hm_acc_t<C> &acc) {
  using T = hm_gemm_traits<C>;
  const unsigned a_base = hm_smem_addr(st);
  hm_group_vals g[T::nu];
  float sa[4];  // late scale: the tokens' activation sums of the current run
#pragma unroll
  for (int ss = 0; ss < T::wk_steps; ++ss) {
    const int s = wk * T::wk_steps + ss;
    // Tiles of several m16 blocks amortize the dequant over their MMAs and are short of
    // registers: they rebuild the operands per step instead of keeping them live.
    if constexpr (T::quant && !T::late_scale) {
      if (T::mi > 1 || hm_group_starts<C>(ss)) {
#pragma unroll
        for (int u = 0; u < T::nu; ++u) hm_group_load<C>(st, T::step_group(s), wn * T::nu + u, lane, g[u]);
      }
    }
    if constexpr (T::swap_ab) {
      // The 8 token rows as the n8 operand: matrix 0 holds k 0..7 of the step, matrix 1 k 8..15.
      hm_u32 bf[2];
      hm_ldmatrix_x2(bf, a_base + hm_a_offset<C>(lane & 7, s * 2 + ((lane >> 3) & 1)));
      if constexpr (T::late_scale) {
        hm_swap_late_step<C>(st, wn * T::nu, s, ss, lane, bf, sa, acc);
      } else {
#pragma unroll
        for (int u = 0; u < T::nu; ++u) hm_swap_unit_mma<C>(st, wn * T::nu + u, s, lane, bf, g[u], acc[u][0]);
      }
    } else {
      hm_u32 af[T::mi][4];
#pragma unroll
      for (int m = 0; m < T::mi; ++m) {
        const int r = wm * T::wtm + m * 16 + (lane & 15);
        hm_ldmatrix_x4(af[m], a_base + hm_a_offset<C>(r, s * 2 + (lane >> 4)));
      }
#pragma unroll
      for (int u = 0; u < T::nu; ++u) hm_unit_mma<C>(st, wn * T::nu + u, s, lane, af, g[u], acc[u]);
    }
  }
}

// Accumulates k-tiles [kb, ke) of a tile into acc (zeroed first). Leaves the pipeline
// drained and the CTA synchronized, so shared memory may be reused on return.
template <class C>
__device__ void hm_mainloop(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke, unsigned char *smem,
                            const int *a_row, int wm, int wn, int wk, int lane,
                            hm_acc_t<C> &acc) {
  using T = hm_gemm_traits<C>;
  hm_acc_zero<C>(acc);
  const int count = ke - kb;
#pragma unroll
  for (int s = 0; s < C::stages - 1; ++s) {
    if (s < count) hm_load_stage<C>(p, tile, kb + s, smem + s * T::stage_bytes, a_row);
    hm_cp_async_commit();
  }
  for (int i = 0; i < count; ++i) {
    hm_cp_async_wait<C::stages - 2>();
    __syncthreads();
    const int next = i + C::stages - 1;
    if (next < count) hm_load_stage<C>(p, tile, kb + next, smem + (next % C::stages) * T::stage_bytes, a_row);
    hm_cp_async_commit();
    hm_compute_stage<C>(smem + (i % C::stages) * T::stage_bytes, wm, wn, wk, lane, acc);
  }
  if constexpr (T::swap_ab) {
#pragma unroll
    for (int u = 0; u < T::nu; ++u) hm_swap_unit_to_std(acc[u][0], lane);
  }
  hm_cp_async_wait<0>();
  __syncthreads();
}
