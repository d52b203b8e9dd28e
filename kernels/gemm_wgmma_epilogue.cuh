// SPDX-License-Identifier: Apache-2.0
// After the wgmma mainloop: Stream-K partials (flat per thread, so their layout does not
// depend on the fragment order) and the store of C. The accumulators hold C^T in wgmma
// fragments, columns in the order of hm_wg_traits::column; they are staged in shared memory as
// [token][column] (f32, or the output type: hm_wg_c_f32, gemm_ws_store.cuh), then each warp
// writes whole output rows: c = (acc * global_scale + bias) * row_scale, as the mma.sync
// epilogue computes it.
#pragma once

#include "gemm_wgmma_mainloop.cuh"
#include "hm_mbarrier.cuh"

// Synchronizes the warpgroups that compute the tile: the whole CTA, or with warp
// specialization all but the producer warpgroup, which never waits for the epilogue.
template <class C>
__device__ __forceinline__ void hm_wg_sync() {
  if constexpr (C::ws)
    hm_named_sync(1, hm_wg_traits<C>::threads);
  else
    __syncthreads();
}

// The lane, read again: threadIdx.x & 31 is the same all kernel long, so the compiler may
// compute what derives from it once and keep it through the mainloop, where the
// three-warpgroup W8A8 tile has no register to spare (its staging offsets spilled).
__device__ __forceinline__ int hm_lane_now() {
  unsigned lane;
  asm volatile("mov.u32 %0, %%laneid;\n" : "=r"(lane));
  return (int)lane;
}

// Synchronizes one computing warpgroup (wg) alone, on barrier 3 + wg (1 and 2 are the
// consumers' and the producer's of the warp-specialized pipeline).
__device__ __forceinline__ void hm_wg_sync_one(int wg) { hm_named_sync(3 + wg, 128); }

// A contributor's partial tile: [float4 q][thread], coalesced.
template <class C>
__device__ __forceinline__ void hm_wg_partial_store(const hm_gemm_params &p, int slot,
                                                    const hm_wg_acc_t<C> &acc) {
  using T = hm_wg_traits<C>;
  float4 *dst = (float4 *)(p.partials + (long long)slot * C::bm * C::bn) + threadIdx.x;
  const float *a = &acc[0][0];
#pragma unroll
  for (int q = 0; q < T::acc_regs / 4; ++q)
    __stcg(dst + q * T::threads, make_float4(a[4 * q], a[4 * q + 1], a[4 * q + 2], a[4 * q + 3]));
}

template <class C>
__device__ __forceinline__ void hm_wg_partial_add(const hm_gemm_params &p, int slot, hm_wg_acc_t<C> &acc) {
  using T = hm_wg_traits<C>;
  const float4 *src = (const float4 *)(p.partials + (long long)slot * C::bm * C::bn) + threadIdx.x;
  float *a = &acc[0][0];
#pragma unroll
  for (int q = 0; q < T::acc_regs / 4; ++q) {
    const float4 v = __ldcg(src + q * T::threads);
    a[4 * q] += v.x, a[4 * q + 1] += v.y, a[4 * q + 2] += v.z, a[4 * q + 3] += v.w;
  }
}

// The accumulators into the staging tile. Lanes g and g^1 hold adjacent columns of the
// same two tokens; one shuffle gives the even-g lane both columns of the first token and
// the odd-g lane both of the second, so each stores one 8-byte pair.
template <class C>
__device__ __forceinline__ void hm_wg_stage_tile(unsigned char *stage, int wm, int wn, int wq, int lane,
                                                 const hm_wg_acc_t<C> &acc) {
  using T = hm_wg_traits<C>;
  const int odd = (lane >> 2) & 1, t = lane & 3;
#pragma unroll
  for (int m = 0; m < T::mb; ++m)
#pragma unroll
    for (int i = 0; i < T::wtm / 2; i += 2) {
      const float send = odd ? acc[m][i] : acc[m][i + 1];
      const float recv = __shfl_xor_sync(0xffffffffu, send, 4);
      const int col = wn * T::wtn + m * 64 + T::column(wq, lane, (i >> 1) & 1) - odd;
      const int token = wm * T::wtm + 8 * (i >> 2) + 2 * t + odd;
      const float2 v = odd ? make_float2(recv, acc[m][i + 1]) : make_float2(acc[m][i], recv);
      *(float2 *)(stage + token * T::c_pitch + col * 4) = v;
    }
}

// The bias of tile column col and the next one (zeros past N or without a bias).
template <class C>
__device__ __forceinline__ float2 hm_wg_bias_pair(const hm_gemm_params &p, const hm_tile &tile, int col) {
  float2 b = make_float2(0.0f, 0.0f);
  if constexpr (C::bias) {
    const int n = tile.n_tile * C::bn + col;
    if (n < C::n) {
      const hm_u32 bb = ((const hm_u32 *)p.bias)[((long long)tile.e * C::n + n) >> 1];
      b = make_float2(hm_h_to_f32<C::out_bf16>(bb), hm_h_to_f32<C::out_bf16>(bb >> 16));
    }
  }
  return b;
}

// The column pairs of a staged tile ([token][column]) out to their rows of C (all computing
// threads, after the staging is synchronized): load(r, pc) reads token r's pair pc from shared
// memory, store(row, r, col, v) writes it to C's row. Each thread loads a batch of pairs before
// it stores any: one at a time, each global store waited out its shared load (generic
// pointers, which may alias, keep them in order), and the copy took 57 % of the epilogue of
// the fp8 and W4A16 warp-specialized kernels, 5-7 % of their consumers' time (Nsight source
// pages, H100, twenty-fifth session).
template <class C, class Load, class Store>
__device__ __forceinline__ void hm_wg_pairs_out(const hm_tile &tile, const int *c_row, Load &&load,
                                                Store &&store) {
  using T = hm_wg_traits<C>;
  constexpr int pairs = C::bn / 2, items = C::bm * pairs, batch = 8;
  constexpr int per_thread = (items + T::threads - 1) / T::threads;
  using V = decltype(load(0, 0));
#pragma unroll 1
  for (int i0 = 0; i0 < per_thread; i0 += batch) {
    V v[batch];
    int row[batch];
#pragma unroll
    for (int j = 0; j < batch; ++j) {
      const int idx = threadIdx.x + (i0 + j) * T::threads, r = idx / pairs, pc = idx % pairs;
      row[j] = -1;
      if (idx < items && tile.n_tile * C::bn + 2 * pc < C::n) {
        row[j] = c_row[r];
        v[j] = load(r, pc);
      }
    }
#pragma unroll
    for (int j = 0; j < batch; ++j) {
      const int idx = threadIdx.x + (i0 + j) * T::threads, r = idx / pairs, pc = idx % pairs;
      if (row[j] >= 0) store(row[j], r, 2 * pc, v[j]);
    }
  }
}

// Copies the staged f32 tile (c_pitch bytes a row) out as whole rows, bias and scales applied.
template <class C>
__device__ __forceinline__ void hm_wg_write_rows(const hm_gemm_params &p, const hm_tile &tile,
                                                 const unsigned char *smem, const int *c_row,
                                                 const float *row_scale) {
  using T = hm_wg_traits<C>;
  const float gs = C::global_scale ? p.global_scale[tile.e] : 1.0f;
  hm_u32 *c = (hm_u32 *)p.c;
  hm_wg_pairs_out<C>(
      tile, c_row, [&](int r, int pc) { return *(const float2 *)(smem + r * T::c_pitch + pc * 8); },
      [&](int row, int r, int col, float2 v) {
        const float2 b = hm_wg_bias_pair<C>(p, tile, col);
        const float rs = row_scale[r];
        c[((long long)row * C::n + tile.n_tile * C::bn + col) >> 1] =
            hm_h2_from_f32<C::out_bf16>((v.x * gs + b.x) * rs, (v.y * gs + b.y) * rs);
      });
}

// Writes the tile (all computing threads): stage, synchronize, copy rows out.
template <class C>
__device__ __forceinline__ void hm_wg_store_tile(const hm_gemm_params &p, const hm_tile &tile,
                                                 unsigned char *smem, const int *c_row,
                                                 const float *row_scale, int wm, int wn, int wq, int lane,
                                                 const hm_wg_acc_t<C> &acc) {
  hm_wg_stage_tile<C>(smem, wm, wn, wq, lane, acc);
  hm_wg_sync<C>();
  hm_wg_write_rows<C>(p, tile, smem, c_row, row_scale);
}

// The accumulators into a staging tile in the output type at Out::offset(token, column),
// bias and scales applied on the way in, lanes paired as in hm_wg_stage_tile so that each
// writes one column pair.
template <class C, class Out>
__device__ __forceinline__ void hm_wg_stage_out(const hm_gemm_params &p, const hm_tile &tile,
                                                unsigned char *stage, const float *row_scale, int wm, int wn,
                                                int wq, int lane, const hm_wg_acc_t<C> &acc) {
  using T = hm_wg_traits<C>;
  const int odd = (lane >> 2) & 1, t = lane & 3;
  const float gs = C::global_scale ? p.global_scale[tile.e] : 1.0f;
  int col[T::mb][2];
  float2 b[T::mb][2];
#pragma unroll
  for (int m = 0; m < T::mb; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      col[m][h] = wn * T::wtn + m * 64 + T::column(wq, lane, h) - odd;
      b[m][h] = hm_wg_bias_pair<C>(p, tile, col[m][h]);
    }
  // Token-major, so that each token's row scale is read once for its column blocks: the
  // compiler cannot keep it across the staging stores, which may alias it in shared memory.
#pragma unroll
  for (int q = 0; q < T::wtm / 8; ++q) {
    const int token = wm * T::wtm + 8 * q + 2 * t + odd;
    const float rs = row_scale[token];
#pragma unroll
    for (int m = 0; m < T::mb; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = 4 * q + 2 * h;
        const float send = odd ? acc[m][i] : acc[m][i + 1];
        const float recv = __shfl_xor_sync(0xffffffffu, send, 4);
        const float x = odd ? recv : acc[m][i], y = odd ? acc[m][i + 1] : recv;
        *(hm_u32 *)(stage + Out::offset(token, col[m][h])) =
            hm_h2_from_f32<C::out_bf16>((x * gs + b[m][h].x) * rs, (y * gs + b[m][h].y) * rs);
      }
  }
}

// Copies a tile staged in the output type (PITCH bytes a row) out as whole rows.
template <class C, int PITCH>
__device__ __forceinline__ void hm_wg_copy_rows(const hm_gemm_params &p, const hm_tile &tile,
                                                const unsigned char *smem, const int *c_row) {
  hm_u32 *c = (hm_u32 *)p.c;
  hm_wg_pairs_out<C>(
      tile, c_row, [&](int r, int pc) { return *(const hm_u32 *)(smem + r * PITCH + pc * 4); },
      [&](int row, int, int col, hm_u32 v) { c[((long long)row * C::n + tile.n_tile * C::bn + col) >> 1] = v; });
}

// Whether a tile staged in the output type (PITCH bytes a row) may go out by bulk stores:
// each row's first column and its staged copy on 16 bytes (N a multiple of 8, C and the
// pitch on 16 bytes), so that every row inside N is whole 16-byte pieces.
template <class C, int PITCH>
__device__ __forceinline__ bool hm_wg_bulk_ok(const hm_gemm_params &p) {
  return C::n % 8 == 0 && PITCH % 16 == 0 && ((unsigned long long)p.c & 15) == 0;
}

// Copies staged rows [first, first + rows) out through the copy engine, one bulk store a row
// (its columns inside N) issued by thread t of the `threads` that stored them, once their
// staging writes are fenced for the async proxy and synchronized. It returns before the
// rows are read: the copy-out loop's shared loads and global stores (57 % of the epilogue,
// twenty-fifth session) leave the consumers, which go on to the next tile (fp8 groups
// down 1.032x, gate_up level; H100, fortieth session). Before the rows are staged again
// each thread waits for its stores to have read them (hm_bulk_wait_read), then the
// threads synchronize.
template <class C, int PITCH>
__device__ __forceinline__ void hm_wg_bulk_rows(const hm_gemm_params &p, const hm_tile &tile,
                                                const unsigned char *smem, const int *c_row, int first, int rows,
                                                int t, int threads) {
  const int n0 = tile.n_tile * C::bn;
  const unsigned bytes = (unsigned)(C::n - n0 < C::bn ? C::n - n0 : C::bn) * 2;
  for (int r = first + t; r < first + rows; r += threads) {
    const int row = c_row[r];
    if (row >= 0) hm_bulk_store((unsigned char *)p.c + ((long long)row * C::n + n0) * 2, smem + r * PITCH, bytes);
  }
  hm_bulk_commit();
}

// How a kernel stages its output tile for the coalesced copy out. In f32, bias and scales
// applied on the way out (the non-specialized kernels, whose drained ring holds it).
template <class C>
struct hm_wg_c_f32 {
  static constexpr int bytes = hm_wg_traits<C>::c_bytes;
  __device__ static __forceinline__ void store(const hm_gemm_params &p, const hm_tile &tile,
                                               unsigned char *smem, const int *c_row, const float *row_scale,
                                               int wm, int wn, int wq, int lane, const hm_wg_acc_t<C> &acc) {
    hm_wg_store_tile<C>(p, tile, smem, c_row, row_scale, wm, wn, wq, lane, acc);
  }
};
