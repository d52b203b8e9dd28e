// SPDX-License-Identifier: Apache-2.0
// Programmatic dependent launch (sm_90). A GEMM built for sm_90 is flagged for it in its
// launch metadata (gemm_gen.c), so it may start while the kernel before it on the stream
// still drains. It first lets the kernel after it do the same, then waits for the previous
// grid to finish and flush: everything it reads may be that grid's output.
//
// A dense decode tile knows its tiles from the launch alone, and its weights are no
// kernel's output, so it puts the wait (traced 3.3-3.6 us: the previous grid's last CTAs
// finishing) to use:
// - run one CTA an SM (T::fill_before_wait), it is launched with over half an SM's shared
//   memory (hm_gemm_exclusive_sm), so that the next grid's CTAs enter only as this grid's
//   leave; it lays out its first segment, copies that segment's first weight stages into
//   shared memory, and waits later, in hm_gemm_begin_segment, so that only the
//   activations' copies (from L2) stand between the wait and its first MMA;
// - run several an SM, it only warms L2 with those weights, and waits here.
// A next-grid CTA beside a running one slowed W4A16 M = 16 1.18x when it filled early (the
// tile's 124 registers and 85 KB let two share an SM; H100, twenty-fourth session). What
// comes in before the wait stays near the ring's first k-tiles: the whole first segment
// warmed in L2 slowed the previous grid's last CTAs (twenty-third session), and so did
// seven stages of an eight-stage tile copied.
#pragma once

#include "gemm_params.cuh"
#include "gemm_trace.cuh"
#include "gemm_traits.cuh"
#include "hm_sk_split.cuh"

// Weights of the CTA's first segment under the persistent schedule (hm_gemm_run): its
// first whole tile, else the start of its Stream-K range; at most `stages` k-tiles, one
// bulk prefetch per unit column (sm_90). T: the kernel's traits (unit layout (E, N/64,
// K-steps)).
template <class C, class T>
__device__ __forceinline__ void hm_pdl_prefetch_weights(const hm_gemm_params &p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (C::gemm_type == HM_GT_DENSE && C::bm <= 16) {
    if (threadIdx.x >= T::bn_units) return;
    const int tiles = (int)((p.m + C::bm - 1) / C::bm) * T::n_tiles;
    const int dp = hm_sk_dp_tiles(tiles, p.grid, C::stream_k);
    int t = blockIdx.x, kb = 0, count = T::k_iters;
    if (t >= dp) {
      const int iters = (tiles - dp) * T::k_iters;
      const int ctas = hm_sk_ctas(tiles - dp, T::k_iters, p.grid, C::sk_min_iters);
      if (iters == 0 || (int)blockIdx.x >= ctas) return;
      const int it = hm_sk_begin(blockIdx.x, iters, ctas), end = hm_sk_begin(blockIdx.x + 1, iters, ctas);
      t = dp + it / T::k_iters;
      kb = it % T::k_iters;
      count = end - it < T::k_iters - kb ? end - it : T::k_iters - kb;
    }
    const int unit = (t % T::n_tiles) * T::bn_units + threadIdx.x;
    const int k0 = kb * T::steps, k1 = (kb + (count < C::stages ? count : C::stages)) * T::steps;
    if (unit >= T::n_units) return;  // the last tile's columns past N; k0 < k16 as kb < k_iters
    const unsigned bytes = (unsigned)(((k1 < T::k16 ? k1 : T::k16) - k0) * T::unit_bytes);
    const unsigned char *src = (const unsigned char *)p.b + ((long long)unit * T::k16 + k0) * T::unit_bytes;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
  }
#endif
}

__device__ __forceinline__ void hm_pdl_wait(hm_trace_clock &tr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  tr.once(HM_TRACE_WAITED);
}

// Starts the CTA's trace (gemm_trace.cuh), so that it shows the wait too.
template <class C, class T>
__device__ __forceinline__ void hm_pdl_enter(const hm_gemm_params &p, hm_trace_clock &tr) {
  tr.start();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
  if constexpr (!T::fill_before_wait) {
    hm_pdl_prefetch_weights<C, T>(p);
    hm_pdl_wait(tr);
  }
}
