// SPDX-License-Identifier: Apache-2.0
// The persistent wgmma GEMM kernel (sm_90a). Same schedule as hm_gemm_run
// (gemm_kernel.cuh): data-parallel waves of whole tiles, then Stream-K over the
// remaining k-iterations with partials summed in k order by the last contributor; the
// same tiles and row maps (gemm_sched.cuh), so the four GEMM types, bias, global scale
// and top-k weights behave as in the mma.sync kernel.
#pragma once

#include "gemm_kernel.cuh"
#include "gemm_wgmma_epilogue.cuh"

// A thread's place: warpgroup (wm, wn) of the CTA, warp wq within it, its fragment source.
struct hm_wg_place {
  int wm, wn, wq, lane;
  hm_wg_src src;
};

// The mainloop a wgmma kernel body runs and the bytes before its row maps (pipeline or
// staged output tile): the weight-only one by default; the W8A8 kernel brings its own
// (gemm_w8a8_wgmma.cuh) and shares the rest of this file.
template <class C>
struct hm_wg_loop {
  static constexpr int region_bytes = hm_wg_traits<C>::region_bytes;
  __device__ static __forceinline__ void run(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke,
                                             unsigned char *smem, const int *a_row, const hm_wg_place &at,
                                             hm_wg_acc_t<C> &acc) {
    hm_wg_mainloop<C>(p, tile, kb, ke, smem, a_row, at.wm, at.wn, at.src, acc);
  }
};

template <class C, class L>
__device__ __forceinline__ void hm_wg_segment(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke,
                                              unsigned char *smem, const hm_gemm_smem_maps &maps,
                                              const hm_wg_place &at, hm_wg_acc_t<C> &acc) {
  __syncthreads();  // the previous segment is done with the row maps and shared memory
  hm_tile_rows<C, hm_wg_traits<C>>(p, tile, maps.a_row, maps.c_row, maps.row_scale);
  __syncthreads();
  L::run(p, tile, kb, ke, smem, maps.a_row, at, acc);
}

// O: how the tile is staged (hm_wg_c_f32, hm_wgws_c_out, hm_w8ss_c_out).
template <class C, class O>
__device__ __forceinline__ void hm_wg_store(const hm_gemm_params &p, const hm_tile &tile, unsigned char *smem,
                                            const hm_gemm_smem_maps &maps, const hm_wg_place &at,
                                            const hm_wg_acc_t<C> &acc) {
  O::store(p, tile, smem, maps.c_row, maps.row_scale, at.wm, at.wn, at.wq, at.lane, acc);
}

// A Stream-K piece of a tile, as hm_gemm_fixup: publish the partial; the last
// contributor sums all of them in k order and stores the tile.
template <class C, class O>
__device__ __forceinline__ void hm_wg_fixup(const hm_gemm_params &p, const hm_tile &tile,
                                            const hm_sk_piece &sk, unsigned char *smem,
                                            const hm_gemm_smem_maps &maps, const hm_wg_place &at,
                                            hm_wg_acc_t<C> &acc) {
  using T = hm_wg_traits<C>;
  hm_wg_partial_store<C>(p, sk.slot, acc);
  __threadfence();
  hm_wg_sync<C>();
  if (threadIdx.x == 0) {
    const int arrived = atomicAdd(&p.counters[sk.head], 1);
    const int is_last = arrived == sk.last - sk.head;
    if (is_last) atomicExch(&p.counters[sk.head], 0);
    *maps.flag = is_last;
  }
  hm_wg_sync<C>();
  if (!*maps.flag) return;
  __threadfence();
  float *a = &acc[0][0];
#pragma unroll
  for (int i = 0; i < T::acc_regs; ++i) a[i] = 0.0f;
  for (int c = sk.head; c <= sk.last; ++c) hm_wg_partial_add<C>(p, c == sk.head ? sk.head_slot : 2 * c, acc);
  hm_wg_store<C, O>(p, tile, smem, maps, at, acc);
}

// Stores a finished segment: a whole tile directly, a Stream-K piece through the fixup.
template <class C, class O = hm_wg_c_f32<C>>
__device__ __forceinline__ void hm_wg_finish_segment(const hm_gemm_params &p, const hm_tile &tile, int kb,
                                                     int ke, const hm_sk_piece &sk, unsigned char *smem,
                                                     const hm_gemm_smem_maps &maps, const hm_wg_place &at,
                                                     hm_wg_acc_t<C> &acc) {
  if (kb == 0 && ke == hm_wg_traits<C>::k_iters)
    hm_wg_store<C, O>(p, tile, smem, maps, at, acc);
  else
    hm_wg_fixup<C, O>(p, tile, sk, smem, maps, at, acc);
}

// The row maps and flag after the pipeline region; prefix last (its length is experts).
__device__ __forceinline__ hm_gemm_smem_maps hm_wg_maps_at(unsigned char *base, int bm) {
  hm_gemm_smem_maps maps;
  maps.a_row = (int *)base;
  maps.c_row = maps.a_row + bm;
  maps.row_scale = (float *)(maps.c_row + bm);
  maps.flag = (int *)(maps.row_scale + bm);
  maps.prefix = maps.flag + 1;
  return maps;
}

// This thread's warpgroup, warp and fragment source among the computing threads. The warp
// comes through a shuffle from lane 0, which the compiler knows to be the same in every
// lane: the shared-memory descriptors built from it then stay in uniform registers instead
// of being moved there (R2UR) before every wgmma.
template <class C>
__device__ __forceinline__ hm_wg_place hm_wg_place_of(int thread) {
  using T = hm_wg_traits<C>;
  hm_wg_place at;
  at.lane = thread & 31;
  const int warp = __shfl_sync(0xffffffffu, thread >> 5, 0), wg = warp >> 2;
  at.wq = warp & 3;
  at.wm = wg / T::wg_n;
  at.wn = wg % T::wg_n;
  at.src = hm_wg_src_of(at.wq, at.lane);
  return at;
}

// The swizzle is a function of address bits: align the tiles to its 1024-byte repeat.
__device__ __forceinline__ unsigned char *hm_wg_smem_base(unsigned char *dynamic_smem) {
  return dynamic_smem + ((1024u - (hm_smem_addr(dynamic_smem) & 1023u)) & 1023u);
}

template <class C, class L = hm_wg_loop<C>>
__device__ __forceinline__ void hm_wg_run(const hm_gemm_params &p, hm_trace_clock &) {
  extern __shared__ __align__(1024) unsigned char hm_wg_smem[];
  unsigned char *smem = hm_wg_smem_base(hm_wg_smem);
  const hm_gemm_smem_maps maps = hm_wg_maps_at(smem + L::region_bytes, C::bm);
  const hm_wg_place at = hm_wg_place_of<C>(threadIdx.x);
  using T = hm_wg_traits<C>;
  const int tiles = hm_count_m_tiles<C>(p, maps.prefix) * T::n_tiles;
  hm_wg_acc_t<C> acc;
  const auto segment = [&](const hm_tile &tile, int kb, int ke, const hm_sk_piece &sk) {
    hm_wg_segment<C, L>(p, tile, kb, ke, smem, maps, at, acc);
    hm_wg_finish_segment<C>(p, tile, kb, ke, sk, smem, maps, at, acc);
  };
  hm_walk_segments<C, T>(p, tiles, maps.prefix, segment);
}
