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
// A grouped decode tile does the latter where its launch says the routing was there before
// it started (p.routing_ready): it reads the routing to find its first tile's expert, and
// lays out its first segment's row maps before it waits (hm_pdl_maps_early).
// A next-grid CTA beside a running one slowed W4A16 M = 16 1.18x when it filled early (the
// tile's 124 registers and 85 KB let two share an SM; H100, twenty-fourth session). What
// comes in before the wait stays near the ring's first k-tiles: the whole first segment
// warmed in L2 slowed the previous grid's last CTAs (twenty-third session), and so did
// seven stages of an eight-stage tile copied.
#pragma once

#include "gemm_params.cuh"
#include "gemm_sched.cuh"
#include "gemm_trace.cuh"
#include "gemm_traits.cuh"
#include "hm_sk_split.cuh"

// What the prefetch reads of a launch's routing to find its first tile's expert: a dense or
// indexed launch's tiles as the kernel finds them (hm_count_m_tiles, hm_tile_at); a grouped
// launch's counts, every expert's at once (lane l of the first warp holds experts 32 b + l,
// their m-tiles), so that the reads are one round trip and the search needs no shared memory.
template <class C, class T>
struct hm_pdl_route {
  static constexpr bool grouped = C::gemm_type == HM_GT_CONTIGUOUS || C::gemm_type == HM_GT_MASKED;
  static constexpr int batches = grouped ? (C::experts + 31) / 32 : 1;
  int tiles[batches];

  __device__ __forceinline__ void load(const hm_gemm_params &p) {
    if constexpr (grouped) {
      const int lane = threadIdx.x & 31;
#pragma unroll
      for (int b = 0; b < batches; ++b) {
        const int e = b * 32 + lane;
        tiles[b] = e < C::experts ? (hm_expert_rows<C>(p, e) + C::bm - 1) / C::bm : 0;
      }
    }
  }

  // A grouped launch's m-tiles, and in *expert the expert of m-tile `want` (-1: none asked
  // for); the same in every lane.
  __device__ __forceinline__ int scan(int want, int *expert) const {
    const int lane = threadIdx.x & 31;
    int carry = 0;
#pragma unroll
    for (int b = 0; b < batches; ++b) {
      const int v = hm_warp_inclusive_sum(tiles[b], lane);
      const unsigned past = __ballot_sync(0xffffffffu, want >= 0 && carry + v > want);
      if (past != 0 && *expert < 0) *expert = b * 32 + __ffs(past) - 1;
      carry += __shfl_sync(0xffffffffu, v, 31);
    }
    return carry;
  }

  // The launch's m-tiles, as the kernel counts them after the wait.
  __device__ __forceinline__ int m_tiles(const hm_gemm_params &p) const {
    if constexpr (!grouped) return hm_count_m_tiles<C>(p, nullptr);
    int none = -1;
    return scan(-1, &none);
  }

  // The expert of tile t, or -1 where it has none (an indexed block of expert -1).
  __device__ __forceinline__ int expert(const hm_gemm_params &p, int t) const {
    if constexpr (!grouped) {
      const hm_tile tile = hm_tile_at<C, T>(p, t, nullptr);
      return tile.skip ? -1 : tile.e;
    }
    int e = -1;
    scan(t / T::n_tiles, &e);
    return e;
  }
};

// Warms k-tiles [kb, ke) of n-tile n_tile of expert e in L2: lane l of the calling warp
// prefetches unit column l of the tile (sm_90), one bulk prefetch a column. T: the
// kernel's traits (unit layout (E, N/64, K-steps)).
template <class T>
__device__ __forceinline__ void hm_pdl_warm_weights(const hm_gemm_params &p, int e, int n_tile, int kb, int ke) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int lane = threadIdx.x & 31, col = n_tile * T::bn_units + lane;
  // The last tile's columns past N; k0 < k16 as kb < k_iters.
  if (lane >= T::bn_units || col >= T::n_units || kb >= ke) return;
  const int k0 = kb * T::steps, k1 = ke * T::steps < T::k16 ? ke * T::steps : T::k16;
  const unsigned bytes = (unsigned)((k1 - k0) * T::unit_bytes);
  const long long unit = (long long)e * T::n_units + col;
  const unsigned char *src = (const unsigned char *)p.b + (unit * T::k16 + k0) * T::unit_bytes;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
#endif
}

// Weights of the CTA's first segment under the persistent schedule (hm_gemm_run): its
// first whole tile, else the start of its Stream-K range; at most `stages` k-tiles, warmed
// in L2 by the first warp. Decode tiles only: of a dense launch, and of a grouped one whose
// routing was ready before it started (p.routing_ready): the MoE down GEMM's, a launch
// after the one that routed. Its first stages then come from L2 after the wait instead of
// in the burst of every CTA's first DRAM reads.
template <class C, class T>
__device__ __forceinline__ void hm_pdl_prefetch_weights(const hm_gemm_params &p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (C::bm <= 16) {
    if (threadIdx.x >= 32 || (C::gemm_type != HM_GT_DENSE && !p.routing_ready)) return;
    hm_pdl_route<C, T> route;
    route.load(p);
    const int tiles = route.m_tiles(p) * T::n_tiles;
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
    const int e = route.expert(p, t);
    if (e >= 0) hm_pdl_warm_weights<T>(p, e, t % T::n_tiles, kb, kb + (count < C::stages ? count : C::stages));
  }
#endif
}

// Whether a CTA waits for the previous grid only in its first segment, after the tile count
// and row maps: an mma.sync decode tile of a grouped launch whose routing was ready
// (p.routing_ready) reads nothing of the previous grid's before its first stage's
// activations (hm_gemm_begin_segment).
template <class C>
__device__ __forceinline__ bool hm_pdl_maps_early(const hm_gemm_params &p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return C::gemm_type != HM_GT_DENSE && C::bm <= 16 && p.routing_ready;
#else
  return false;
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
    if (!hm_pdl_maps_early<C>(p)) hm_pdl_wait(tr);
  }
}
