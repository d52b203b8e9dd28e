// SPDX-License-Identifier: Apache-2.0
// The W8A8 wgmma GEMM (sm_90a): fp8 e4m3 x e4m3 -> f32 and s8 x s8 -> s32 through
// m64nNk32 with the weights as A from registers, on the schedule, row maps, Stream-K and
// epilogue of the weight-only wgmma kernel (gemm_wgmma_kernel.cuh). Its C^T tile and
// accumulator layout are that kernel's: a warpgroup's wgmma M is 64 weight columns, N its
// tokens, read from shared memory K-major in the 128-byte swizzle, one 128-byte row a
// token (bk = 128, the K span of a block or 1x128 scale).
//
// The A fragments are one ldmatrix.x4 a 64-column block and k32 step from the W8A8 units'
// core matrices (hm_w8_units.cuh), so the columns run in order (hm_wg_traits::column).
//
// Scales as in the mma.sync W8A8 kernel (gemm_w8a8_kernel.cuh): each stage's wgmmas
// overwrite a partial sum that is folded into the f32 accumulators with the scales that
// change along K (128x128 weight blocks, 1x128 activation groups); fp8 folds every stage
// even without such scales, since Hopper's fp8 MMA keeps too few accumulator bits for a
// whole K; int8 sums are exact in s32 and without K-varying scales go straight to the end
// of the segment. Per-channel and per-token scales apply once a segment.
#pragma once

#include "gemm_w8a8_kernel.cuh"
#include "gemm_wgmma_kernel.cuh"
#include "hm_wgmma8.cuh"

template <class C>
struct hm_w8wg_traits : hm_wg_traits<C> {
  using G = hm_wg_traits<C>;
  static constexpr int steps = C::bk / 32;      // k32 steps a stage
  static constexpr int k16 = (C::k + 31) / 32;  // k32 units of the weights (the name hm_load_b reads)
  static constexpr int unit_bytes = 32 * 64;    // a 32 (k) x 64 (n) unit of 8-bit codes
  static constexpr int k_blocks = (C::k + 127) / 128;
  static constexpr bool k_scaled = C::w_block || C::a_group;
  static constexpr bool fold = k_scaled || !C::a_int8;
  // A stage: bm token rows of 128 bytes (1024-byte aligned), weight units, and with 1x128
  // activation scales the stage's scale of each token row.
  static constexpr int a_bytes = C::bm * C::bk;
  static constexpr int b_off = a_bytes;
  static constexpr int b_bytes = G::bn_units * steps * unit_bytes;
  static constexpr int sa_off = b_off + b_bytes;
  static constexpr int sa_bytes = C::a_group ? C::bm * 4 : 0;
  static constexpr int stage_bytes = (sa_off + sa_bytes + 1023) / 1024 * 1024;
  static constexpr int pipe_bytes = stage_bytes * C::stages;
  static constexpr int region_bytes = pipe_bytes > G::c_bytes ? pipe_bytes : G::c_bytes;
  static constexpr int smem_bytes = 1024 + region_bytes + hm_maps_bytes<C, C::bm>;

  static_assert(C::bk == 128, "one 128-byte swizzle row of tokens a stage, one K scale block");
  static_assert((k16 + steps - 1) / steps == G::k_iters, "the schedule counts k-tiles as the kernel does");
  static_assert(G::threads <= (C::ws ? 384 : 256),
                "a thread needs more registers than more warpgroups leave (the producer's returned ones "
                "give three consumer warpgroups 152)");
  static_assert(C::k % 16 == 0, "A rows are copied in 16-byte pieces");
};

// A stage's (or, without a fold, the segment's) sums of one thread in the MMA's type.
template <class C>
using hm_w8wg_part_t = typename hm_w8_sum<C::a_int8>::type[hm_wg_traits<C>::mb][hm_wg_traits<C>::wtm / 2];

// Pins a sum after the wgmma wait: the compiler sees the asynchronous wgmma as writing
// its registers at issue, and would otherwise read them before the wait.
__device__ __forceinline__ void hm_w8wg_pin(float &x) {
  asm volatile("" : "+f"(x)::"memory");
}
__device__ __forceinline__ void hm_w8wg_pin(int &x) {
  asm volatile("" : "+r"(x)::"memory");
}

// 4 bytes, zero-filled when !valid; through L1 (.ca), since .cg copies 16 bytes only.
__device__ __forceinline__ void hm_cp_async4(void *smem, const void *gmem, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(hm_smem_addr(smem)), "l"(gmem),
               "r"(valid ? 4 : 0)
               : "memory");
}

template <class C>
__device__ __forceinline__ void hm_w8wg_load_stage(const hm_wg_a_plan<C, 1> &ap, const hm_gemm_params &p,
                                                   const hm_tile &tile, int kt, unsigned char *st,
                                                   const int *a_row) {
  using T = hm_w8wg_traits<C>;
  ap.stage(kt, hm_smem_addr(st));
  hm_load_b<C, T>(p, tile, kt, st);
  if constexpr (C::a_group) {
    const int r = threadIdx.x;
    if (r < C::bm) {
      const int row = a_row[r];
      const float *src = p.a_scale + (row < 0 ? 0 : (long long)row * T::k_blocks + kt);
      hm_cp_async4(st + T::sa_off + r * 4, src, row >= 0);
    }
  }
}

// Issues the stage's wgmmas into part (committed, not waited for): A fragments of all k32
// steps first, then one m64nNk32 per step and 64-column block; the first step overwrites
// part where it is folded per stage. Warp wq's rows 16wq + g (+ 8) of a 64-column block are
// unit columns 16wq + g (+ 8), core matrices 4wq..4wq+3 (hm_w8_units.cuh): k lo and hi of
// the first column, then of the second, one ldmatrix.x4.
template <class C>
__device__ __forceinline__ void hm_w8wg_issue_stage(const unsigned char *st, const hm_wg_place &at,
                                                    hm_w8wg_part_t<C> &part) {
  using T = hm_w8wg_traits<C>;
  const unsigned b_lane = hm_smem_addr(st) + T::b_off + at.wn * T::mb * T::steps * T::unit_bytes +
                          512 * at.wq + hm_w8_unit_lane_offset(at.lane);
  hm_u32 a[T::steps][T::mb][4];
#pragma unroll
  for (int s = 0; s < T::steps; ++s)
#pragma unroll
    for (int m = 0; m < T::mb; ++m) {
      hm_u32 r[4];
      hm_w8_unit_words4(r, b_lane + (m * T::steps + s) * T::unit_bytes);
      a[s][m][0] = r[0], a[s][m][1] = r[2], a[s][m][2] = r[1], a[s][m][3] = r[3];
    }
  const unsigned long long desc0 = hm_wgmma_desc_k128(hm_smem_addr(st) + at.wm * T::wtm * 128);
  hm_wgmma_fence();
#pragma unroll
  for (int s = 0; s < T::steps; ++s) {
    const unsigned long long desc = desc0 + (unsigned long long)((s * 32) >> 4);
#pragma unroll
    for (int m = 0; m < T::mb; ++m) {
      if (T::fold && s == 0)
        hm_wgmma8_rs<T::wtm, false>(part[m], a[s][m], desc);
      else
        hm_wgmma8_rs<T::wtm, true>(part[m], a[s][m], desc);
    }
  }
  hm_wgmma_commit();
}

// Waits for the warpgroup's wgmmas and pins part after the wait.
template <class C>
__device__ __forceinline__ void hm_w8wg_wait_stage(hm_w8wg_part_t<C> &part) {
  hm_wgmma_wait<0>();
#pragma unroll
  for (int m = 0; m < hm_wg_traits<C>::mb; ++m)
#pragma unroll
    for (int i = 0; i < hm_wg_traits<C>::wtm / 2; ++i) hm_w8wg_pin(part[m][i]);
}

// Tile row of accumulator i (a warpgroup's token 8*(i/4) + 2t + i%2).
template <class C>
__device__ __forceinline__ int hm_w8wg_row(const hm_wg_place &at, int i) {
  return at.wm * hm_wg_traits<C>::wtm + 8 * (i >> 2) + 2 * (at.lane & 3) + (i & 1);
}

// The tile column (within bn) of accumulator i of 64-column block m.
template <class C>
__device__ __forceinline__ int hm_w8wg_col(const hm_wg_place &at, int m, int i) {
  using T = hm_wg_traits<C>;
  return at.wn * T::wtn + m * 64 + T::column(at.wq, at.lane, (i >> 1) & 1);
}

// The weight block scale of K block kb for tile column col (0 past N; 1 without block
// scales).
template <class C>
__device__ __forceinline__ float hm_w8wg_block_scale(const hm_gemm_params &p, const hm_tile &tile, int col,
                                                     int kb) {
  if constexpr (!C::w_block) return 1.0f;
  const int nb = (tile.n_tile * C::bn + col) / 128;
  if (nb >= C::n / 128) return 0.0f;
  return ((const float *)p.scales)[((long long)tile.e * (C::n / 128) + nb) * hm_w8wg_traits<C>::k_blocks + kb];
}

// The weight block scales of K block kb for the warpgroup's 64-column blocks, each in one
// 128-row block of the weights, loaded while the stage's wgmmas run rather than after them.
template <class C>
__device__ __forceinline__ void hm_w8wg_block_scales(const hm_gemm_params &p, const hm_tile &tile, int kb,
                                                     const hm_wg_place &at,
                                                     float (&ws)[hm_wg_traits<C>::mb]) {
  using T = hm_w8wg_traits<C>;
#pragma unroll
  for (int m = 0; m < T::mb; ++m) ws[m] = hm_w8wg_block_scale<C>(p, tile, at.wn * T::wtn + m * 64, kb);
}

// acc += part * (the K-varying scales of the stage: ws, and the tokens' 1x128 ones in st),
// made after the stage's wgmmas are waited for: ptxas interleaves loads issued between
// them with the wgmmas, which then wait for the loads (docs/PERF.md, thirteenth session).
template <class C>
__device__ __forceinline__ void hm_w8wg_fold(const unsigned char *st, const hm_wg_place &at,
                                             const float (&ws)[hm_wg_traits<C>::mb],
                                             const hm_w8wg_part_t<C> &part, hm_wg_acc_t<C> &acc) {
  using T = hm_w8wg_traits<C>;
#pragma unroll
  for (int m = 0; m < T::mb; ++m) {
#pragma unroll
    for (int i = 0; i < T::wtm / 2; i += 4) {
      float2 sa = make_float2(1.0f, 1.0f);
      if constexpr (C::a_group) sa = *(const float2 *)(st + T::sa_off + hm_w8wg_row<C>(at, i) * 4);
      const float s0 = sa.x * ws[m], s1 = sa.y * ws[m];
      acc[m][i] += (float)part[m][i] * s0;
      acc[m][i + 1] += (float)part[m][i + 1] * s1;
      acc[m][i + 2] += (float)part[m][i + 2] * s0;
      acc[m][i + 3] += (float)part[m][i + 3] * s1;
    }
  }
}

// acc *= the scales constant along K: per token (A row) and per channel (weight column).
// A thread's accumulators span wtm/4 tokens and 2*mb columns; each scale is loaded once.
template <class C>
__device__ __forceinline__ void hm_w8wg_finish(const hm_gemm_params &p, const hm_tile &tile, const int *a_row,
                                               const hm_wg_place &at, hm_wg_acc_t<C> &acc) {
  using T = hm_w8wg_traits<C>;
  float ts[T::wtm / 4], cs[T::mb][2];
#pragma unroll
  for (int j = 0; j < T::wtm / 4; ++j) {
    ts[j] = 1.0f;
    if constexpr (!C::a_group) {
      const int row = a_row[hm_w8wg_row<C>(at, 4 * (j >> 1) + (j & 1))];
      ts[j] = row < 0 ? 0.0f : p.a_scale[row];
    }
  }
  const float *ws = (const float *)p.scales + (long long)tile.e * C::n;
#pragma unroll
  for (int m = 0; m < T::mb; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      cs[m][h] = 1.0f;
      if constexpr (!C::w_block) {
        const int col = tile.n_tile * C::bn + hm_w8wg_col<C>(at, m, 2 * h);
        cs[m][h] = col < C::n ? ws[col] : 0.0f;
      }
    }
#pragma unroll
  for (int m = 0; m < T::mb; ++m)
#pragma unroll
    for (int i = 0; i < T::wtm / 2; ++i) acc[m][i] *= ts[2 * (i >> 2) + (i & 1)] * cs[m][(i >> 1) & 1];
}

// Accumulates k-tiles [kb, ke) of a tile into acc (zeroed first), scales applied. Every
// stage's wgmmas are waited for before its fold, so stage i + stages - 1 may load into
// the slot of stage i - 1 once all warps pass the barrier; its copies are issued while
// stage i's wgmmas run. Leaves wgmma and cp.async drained and the CTA synchronized, so
// shared memory may be reused on return.
template <class C>
__device__ void hm_w8wg_mainloop(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke,
                                 unsigned char *smem, const int *a_row, const hm_wg_place &at,
                                 hm_wg_acc_t<C> &acc) {
  using T = hm_w8wg_traits<C>;
  hm_w8wg_part_t<C> part;
  if constexpr (T::fold) {
    hm_wg_acc_zero<C>(acc);
  } else {  // the sums stay in part until the end, and acc needs no registers before then
#pragma unroll
    for (int m = 0; m < T::mb; ++m)
#pragma unroll
      for (int i = 0; i < T::wtm / 2; ++i) part[m][i] = 0;
  }
  hm_wg_a_plan<C, 1> ap;
  hm_wg_a_plan_init<C>(ap, p, a_row);
  const int count = ke - kb;
  hm_cp_async_fill<0, C::stages - 1>(
      count, [&](int s) { hm_w8wg_load_stage<C>(ap, p, tile, kb + s, smem + s * T::stage_bytes, a_row); });
  for (int i = 0; i < count; ++i) {
    hm_cp_async_wait<C::stages - 2>();
    hm_fence_proxy_async();
    __syncthreads();
    const unsigned char *st = smem + (i % C::stages) * T::stage_bytes;
    hm_w8wg_issue_stage<C>(st, at, part);
    float ws[T::mb];
    if constexpr (T::fold) hm_w8wg_block_scales<C>(p, tile, kb + i, at, ws);
    const int next = i + C::stages - 1;
    if (next < count)
      hm_w8wg_load_stage<C>(ap, p, tile, kb + next, smem + (next % C::stages) * T::stage_bytes, a_row);
    hm_cp_async_commit();
    hm_w8wg_wait_stage<C>(part);
    if constexpr (T::fold) hm_w8wg_fold<C>(st, at, ws, part, acc);
  }
  if constexpr (!T::fold) {
#pragma unroll
    for (int m = 0; m < T::mb; ++m)
#pragma unroll
      for (int i = 0; i < T::wtm / 2; ++i) acc[m][i] = (float)part[m][i];
  }
  hm_w8wg_finish<C>(p, tile, a_row, at, acc);
  hm_cp_async_wait<0>();
  __syncthreads();
}

template <class C>
struct hm_w8wg_loop {
  static_assert(hm_wg_traits<C>::acc_regs <= 64, "accumulators and partial sums share 128 registers a thread");
  static constexpr int region_bytes = hm_w8wg_traits<C>::region_bytes;
  __device__ static __forceinline__ void run(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke,
                                             unsigned char *smem, const int *a_row, const hm_wg_place &at,
                                             hm_wg_acc_t<C> &acc) {
    hm_w8wg_mainloop<C>(p, tile, kb, ke, smem, a_row, at, acc);
  }
};

template <class C>
__device__ __forceinline__ void hm_w8wg_run(const hm_gemm_params &p, hm_trace_clock &tr) {
  hm_wg_run<C, hm_w8wg_loop<C>>(p, tr);
}
