// SPDX-License-Identifier: Apache-2.0
// The persistent GEMM kernel body. CTA c of `grid` first takes whole tiles c, c+grid, ...
// (data-parallel waves), then an even share of the k-iterations of the remaining tiles
// (Stream-K), so that every SM streams weights until the end. Batch-invariant kernels
// are built without Stream-K: a row's sums then never depend on M.
#pragma once

#include "gemm_epilogue.cuh"
#include "gemm_trace.cuh"

struct hm_gemm_smem_maps {
  int *a_row, *c_row, *flag, *prefix;
  float *row_scale;
};

// The mainloop a kernel body runs and where its row maps start in shared memory (after
// the pipeline): the weight-only one by default; the W8A8 kernel brings its own
// (gemm_w8a8_kernel.cuh) and shares the rest of this file.
template <class C>
struct hm_sync_loop {
  static constexpr int maps_off = hm_gemm_traits<C>::pipe_or_red;
  __device__ static __forceinline__ void run(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke,
                                             unsigned char *smem, const int *a_row, int wm, int wn, int wk,
                                             int lane, hm_acc_t<C> &acc, hm_trace_clock &tr) {
    hm_mainloop<C>(p, tile, kb, ke, smem, a_row, wm, wn, wk, lane, acc, tr);
  }
};

// Loads row maps for the tile, runs k-tiles [kb, ke) and reduces across warps_k.
template <class C, class L>
__device__ __forceinline__ void hm_gemm_segment(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke,
                                                unsigned char *smem, const hm_gemm_smem_maps &maps, int wmn,
                                                int wk, int lane, hm_acc_t<C> &acc, hm_trace_clock &tr) {
  __syncthreads();  // the previous segment is done with the row maps and shared memory
  tr.begin();
  hm_tile_rows<C>(p, tile, maps.a_row, maps.c_row, maps.row_scale);
  __syncthreads();
  tr.once(HM_TRACE_MAPS);
  L::run(p, tile, kb, ke, smem, maps.a_row, wmn / C::warps_n, wmn % C::warps_n, wk, lane, acc, tr);
  tr.once(HM_TRACE_FIRST_LOOP_END);
  tr.count(HM_TRACE_SEGMENTS, 1);
  tr.count(HM_TRACE_ITERS, ke - kb);
  tr.begin();
  hm_reduce_warps_k<C>(smem, wmn, wk, lane, acc);
}

// A Stream-K piece of a tile: publish the partial; the last contributor sums all of
// them in k order and stores the tile. Returns nothing; the counter is reset for reuse.
template <class C>
__device__ __forceinline__ void hm_gemm_fixup(const hm_gemm_params &p, const hm_tile &tile, const hm_sk_piece &sk,
                                              const hm_gemm_smem_maps &maps, int wmn, int wk, int lane,
                                              hm_acc_t<C> &acc) {
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
  if (!*maps.flag || wk != 0) return;
  __threadfence();
  hm_acc_zero<C>(acc);
  for (int c = sk.head; c <= sk.last; ++c) hm_partial_add<C>(p, c == sk.head ? sk.head_slot : 2 * c, wmn, lane, acc);
  hm_store_tile<C>(p, tile, maps.c_row, maps.row_scale, wmn / C::warps_n, wmn % C::warps_n, lane, acc);
}

__device__ __forceinline__ void hm_trace_segment_end(hm_trace_clock &tr) {
  tr.add(HM_TRACE_TAIL);
  tr.once(HM_TRACE_FIRST_END);
}

template <class C, class L = hm_sync_loop<C>>
__device__ __forceinline__ void hm_gemm_run(const hm_gemm_params &p, hm_trace_clock &tr) {
  using T = hm_gemm_traits<C>;
  extern __shared__ __align__(128) unsigned char hm_smem[];
  hm_gemm_smem_maps maps;
  maps.a_row = (int *)(hm_smem + L::maps_off);
  maps.c_row = maps.a_row + T::map_rows;
  maps.row_scale = (float *)(maps.c_row + T::map_rows);
  maps.flag = (int *)(maps.row_scale + T::map_rows);
  maps.prefix = maps.flag + 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wmn = warp % T::warps_mn, wk = warp / T::warps_mn;
  const int tiles = hm_count_m_tiles<C>(p, maps.prefix) * T::n_tiles;
  tr.once(HM_TRACE_COUNTED);
  hm_acc_t<C> acc;
  hm_walk_segments<C, T>(p, tiles, maps.prefix, [&](const hm_tile &tile, int kb, int ke, const hm_sk_piece &sk) {
    hm_gemm_segment<C, L>(p, tile, kb, ke, hm_smem, maps, wmn, wk, lane, acc, tr);
    if (kb == 0 && ke == T::k_iters) {
      if (wk == 0)
        hm_store_tile<C>(p, tile, maps.c_row, maps.row_scale, wmn / C::warps_n, wmn % C::warps_n, lane, acc);
    } else {
      hm_gemm_fixup<C>(p, tile, sk, maps, wmn, wk, lane, acc);
    }
    hm_trace_segment_end(tr);
  });
  tr.finish();
}
