// SPDX-License-Identifier: Apache-2.0
// The warp-specialized W8A8 wgmma GEMM (sm_90a): the math of gemm_w8a8_wgmma.cuh (stage
// wgmmas, fold, scales) on the pipeline of gemm_ws_pipe.cuh. A stage holds the token rows
// (TMA or cp.async, hm_ws_load_rows), their 1x128 scales (cp.async) and the weight units
// (one bulk copy per unit column).
// The consumer warpgroups drift apart: one folds while the other's wgmmas keep the tensor
// cores busy.
#pragma once

#include "gemm_w8a8_wgmma.cuh"
#include "gemm_ws_pipe.cuh"

// The stage's weight units (producer thread 0): per unit column one contiguous run of k32 units
// (transform_w8.cuh orders them (E, N/64, K/32)), announced on the full barrier first.
// Units past N or K are not copied; see hm_ws_run for the K tail.
template <class C>
__device__ __forceinline__ void hm_w8ws_load_weights(const hm_gemm_params &p, const hm_tile &tile, int kt,
                                                     unsigned char *st, unsigned long long *full) {
  using T = hm_w8wg_traits<C>;
  const int left_k = T::k16 - kt * T::steps, left_n = T::n_units - tile.n_tile * T::bn_units;
  const int units = left_k < T::steps ? left_k : T::steps;
  const int cols = left_n < T::bn_units ? left_n : T::bn_units;
  const unsigned run_bytes = (unsigned)(units * T::unit_bytes);
  hm_mbar_arrive_expect_tx(full, run_bytes * cols);
  const unsigned char *b = (const unsigned char *)p.b;
  for (int c = 0; c < cols; ++c) {
    const long long unit = (long long)tile.e * T::n_units + tile.n_tile * T::bn_units + c;
    hm_bulk_copy(st + T::b_off + c * T::steps * T::unit_bytes,
                 b + (unit * T::k16 + kt * T::steps) * T::unit_bytes, run_bytes, full);
  }
}

// With 1x128 activation scales, each token row's scale of the stage.
template <class C>
__device__ __forceinline__ void hm_w8ws_load_token_scales(const hm_gemm_params &p, int kt, unsigned char *st,
                                                          const int *a_row, int pt) {
  using T = hm_w8wg_traits<C>;
  for (int r = pt; r < C::bm; r += hm_ws_producers) {
    const int row = a_row[r];
    const float *src = p.a_scale + (row < 0 ? 0 : (long long)row * T::k_blocks + kt);
    hm_cp_async4(st + T::sa_off + r * 4, src, row >= 0);
  }
}

// Accumulates k-tiles [kb, ke) into acc (zeroed first), stages n, n+1, ..., scales
// applied. Folding configs wait out each stage's wgmmas and fold; the other warpgroup's
// wgmmas cover the fold, and the fold covers the shared-memory loads of the next stage.
// int8 without K-varying scales sums in place and keeps one stage's wgmmas in flight while
// the next is issued.
template <class C>
__device__ __forceinline__ void hm_w8ws_mainloop(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke,
                                                 const hm_ws_ring &ring, unsigned &n, const int *a_row,
                                                 const hm_wg_place &at, hm_wg_acc_t<C> &acc) {
  using T = hm_w8wg_traits<C>;
  hm_w8wg_part_t<C> part;
  if constexpr (T::fold) {
    hm_wg_acc_zero<C>(acc);
    float ws[T::mb];
    hm_w8wg_frags_t<C> a;
    hm_w8wg_scales_t<C> sc;
    hm_w8wg_block_scales<C>(p, tile, kb, at, ws);
    const unsigned char *st = hm_ws_acquire<C, T::stage_bytes>(ring, n);
    hm_w8wg_load_frags<C>(st, at, a);
    hm_w8wg_stage_scales<C>(st, at, ws, sc);
    hm_w8wg_block_scales<C>(p, tile, kb + 1 < ke ? kb + 1 : kb, at, ws);
    for (int kt = kb; kt < ke; ++kt, ++n) {
      hm_w8wg_issue_frags<C>(st, at, a, part);
      hm_w8wg_wait_stage<C>(part);
      // The next stage's fragments and scale products load under this stage's fold (the
      // last stage reloads its own): nothing but the wgmmas between fence and commit.
      const unsigned char *next = kt + 1 < ke ? hm_ws_acquire<C, T::stage_bytes>(ring, n + 1) : st;
      hm_w8wg_load_frags<C>(next, at, a);
      hm_w8wg_fold_rescale<C>(part, next, at, ws, sc, acc);
      hm_w8wg_block_scales<C>(p, tile, kt + 2 < ke ? kt + 2 : ke - 1, at, ws);
      hm_ws_release<C>(ring, n, at.lane);
      st = next;
    }
  } else {
#pragma unroll
    for (int m = 0; m < T::mb; ++m)
#pragma unroll
      for (int i = 0; i < T::wtm / 2; ++i) part[m][i] = 0;
    for (int kt = kb; kt < ke; ++kt, ++n) {
      hm_w8wg_issue_stage<C>(hm_ws_acquire<C, T::stage_bytes>(ring, n), at, part);
      hm_wgmma_wait<1>();  // a no-op on the segment's first stage; no branch between wgmmas in flight
      hm_ws_release<C>(ring, n - 1, at.lane, kt > kb);
    }
    hm_w8wg_wait_stage<C>(part);
    hm_ws_release<C>(ring, n - 1, at.lane);
#pragma unroll
    for (int m = 0; m < T::mb; ++m)
#pragma unroll
      for (int i = 0; i < T::wtm / 2; ++i) acc[m][i] = (float)part[m][i];
  }
  hm_w8wg_finish<C>(p, tile, a_row, at, acc);
}

// The W8A8 stage on the warp-specialized pipeline (the policy of gemm_ws_pipe.cuh); the
// output tile is staged in f32.
template <class C>
struct hm_w8ws_traits : hm_w8wg_traits<C> {
  using W = hm_w8wg_traits<C>;
  // At 40 registers the producer's copy loop spills (ptxas 13.0); a consumer needs about
  // 150 (accumulators, a stage's sums, A fragments).
  using layout = hm_ws_layout<C, W::pipe_bytes, hm_wg_traits<C>::c_bytes, 56>;
  static constexpr int smem_bytes = layout::smem_bytes;

  __device__ static __forceinline__ void load_stage(const hm_gemm_params &p, const hm_tile &tile, int kt,
                                                    unsigned char *st, unsigned long long *full,
                                                    const int *a_row, int pt) {
    hm_ws_load_rows<C, 1>(p, kt, st, a_row, pt, full);
    if (pt == 0) hm_w8ws_load_weights<C>(p, tile, kt, st, full);
    if constexpr (C::a_group) hm_w8ws_load_token_scales<C>(p, kt, st, a_row, pt);
  }
  __device__ static __forceinline__ void mainloop(const hm_gemm_params &p, const hm_tile &tile, int kb,
                                                  int ke, const hm_ws_ring &ring, unsigned &n,
                                                  const int *a_row, const hm_wg_place &at,
                                                  hm_wg_acc_t<C> &acc) {
    hm_w8ws_mainloop<C>(p, tile, kb, ke, ring, n, a_row, at, acc);
  }
  __device__ static __forceinline__ void store(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke,
                                               const hm_sk_piece &sk, unsigned char *c_stage,
                                               const hm_gemm_smem_maps &maps, const hm_wg_place &at,
                                               hm_wg_acc_t<C> &acc) {
    hm_wg_finish_segment<C>(p, tile, kb, ke, sk, c_stage, maps, at, acc);
  }
};

template <class C>
__device__ __forceinline__ void hm_w8ws_run(const hm_gemm_params &p, hm_trace_clock &) {
  hm_ws_run<C, hm_w8ws_traits<C>>(p);
}
