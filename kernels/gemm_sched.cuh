// SPDX-License-Identifier: Apache-2.0
// Which tiles a launch has and which rows each tile reads and writes. The four GEMM
// types share the mainloop; they differ only here. m-tiles of grouped types are
// enumerated on the device from the per-expert counts, so a launch needs no host
// knowledge of the routing and can be captured in a graph.
#pragma once

#include "gemm_params.cuh"
#include "gemm_traits.cuh"
#include "hm_sk_split.cuh"

// Routing metadata (counts, offsets, sorted ids, expert ids, top-k weights) is read from L2
// (ld.global.cg), never from an SM's L1: a launch told that its routing was ready
// (hm_gemm_params.routing_ready) reads it before the grid dependency (gemm_pdl.cuh), where
// no kernel boundary has yet ordered it after the kernels that wrote it.
__device__ __forceinline__ int hm_routing_ld(const int *p) {
  int v;
  asm volatile("ld.global.cg.s32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}

__device__ __forceinline__ float hm_routing_ld(const float *p) {
  float v;
  asm volatile("ld.global.cg.f32 %0, [%1];\n" : "=f"(v) : "l"(p));
  return v;
}

// Rows of sorted_ids in use: the routing's count, never past the rows the buffers hold
// (max_padded), so that a corrupt count costs no read past them and no walk over millions
// of tiles. The host reference refuses such a count (ref_gemm_plan.c); here no error can
// reach the caller before the launch is done.
__device__ __forceinline__ int hm_indexed_rows(const hm_gemm_params &p) {
  const int rows = hm_routing_ld(p.num_padded);
  return rows < p.max_padded ? rows : p.max_padded;
}

struct hm_tile {
  int e;       // expert
  int m_tile;  // global m-tile index
  int row0;    // first row of the tile within its expert's rows
  int n_tile;
  bool skip;  // expert id -1: nothing to do, no partials either
};

template <class C>
__device__ __forceinline__ int hm_expert_rows(const hm_gemm_params &p, int e) {
  int rows = hm_routing_ld(p.expert_counts + e);
  if (C::gemm_type == HM_GT_MASKED && rows > p.m) rows = (int)p.m;
  return rows < 0 ? 0 : rows;
}

// The sum of v over lanes 0..lane of the warp.
__device__ __forceinline__ int hm_warp_inclusive_sum(int v, int lane) {
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int u = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += u;
  }
  return v;
}

// m-tiles of this launch. Grouped types leave in prefix[e] the m-tiles of experts 0..e.
// The first warp reads the counts of up to 512 experts before it scans them, so that the
// launch waits one round trip for them, not one per 32 experts (they are the previous
// kernel's output, read after the grid dependency, on every launch's critical path).
template <class C>
__device__ int hm_count_m_tiles(const hm_gemm_params &p, int *prefix) {
  if constexpr (C::gemm_type == HM_GT_DENSE) {
    return (int)((p.m + C::bm - 1) / C::bm);
  } else if constexpr (C::gemm_type == HM_GT_INDEXED) {
    return (hm_indexed_rows(p) + C::bm - 1) / C::bm;
  } else {
    if (threadIdx.x < 32) {
      constexpr int batches = (C::experts + 31) / 32, ahead = batches < 16 ? batches : 16;
      const int lane = threadIdx.x;
      int carry = 0;
      for (int b0 = 0; b0 < batches; b0 += ahead) {
        int rows[ahead];
#pragma unroll
        for (int i = 0; i < ahead; ++i) {
          const int e = (b0 + i) * 32 + lane;
          rows[i] = e < C::experts ? hm_expert_rows<C>(p, e) : 0;
        }
#pragma unroll
        for (int i = 0; i < ahead; ++i) {
          const int e = (b0 + i) * 32 + lane;
          const int v = hm_warp_inclusive_sum((rows[i] + C::bm - 1) / C::bm, lane);
          if (e < C::experts) prefix[e] = carry + v;
          carry += __shfl_sync(0xffffffffu, v, 31);
        }
      }
    }
    __syncthreads();
    return prefix[C::experts - 1];
  }
}

// Tile t of the launch (n fastest, so that concurrent tiles share A rows and an expert).
// T: the kernel's traits (only n_tiles is read), so that the wgmma kernel shares this.
template <class C, class T = hm_gemm_traits<C>>
__device__ __forceinline__ hm_tile hm_tile_at(const hm_gemm_params &p, int t, const int *prefix) {
  hm_tile tile;
  tile.m_tile = t / T::n_tiles;
  tile.n_tile = t % T::n_tiles;
  tile.e = 0;
  tile.row0 = tile.m_tile * C::bm;
  tile.skip = false;
  if constexpr (C::gemm_type == HM_GT_INDEXED) {
    const int e = hm_routing_ld(p.expert_ids + tile.row0 / p.block_m);
    tile.e = e;
    tile.skip = e < 0 || e >= C::experts;
  } else if constexpr (C::gemm_type == HM_GT_CONTIGUOUS || C::gemm_type == HM_GT_MASKED) {
    int lo = 0, hi = C::experts - 1;  // first expert whose prefix exceeds m_tile
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (prefix[mid] > tile.m_tile)
        hi = mid;
      else
        lo = mid + 1;
    }
    tile.e = lo;
    tile.row0 = (tile.m_tile - (lo ? prefix[lo - 1] : 0)) * C::bm;
  }
  return tile;
}

// Row r < map_rows of the tile's maps: A row, C row (-1: no row), row scale. Rows past
// bm (the swapped tile's 8..15) have none.
template <class C>
__device__ __forceinline__ void hm_tile_row(const hm_gemm_params &p, const hm_tile &tile, int r, int *a_row,
                                            int *c_row, float *row_scale) {
  int ar = -1, cr = -1;
  float scale = 1.0f;
  const int local = r < C::bm ? tile.row0 + r : 0x7fffffff;  // past every row count
  if constexpr (C::gemm_type == HM_GT_DENSE) {
    if (local < p.m) ar = cr = local;
  } else if constexpr (C::gemm_type == HM_GT_INDEXED) {
    if (local < hm_indexed_rows(p)) {
      const int id = hm_routing_ld(p.sorted_ids + local);
      if (id >= 0 && id < p.m * p.top_k) {
        ar = id / p.a_rows_per_token;
        cr = id;
        if (p.topk_weights) scale = hm_routing_ld(p.topk_weights + id);
      }
    }
  } else if constexpr (C::gemm_type == HM_GT_CONTIGUOUS) {
    if (local < hm_expert_rows<C>(p, tile.e)) ar = cr = hm_routing_ld(p.expert_offsets + tile.e) + local;
  } else {
    if (local < hm_expert_rows<C>(p, tile.e)) ar = cr = (int)(tile.e * p.m + local);
  }
  a_row[r] = ar;
  c_row[r] = cr;
  row_scale[r] = scale;
}

// Thread r < map_rows fills row r of the tile's maps.
template <class C, class T = hm_gemm_traits<C>>
__device__ __forceinline__ void hm_tile_rows(const hm_gemm_params &p, const hm_tile &tile, int *a_row,
                                             int *c_row, float *row_scale) {
  const int r = threadIdx.x;
  if (r < T::map_rows) hm_tile_row<C>(p, tile, r, a_row, c_row, row_scale);
}

// Where a segment's k-tiles sit in the Stream-K split: the CTAs holding the tile's first
// and last k-iterations, and the partial slots of this CTA and of the first one. A CTA has
// two: of the tile its range starts in (2c) and of a tile that starts in its range (2c+1),
// so the other contributors use 2c. A whole tile has none. The walk works it out before
// the mainloop, where the divisions overlap the row maps' loads instead of the fix-up's.
struct hm_sk_piece {
  int head, last;       // first and last contributing CTA
  int slot, head_slot;  // partial slots of this CTA and of head
};

__device__ __forceinline__ hm_sk_piece hm_sk_piece_of(int first_it, int last_it, int begin, int iters,
                                                      int ctas) {
  hm_sk_piece s;
  s.head = hm_sk_owner(first_it, iters, ctas);
  s.last = hm_sk_owner(last_it, iters, ctas);
  s.slot = 2 * (int)blockIdx.x + (begin < first_it ? 1 : 0);
  s.head_slot = 2 * s.head + (hm_sk_begin(s.head, iters, ctas) < first_it ? 1 : 0);
  return s;
}

// The CTA's segments in order: data-parallel waves of whole tiles, then its range of the
// Stream-K iterations. visit(tile, kb, ke, piece) runs once a segment; a warp-specialized
// kernel's producer and consumers walk the same sequence. T: the kernel's traits (n_tiles,
// k_iters).
template <class C, class T, class F>
__device__ __forceinline__ void hm_walk_segments(const hm_gemm_params &p, int tiles, const int *prefix,
                                                 F &&visit) {
  const int grid = p.grid, cta = blockIdx.x;
  const int dp_tiles = hm_sk_dp_tiles(tiles, grid, C::stream_k);
  for (int t = cta; t < dp_tiles; t += grid) {
    const hm_tile tile = hm_tile_at<C, T>(p, t, prefix);
    if (!tile.skip) visit(tile, 0, T::k_iters, hm_sk_piece{0, 0, 0, 0});
  }
  const int iters = (tiles - dp_tiles) * T::k_iters;
  if (iters == 0) return;
  const int ctas = hm_sk_ctas(tiles - dp_tiles, T::k_iters, grid, C::sk_min_iters);
  if (cta >= ctas) return;
  const int begin = hm_sk_begin(cta, iters, ctas), end = hm_sk_begin(cta + 1, iters, ctas);
  for (int it = begin; it < end;) {
    const int t = it / T::k_iters;
    const int kb = it % T::k_iters;
    const int ke = end - it < T::k_iters - kb ? kb + (end - it) : T::k_iters;
    it += ke - kb;
    const hm_tile tile = hm_tile_at<C, T>(p, dp_tiles + t, prefix);
    const int first_it = t * T::k_iters;
    if (!tile.skip)
      visit(tile, kb, ke, hm_sk_piece_of(first_it, first_it + T::k_iters - 1, begin, iters, ctas));
  }
}
