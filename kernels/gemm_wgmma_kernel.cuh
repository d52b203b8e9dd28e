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

template <class C>
__device__ __forceinline__ void hm_wg_store(const hm_gemm_params &p, const hm_tile &tile, unsigned char *smem,
                                            const hm_gemm_smem_maps &maps, const hm_wg_place &at,
                                            const hm_wg_acc_t<C> &acc) {
  hm_wg_store_tile<C>(p, tile, smem, maps.c_row, maps.row_scale, at.wm, at.wn, at.wq, at.lane, acc);
}

// A Stream-K piece of a tile, as hm_gemm_fixup: publish the partial; the last
// contributor sums all of them in k order and stores the tile.
template <class C>
__device__ __forceinline__ void hm_wg_fixup(const hm_gemm_params &p, const hm_tile &tile, long long first_it,
                                            long long iters, int ctas, unsigned char *smem,
                                            const hm_gemm_smem_maps &maps, const hm_wg_place &at,
                                            hm_wg_acc_t<C> &acc) {
  using T = hm_wg_traits<C>;
  const int cta = blockIdx.x;
  const int head = hm_sk_owner(first_it, iters, ctas);
  const int last = hm_sk_owner(first_it + T::k_iters - 1, iters, ctas);
  const int slot = 2 * cta + (hm_sk_begin(cta, iters, ctas) < first_it ? 1 : 0);
  hm_wg_partial_store<C>(p, slot, acc);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int arrived = atomicAdd(&p.counters[head], 1);
    const int is_last = arrived == last - head;
    if (is_last) atomicExch(&p.counters[head], 0);
    *maps.flag = is_last;
  }
  __syncthreads();
  if (!*maps.flag) return;
  __threadfence();
  float *a = &acc[0][0];
#pragma unroll
  for (int i = 0; i < T::acc_regs; ++i) a[i] = 0.0f;
  for (int c = head; c <= last; ++c)
    hm_wg_partial_add<C>(p, 2 * c + (hm_sk_begin(c, iters, ctas) < first_it ? 1 : 0), acc);
  hm_wg_store<C>(p, tile, smem, maps, at, acc);
}

template <class C, class L = hm_wg_loop<C>>
__device__ __forceinline__ void hm_wg_run(const hm_gemm_params &p) {
  using T = hm_wg_traits<C>;
  extern __shared__ __align__(1024) unsigned char hm_wg_smem[];
  // The swizzle is a function of address bits: align the tiles to its 1024-byte repeat.
  unsigned char *smem = hm_wg_smem + ((1024u - (hm_smem_addr(hm_wg_smem) & 1023u)) & 1023u);
  hm_gemm_smem_maps maps;
  maps.a_row = (int *)(smem + L::region_bytes);
  maps.c_row = maps.a_row + C::bm;
  maps.row_scale = (float *)(maps.c_row + C::bm);
  maps.flag = (int *)(maps.row_scale + C::bm);
  maps.prefix = maps.flag + 1;
  hm_wg_place at;
  at.lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5, wg = warp >> 2;
  at.wq = warp & 3;
  at.wm = wg / T::wg_n;
  at.wn = wg % T::wg_n;
  at.src = hm_wg_src_of(at.wq, at.lane);
  const int grid = p.grid, cta = blockIdx.x;
  const int tiles = hm_count_m_tiles<C>(p, maps.prefix) * T::n_tiles;
  int dp_tiles = tiles;
  if (C::stream_k && tiles % grid != 0) dp_tiles = tiles < grid ? 0 : (tiles / grid - 1) * grid;
  hm_wg_acc_t<C> acc;

  for (int t = cta; t < dp_tiles; t += grid) {
    const hm_tile tile = hm_tile_at<C, T>(p, t, maps.prefix);
    if (tile.skip) continue;
    hm_wg_segment<C, L>(p, tile, 0, T::k_iters, smem, maps, at, acc);
    hm_wg_store<C>(p, tile, smem, maps, at, acc);
  }

  const long long iters = (long long)(tiles - dp_tiles) * T::k_iters;
  if (iters == 0) return;
  long long cap = iters / C::sk_min_iters;
  const int ctas = (int)(cap < 1 ? 1 : (cap < grid ? cap : grid));
  if (cta >= ctas) return;
  const long long end = hm_sk_begin(cta + 1, iters, ctas);
  for (long long it = hm_sk_begin(cta, iters, ctas); it < end;) {
    const int t = (int)(it / T::k_iters);
    const int kb = (int)(it % T::k_iters);
    const int ke = (int)(end - it < T::k_iters - kb ? kb + (end - it) : T::k_iters);
    it += ke - kb;
    const hm_tile tile = hm_tile_at<C, T>(p, dp_tiles + t, maps.prefix);
    if (tile.skip) continue;
    hm_wg_segment<C, L>(p, tile, kb, ke, smem, maps, at, acc);
    if (kb == 0 && ke == T::k_iters)
      hm_wg_store<C>(p, tile, smem, maps, at, acc);
    else
      hm_wg_fixup<C>(p, tile, (long long)t * T::k_iters, iters, ctas, smem, maps, at, acc);
  }
}
