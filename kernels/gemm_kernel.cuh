// SPDX-License-Identifier: Apache-2.0
// The persistent GEMM kernel body. CTA c of `grid` first takes whole tiles c, c+grid, ...
// (data-parallel waves), then an even share of the k-iterations of the remaining tiles
// (Stream-K), so that every SM streams weights until the end. Batch-invariant kernels
// are built without Stream-K: a row's sums then never depend on M.
#pragma once

#include "gemm_epilogue.cuh"
#include "gemm_pdl.cuh"
#include "gemm_trace.cuh"

struct hm_gemm_smem_maps {
  int *a_row, *c_row, *flag, *prefix;
  float *row_scale;
};

// Row-map set `set` of the kernel's shared layout M (hm_sync_smem): a_row, c_row and
// row_scale of each set in turn, then the flag and tile prefixes that all sets share.
template <class C, class M>
__device__ __forceinline__ hm_gemm_smem_maps hm_gemm_maps_at(unsigned char *smem, int set) {
  constexpr int rows = hm_gemm_traits<C>::map_rows;
  int *base = (int *)(smem + M::maps_off);
  hm_gemm_smem_maps maps;
  maps.a_row = base + set * 3 * rows;
  maps.c_row = maps.a_row + rows;
  maps.row_scale = (float *)(maps.c_row + rows);
  maps.flag = base + M::map_sets * 3 * rows;
  maps.prefix = maps.flag + 1;
  return maps;
}

// The mainloop a kernel body runs (fill: its first stages; run: the rest), its traits (the
// weight units' layout) and its shared layout: the weight-only one by default; the W8A8
// kernel brings its own (gemm_w8a8_kernel.cuh) and shares the rest of this file.
template <class C>
struct hm_sync_loop {
  using traits = hm_gemm_traits<C>;
  using smem = typename traits::smem;
  static constexpr bool fill_before_wait = traits::fill_before_wait;
  template <int PART = HM_LOAD_ALL, int S0 = 0, int S1 = C::stages - 1>
  __device__ static __forceinline__ void fill(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke,
                                              unsigned char *smem, const int *a_row) {
    hm_mainloop_fill<C, PART, S0, S1>(p, tile, kb, ke, smem, a_row);
  }
  __device__ static __forceinline__ void run(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke,
                                             unsigned char *smem, const int *a_row, int wm, int wn, int wk,
                                             int lane, hm_acc_t<C> &acc, hm_trace_clock &tr) {
    hm_mainloop<C>(p, tile, kb, ke, smem, a_row, wm, wn, wk, lane, acc, tr);
  }
};

// Fills the tile's row maps and issues the first stages of its k-tiles [kb, ke). The first
// segment of a tile that fills before the grid dependency (gemm_pdl.cuh) waits here, after
// its first stages' weight copies; then come their activations and the rest of the ring.
// That of a grouped decode tile whose routing was ready waits after its row maps. Every
// other CTA waited on entry.
template <class C, class L>
__device__ __forceinline__ void hm_gemm_begin_segment(const hm_gemm_params &p, const hm_tile &tile, int kb,
                                                      int ke, unsigned char *smem, const hm_gemm_smem_maps &maps,
                                                      bool first, hm_trace_clock &tr) {
  tr.begin();
  hm_tile_rows<C>(p, tile, maps.a_row, maps.c_row, maps.row_scale);
  __syncthreads();
  tr.once(HM_TRACE_MAPS);
  if constexpr (L::fill_before_wait) {
    constexpr int early = hm_early_stages<C>;
    if (first) {
      L::template fill<HM_LOAD_WEIGHTS, 0, early>(p, tile, kb, ke, smem, maps.a_row);
      // The k-tiles after the early stages, warmed behind their copies (HM_EARLY_L2_STAGES).
      constexpr int warm = HM_EARLY_L2_STAGES;
      if (warm > 0 && threadIdx.x < 32)
        hm_pdl_warm_weights<typename L::traits>(p, tile.e, tile.n_tile, kb + early,
                                                kb + early + warm < ke ? kb + early + warm : ke);
      hm_pdl_wait(tr);
      L::template fill<HM_LOAD_ACTS, 0, early>(p, tile, kb, ke, smem, maps.a_row);
      L::template fill<HM_LOAD_ALL, early>(p, tile, kb, ke, smem, maps.a_row);
      return;
    }
  }
  if (first && hm_pdl_maps_early<C>(p)) hm_pdl_wait(tr);
  L::fill(p, tile, kb, ke, smem, maps.a_row);
}

// Runs the begun segment's k-tiles into acc.
template <class C, class L>
__device__ __forceinline__ void hm_gemm_loop_segment(const hm_gemm_params &p, const hm_tile &tile, int kb,
                                                     int ke, unsigned char *smem,
                                                     const hm_gemm_smem_maps &maps, int wmn, int wk, int lane,
                                                     hm_acc_t<C> &acc, hm_trace_clock &tr) {
  L::run(p, tile, kb, ke, smem, maps.a_row, wmn / C::warps_n, wmn % C::warps_n, wk, lane, acc, tr);
  tr.once(HM_TRACE_FIRST_LOOP_END);
  tr.count(HM_TRACE_SEGMENTS, 1);
  tr.count(HM_TRACE_ITERS, ke - kb);
}

// A Stream-K piece of a tile: publish the partial; the last contributor sums all of
// them in k order and stores the tile. Returns whether this CTA was the last; the counter
// is reset for reuse.
template <class C>
__device__ __forceinline__ bool hm_gemm_fixup(const hm_gemm_params &p, const hm_tile &tile,
                                              const hm_sk_piece &sk, const hm_gemm_smem_maps &maps, int wmn,
                                              int wk, int lane, hm_acc_t<C> &acc) {
  if (wk == 0) hm_partial_store<C>(p, sk.slot, wmn, lane, acc);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int arrived = atomicAdd(&p.counters[sk.head], 1);
    const int is_last = arrived == sk.last - sk.head;
    if (is_last) atomicExch(&p.counters[sk.head], 0);
    *maps.flag = is_last;
  }
  __syncthreads();
  const bool last = *maps.flag;
  if (!last || wk != 0) return last;
  __threadfence();
  hm_acc_zero<C>(acc);
  for (int c = sk.head; c <= sk.last; ++c)
    hm_partial_add<C>(p, c == sk.head ? sk.head_slot : 2 * c, wmn, lane, acc);
  hm_store_tile<C>(p, tile, maps.c_row, maps.row_scale, wmn / C::warps_n, wmn % C::warps_n, lane, acc);
  return true;
}

// Reduces the segment's sums across warps_k and stores them: a whole tile directly, a
// Stream-K piece through the fix-up.
template <class C, class M>
__device__ __forceinline__ void hm_gemm_end_segment(const hm_gemm_params &p, const hm_tile &tile, int kb,
                                                    int ke, const hm_sk_piece &sk, unsigned char *smem,
                                                    const hm_gemm_smem_maps &maps, int wmn, int wk, int lane,
                                                    hm_acc_t<C> &acc, hm_trace_clock &tr) {
  tr.begin();
  hm_reduce_warps_k<C>(smem + M::red_off, wmn, wk, lane, acc);
  tr.once(HM_TRACE_REDUCED);
  if (kb == 0 && ke == hm_gemm_traits<C>::k_iters) {
    if (wk == 0)
      hm_store_tile<C>(p, tile, maps.c_row, maps.row_scale, wmn / C::warps_n, wmn % C::warps_n, lane, acc);
  } else {
    if (hm_gemm_fixup<C>(p, tile, sk, maps, wmn, wk, lane, acc)) tr.count(HM_TRACE_SUMMED, 1);
  }
  tr.add(HM_TRACE_TAIL);
  tr.once(HM_TRACE_FIRST_END);
}

template <class C, class L = hm_sync_loop<C>>
__device__ __forceinline__ void hm_gemm_run(const hm_gemm_params &p, hm_trace_clock &tr) {
  using T = hm_gemm_traits<C>;
  using M = typename L::smem;
  extern __shared__ __align__(128) unsigned char hm_smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wmn = warp % T::warps_mn, wk = warp / T::warps_mn;
  int *prefix = hm_gemm_maps_at<C, M>(hm_smem, 0).prefix;
  const int tiles = hm_count_m_tiles<C>(p, prefix) * T::n_tiles;
  tr.once(HM_TRACE_COUNTED);
  hm_acc_t<C> acc;
  if constexpr (!M::overlap) {
    const hm_gemm_smem_maps maps = hm_gemm_maps_at<C, M>(hm_smem, 0);
    bool first = true;
    hm_walk_segments<C, T>(p, tiles, prefix, [&](const hm_tile &tile, int kb, int ke, const hm_sk_piece &sk) {
      __syncthreads();  // the previous segment is done with the row maps and shared memory
      hm_gemm_begin_segment<C, L>(p, tile, kb, ke, hm_smem, maps, first, tr);
      hm_gemm_loop_segment<C, L>(p, tile, kb, ke, hm_smem, maps, wmn, wk, lane, acc, tr);
      hm_gemm_end_segment<C, M>(p, tile, kb, ke, sk, hm_smem, maps, wmn, wk, lane, acc, tr);
      first = false;
    });
  } else {
    // A segment's row maps and first stages go out before the previous segment reduces and
    // stores, so that its fill overlaps that tail (traced 1.5 us of fill and 1.7-5.7 us of
    // fix-up a segment at MoE decode). The mainloop leaves the ring drained and the CTA
    // synchronized; the reduction and the other map set have room of their own.
    // Segment seg uses map set seg & 1; the one before it is still to be stored.
    hm_tile prev{};
    hm_sk_piece prev_sk{};
    int prev_kb = 0, prev_ke = 0, seg = 0;
    hm_walk_segments<C, T>(p, tiles, prefix, [&](const hm_tile &tile, int kb, int ke, const hm_sk_piece &sk) {
      const hm_gemm_smem_maps maps = hm_gemm_maps_at<C, M>(hm_smem, seg & 1);
      hm_gemm_begin_segment<C, L>(p, tile, kb, ke, hm_smem, maps, seg == 0, tr);
      if (seg > 0) {
        const hm_gemm_smem_maps prev_maps = hm_gemm_maps_at<C, M>(hm_smem, (seg - 1) & 1);
        hm_gemm_end_segment<C, M>(p, prev, prev_kb, prev_ke, prev_sk, hm_smem, prev_maps, wmn, wk, lane, acc,
                                  tr);
        tr.begin();  // the fill the tail left to wait for
      }
      hm_gemm_loop_segment<C, L>(p, tile, kb, ke, hm_smem, maps, wmn, wk, lane, acc, tr);
      prev = tile, prev_sk = sk, prev_kb = kb, prev_ke = ke, ++seg;
    });
    if (seg > 0)
      hm_gemm_end_segment<C, M>(p, prev, prev_kb, prev_ke, prev_sk, hm_smem,
                                hm_gemm_maps_at<C, M>(hm_smem, (seg - 1) & 1), wmn, wk, lane, acc, tr);
  }
  // A CTA that waited in no segment (it had none) still does before it leaves, so that the
  // grid never completes ahead of the one before it.
  if (L::fill_before_wait || hm_pdl_maps_early<C>(p)) hm_pdl_wait(tr);
  tr.finish();
}
