// SPDX-License-Identifier: Apache-2.0
// The output tile of the warp-specialized wgmma kernels, staged in the output type beside
// the ring (or in a ring slot) and copied out asynchronously where it can be:
//
// - by TMA tensor stores (C::tma_c: a tile's rows are consecutive rows of C, gemm_launch.c),
//   from the tile staged as the 128-byte swizzle lays out a box: per 64 columns (128 bytes
//   of a row) bm rows of 128 bytes, 16-byte chunk c of row r at chunk c ^ (r % 8). One
//   tensor store writes a warpgroup's rows of 64 columns and clips the columns past N;
//   per-row bulk stores took one instruction a row, issued lane by lane (their operands
//   must be uniform). A tensor store clips rows only at the tensor's end, not at a group's:
//   a tile whose rows run past its group's goes out by boxes of 8 rows (tma_c8) and its
//   last rows by the threads' own stores. fp8 groups down ran 1.05x, dense W4A16 M = 4096
//   1.03x on them (H100, forty-second session; the tile's cycles outside the k loop fell
//   by half on fp8);
// - else by one bulk store a row (the gathered rows of the indexed layout) from rows PITCH
//   bytes apart, where C and PITCH are on 16 bytes;
// - else by the threads' copy loop.
#pragma once

#include "gemm_wgmma_epilogue.cuh"

// The swizzled staging tile of the tensor stores.
template <class C>
struct hm_tc_tile {
  static constexpr int box_bytes = C::bm * 128;  // one 64-column box of every tile row

  // Byte offset of tile row r's columns col, col + 1 (col even).
  __device__ static __forceinline__ int offset(int r, int col) {
    return (col >> 6) * box_bytes + r * 128 + ((((col & 63) >> 3) ^ (r & 7)) << 4) + (col & 7) * 2;
  }

  static_assert(C::bn % 64 == 0, "whole 64-column boxes");
  static_assert(C::tma_c_rows % 8 == 0 && C::tma_c_rows > 0 && C::tma_c_rows <= 256,
                "a box holds 8 to 256 rows, 8 at a time");
};

// Tile rows [r0, r1) of the swizzled tile out to their rows of C by thread t of `threads`,
// a column pair at a time: small code over speed, for what the tensor stores do not take
// (a group's last rows past its 8-row boxes; a C the tensor maps cannot describe, rare and
// said on the host). The batched copy (hm_wg_pairs_out) made each W8A8 kernel 1,000
// instructions longer, and NVRTC took a fifth longer over them.
template <class C>
__device__ __forceinline__ void hm_tc_copy_rows(const hm_gemm_params &p, const hm_tile &tile,
                                                const unsigned char *stage, const int *c_row, int r0, int r1,
                                                int t, int threads) {
  constexpr int pairs = C::bn / 2;
  const int x0 = tile.n_tile * C::bn;
  hm_u32 *c = (hm_u32 *)p.c;
#pragma unroll 1
  for (int i = t; i < (r1 - r0) * pairs; i += threads) {
    const int r = r0 + i / pairs, col = 2 * (i % pairs), row = c_row[r];
    if (row >= 0 && x0 + col < C::n)
      c[((long long)row * C::n + x0 + col) >> 1] = *(const hm_u32 *)(stage + hm_tc_tile<C>::offset(r, col));
  }
}

// How many of tile rows [first, first + C::tma_c_rows) have a C row: the rows that have one
// come first (each is its group's next row).
template <class C>
__device__ __forceinline__ int hm_tc_valid_rows(const int *c_row, int first) {
  int lo = 0, hi = C::tma_c_rows;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (c_row[first + mid - 1] >= 0)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// Tile rows [first, first + C::tma_c_rows) of the swizzled tile out to C by thread t of the
// `threads` that staged them: t 0 issues the tensor stores (one bulk group), all copy the
// last rows of a group that ends inside 8 rows.
template <class C>
__device__ __forceinline__ void hm_tc_store_rows(const hm_gemm_params &p, const hm_tile &tile,
                                                 const unsigned char *stage, const int *c_row, int first,
                                                 int t, int threads) {
  using S = hm_tc_tile<C>;
  constexpr int R = C::tma_c_rows, boxes = C::bn / 64;
  const int row0 = c_row[first], x0 = tile.n_tile * C::bn;
  if (row0 < 0) return;
  const int valid = c_row[first + R - 1] >= 0 ? R : hm_tc_valid_rows<C>(c_row, first);
  const int whole = valid == R ? R : valid & ~7;
  if (t == 0 && whole > 0) {
    const unsigned char *box = stage + first * 128;
    if (whole == R) {
#pragma unroll
      for (int b = 0; b < boxes; ++b) hm_tma_store_2d(&p.tma_c, x0 + 64 * b, row0, box + b * S::box_bytes);
    } else {
      for (int g = 0; g < whole; g += 8)
#pragma unroll
        for (int b = 0; b < boxes; ++b)
          hm_tma_store_2d(&p.tma_c8, x0 + 64 * b, row0 + g, box + g * 128 + b * S::box_bytes);
    }
    hm_bulk_commit();
  }
  hm_tc_copy_rows<C>(p, tile, stage, c_row, first + whole, first + valid, t, threads);
}

// The staging tile and its way out: by tensor stores (C::tma_c), else by bulk rows from
// rows PITCH bytes apart.
template <class C, int PITCH>
struct hm_ws_out {
  static constexpr int bytes = C::tma_c ? C::bm * C::bn * 2 : C::bm * PITCH;

  // Byte offset of tile row r's columns col, col + 1 (col even).
  __device__ static __forceinline__ int offset(int r, int col) {
    if constexpr (C::tma_c)
      return hm_tc_tile<C>::offset(r, col);
    else
      return r * PITCH + col * 2;
  }

  // Whether the asynchronous copy can take the tile: C aligned for the tensor maps (the
  // launch passes none otherwise, and says so), or rows and C on 16 bytes for bulk rows.
  __device__ static __forceinline__ bool async_ok(const hm_gemm_params &p) {
    if constexpr (C::tma_c)
      return ((unsigned long long)p.c & 15) == 0;
    else
      return hm_wg_bulk_ok<C, PITCH>(p);
  }

  // Tile rows [first, first + rows) out by thread t of `threads`, once fenced and synchronized.
  __device__ static __forceinline__ void async_rows(const hm_gemm_params &p, const hm_tile &tile,
                                                    const unsigned char *stage, const int *c_row, int first,
                                                    int rows, int t, int threads) {
    if constexpr (C::tma_c) {
      hm_tc_store_rows<C>(p, tile, stage, c_row, first, t, threads);
    } else {
      hm_wg_bulk_rows<C, PITCH>(p, tile, stage, c_row, first, rows, t, threads);
    }
  }

  // The whole tile out by the computing threads' own stores.
  __device__ static __forceinline__ void copy(const hm_gemm_params &p, const hm_tile &tile,
                                              const unsigned char *stage, const int *c_row) {
    if constexpr (C::tma_c)
      hm_tc_copy_rows<C>(p, tile, stage, c_row, 0, C::bm, threadIdx.x, hm_wg_traits<C>::threads);
    else
      hm_wg_copy_rows<C, PITCH>(p, tile, stage, c_row);
  }
};

// Synchronizes the threads that stage the output tile: warpgroup wm alone, or all consumers.
template <class C>
__device__ __forceinline__ void hm_ws_sync_staging(bool alone, int wm) {
  if (alone)
    hm_wg_sync_one(wm);
  else
    hm_wg_sync<C>();
}

// Stages the output tile (stage() writes it at Out::offset) and copies it out. With an
// asynchronous copy and whole token rows a warpgroup (wg_n 1), a warpgroup stages and
// stores its own rows alone, so the warpgroups may drift out of step across tiles and one's
// epilogue run beside another's wgmmas (fp8 groups down: 1.003x on top of the bulk stores,
// H100, fortieth session). The pipeline does not synchronize the consumers between tiles:
// this does before staging, once each thread's copies have read the previous tile.
template <class C, class Out, class Stage>
__device__ __forceinline__ void hm_ws_store_staged(const hm_gemm_params &p, const hm_tile &tile,
                                                   unsigned char *smem, const int *c_row, int wm,
                                                   Stage &&stage) {
  using G = hm_wg_traits<C>;
  const bool async = Out::async_ok(p);
  const bool alone = async && G::wg_n == 1;
  hm_bulk_wait_read();
  hm_ws_sync_staging<C>(alone, wm);
  stage();
  if (async) hm_fence_proxy_async();
  hm_ws_sync_staging<C>(alone, wm);
  // The threads that synchronized store the rows they staged: a warpgroup's (wg_n 1) or
  // the whole tile. The warpgroup is read from threadIdx.x, so that wm need not stay live
  // through the staging (it cost the 152-register three-warpgroup tile a spill).
  constexpr int issuers = G::wg_n == 1 ? 128 : G::threads, rows = C::bm / (G::threads / issuers);
  static_assert(!C::tma_c || rows == C::tma_c_rows, "the tensor map's box is the rows one call takes");
  if (async)
    Out::async_rows(p, tile, smem, c_row, threadIdx.x / issuers * rows, rows, threadIdx.x % issuers, issuers);
  else
    Out::copy(p, tile, smem, c_row);
}
