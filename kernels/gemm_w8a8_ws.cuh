// SPDX-License-Identifier: Apache-2.0
// The warp-specialized W8A8 wgmma GEMM (sm_90a) on the pipeline of gemm_ws_pipe.cuh, with
// the tokens as the wgmma M side and the weights as N, both read from shared memory: the
// token rows as TMA (or cp.async) writes them (K-major, 128-byte swizzle), the weight
// units as their core matrices lie (hm_w8_units.cuh, K-major without swizzle). A stage
// holds the token rows, the units of each k32 step side by side ([step][unit column], so
// that a step's columns are one tile with core matrices 256 bytes apart along N) and, with
// 1x128 activation scales, each token row's scale.
//
// Warpgroup (wm, wn) owns tokens wm*wtm.. (wtm/64 m64 blocks) and columns wn*wtn.. (the
// wgmma N). A thread's accumulators hold two token rows an m64 block, so folding a stage
// with K-varying scales (128x128 weight blocks, 1x128 token groups) takes two scale
// products an m64 block, where the C^T tile of gemm_w8a8_wgmma.cuh takes one per token
// column pair. The consumer warpgroups drift apart: one folds while another's wgmmas
// keep the tensor cores busy. Three warpgroups of one m64 block each (bm 192) wait on
// their wgmmas once a stage instead of twice, and two others' stand ready to cover it.
//
// Scales as in gemm_w8a8_wgmma.cuh: fp8 folds every stage (Hopper's fp8 MMA keeps too few
// accumulator bits for a whole K); int8 without K-varying scales sums in s32 to the end of
// the segment; per-channel and per-token scales apply once a segment.
#pragma once

#include "gemm_w8a8_wgmma.cuh"
#include "gemm_ws_pipe.cuh"
#include "gemm_ws_store.cuh"

// The row pitch of the staged output tile (bytes): a warp's 4-byte writes cover 8 tokens
// (rows) x 4 adjacent column pairs, so rows 4 banks apart (an odd number of words, as
// hm_wgws_c_pitch, put them 1 bank apart: 4.3-way conflicts on 2.3 M shared stores of
// the fp8 groups kernel, Nsight, twenty-eighth session); the copy-out reads whole rows.
template <class C>
constexpr int hm_w8ss_c_pitch = C::bn * 2 + 16;

template <class C>
struct hm_w8ss_traits : hm_w8wg_traits<C> {
  using W = hm_w8wg_traits<C>;
  using G = hm_wg_traits<C>;
  static constexpr int mt = G::wtm / 64;      // m64 blocks of a warpgroup
  static constexpr int wn_regs = G::wtn / 2;  // accumulators of one m64 block (wgmma N = wtn)
  // At 40 registers the producer's copy loop spills (ptxas 13.0); a consumer needs up to
  // about 220 of the 224 this leaves two consumer warpgroups (192 sums, descriptors,
  // scales, addresses), and three get 152 for 128 sums.
  using out = hm_ws_out<C, hm_w8ss_c_pitch<C>>;
  using layout = hm_ws_layout<C, W::pipe_bytes, out::bytes, 56>;
  static constexpr int smem_bytes = layout::smem_bytes;
  static constexpr int max_sum_regs = G::threads == 256 ? 192 : 128;  // hm_gemm_wgmma_max_sum_regs

  static_assert(G::wtm % 64 == 0, "a warpgroup's tokens are whole m64 blocks");
  static_assert(G::acc_regs + wn_regs <= max_sum_regs,
                "accumulators and one m64 block's sums in a consumer's registers");
  static_assert(G::wtn % 64 == 0 && G::wtn <= 192, "wgmma N of 64, 128 or 192");
  static_assert(!C::w_block || 128 % G::wtn == 0, "a warpgroup's columns lie in one 128-column scale block");
};

// One m64 block's accumulators (or sums) of a thread: the wgmma's D fragment, viewed in the
// shape of the kernel's shared accumulator type.
template <class C, class S, int R, int B>
__device__ __forceinline__ S (&hm_w8ss_block(S (&a)[R][B], int mi))[hm_w8ss_traits<C>::wn_regs] {
  return *reinterpret_cast<S(*)[hm_w8ss_traits<C>::wn_regs]>(&a[0][0] + mi * hm_w8ss_traits<C>::wn_regs);
}

// Tile row (token) of accumulator i of m64 block mi: 16wq + g, or + 8 for i's second pair.
template <class C>
__device__ __forceinline__ int hm_w8ss_row(const hm_wg_place &at, int mi, int h) {
  return at.wm * hm_wg_traits<C>::wtm + mi * 64 + 16 * at.wq + (at.lane >> 2) + 8 * h;
}

// Tile column of accumulator i (its first of two adjacent columns when i is even).
template <class C>
__device__ __forceinline__ int hm_w8ss_col(const hm_wg_place &at, int i) {
  return at.wn * hm_wg_traits<C>::wtn + 8 * (i >> 2) + 2 * (at.lane & 3) + (i & 1);
}

// The stage's weight units (producer thread 0): unit (column c, k32 step s) of the tile
// from global (E, N/64, K/32) order to [s][c], announced on the full barrier first. Units
// past N or K are not copied; see hm_ws_run for the K tail.
template <class C>
__device__ __forceinline__ void hm_w8ss_load_weights(const hm_gemm_params &p, const hm_tile &tile, int kt,
                                                     unsigned char *st, unsigned long long *full) {
  using T = hm_w8wg_traits<C>;
  const int left_k = T::k16 - kt * T::steps, left_n = T::n_units - tile.n_tile * T::bn_units;
  const int units = left_k < T::steps ? left_k : T::steps;
  const int cols = left_n < T::bn_units ? left_n : T::bn_units;
  hm_mbar_arrive_expect_tx(full, (unsigned)(units * cols * hm_w8_unit_bytes));
  const unsigned char *b = (const unsigned char *)p.b;
  for (int c = 0; c < cols; ++c) {
    const long long unit = (long long)tile.e * T::n_units + tile.n_tile * T::bn_units + c;
    const unsigned char *src = b + (unit * T::k16 + kt * T::steps) * hm_w8_unit_bytes;
    for (int s = 0; s < units; ++s)
      hm_bulk_copy(st + T::b_off + (s * T::bn_units + c) * hm_w8_unit_bytes, src + s * hm_w8_unit_bytes,
                   hm_w8_unit_bytes, full);
  }
}

// With 1x128 activation scales, each token row's scale of the stage.
template <class C>
__device__ __forceinline__ void hm_w8ss_load_token_scales(const hm_gemm_params &p, int kt, unsigned char *st,
                                                          const int *a_row, int pt) {
  using T = hm_w8wg_traits<C>;
  for (int r = pt; r < C::bm; r += hm_ws_producers) {
    const int row = a_row[r];
    const float *src = p.a_scale + (row < 0 ? 0 : (long long)row * T::k_blocks + kt);
    hm_cp_async4(st + T::sa_off + r * 4, src, row >= 0);
  }
}

// One m64 block's sums of a stage (folding configs), in the MMA's type; int8 without
// K-varying scales keeps every block's sums of a segment (hm_w8wg_part_t).
template <class C>
using hm_w8ss_block_t = typename hm_w8_sum<C::a_int8>::type[1][hm_w8ss_traits<C>::wn_regs];

// Issues the wgmmas of m64 block mi for one stage into d (committed, not waited for): per
// k32 step one m64nNk32, A the block's token rows, B the step's units. FRESH: the first
// step overwrites d.
template <class C, bool FRESH, class S>
__device__ __forceinline__ void hm_w8ss_issue(const unsigned char *st, const hm_wg_place &at, int mi,
                                              S (&d)[hm_w8ss_traits<C>::wn_regs]) {
  using T = hm_w8ss_traits<C>;
  using G = hm_wg_traits<C>;
  const unsigned base = hm_smem_addr(st);
  // 64 rows of 128 bytes a block; 32 bytes of k a step within the swizzled rows.
  const unsigned long long a0 = hm_wgmma_desc_k128(base + (at.wm * G::wtm + mi * 64) * 128);
  hm_wgmma_fence();
#pragma unroll
  for (int s = 0; s < T::steps; ++s) {
    const unsigned b_addr = base + T::b_off + (s * G::bn_units + at.wn * G::wtn / 64) * hm_w8_unit_bytes;
    const unsigned long long b = hm_wgmma_desc_plain<128, 256>(b_addr);
    if (FRESH && s == 0)
      hm_wgmma8_ss<G::wtn, false>(d, a0 + (unsigned long long)(s * 2), b);
    else
      hm_wgmma8_ss<G::wtn, true>(d, a0 + (unsigned long long)(s * 2), b);
  }
  hm_wgmma_commit();
}

// Waits for the warpgroup's wgmmas and pins d after the wait (hm_w8wg_pin).
template <class S, int R>
__device__ __forceinline__ void hm_w8ss_wait(S (&d)[R]) {
  hm_wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < R; ++i) hm_w8wg_pin(d[i]);
}

// The K-varying scale of each of a thread's token rows for one stage: the weight block
// scale times the row's 1x128 scale (in st), or the block scale alone.
template <class C>
__device__ __forceinline__ void hm_w8ss_row_scales(const unsigned char *st, const hm_wg_place &at, float ws,
                                                   float (&s)[hm_w8ss_traits<C>::mt][2]) {
  using T = hm_w8ss_traits<C>;
#pragma unroll
  for (int mi = 0; mi < T::mt; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      s[mi][h] = ws;
      if constexpr (C::a_group) s[mi][h] *= *(const float *)(st + T::sa_off + hm_w8ss_row<C>(at, mi, h) * 4);
    }
}

// Block mi of acc += d * s, s by token row.
template <class C>
__device__ __forceinline__ void hm_w8ss_fold(const float (&s)[hm_w8ss_traits<C>::mt][2], int mi,
                                             const hm_w8ss_block_t<C> &d, hm_wg_acc_t<C> &acc) {
  using T = hm_w8ss_traits<C>;
  auto &a = hm_w8ss_block<C>(acc, mi);
#pragma unroll
  for (int i = 0; i < T::wn_regs; ++i) a[i] += (float)d[0][i] * s[mi][(i >> 1) & 1];
}

// acc *= the scales constant along K: per token (A row) and per channel (weight column).
template <class C>
__device__ __forceinline__ void hm_w8ss_finish(const hm_gemm_params &p, const hm_tile &tile, const int *a_row,
                                               const hm_wg_place &at, hm_wg_acc_t<C> &acc) {
  using T = hm_w8ss_traits<C>;
  float ts[T::mt][2], cs[T::wn_regs / 4][2];
#pragma unroll
  for (int mi = 0; mi < T::mt; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      ts[mi][h] = 1.0f;
      if constexpr (!C::a_group) {
        const int row = a_row[hm_w8ss_row<C>(at, mi, h)];
        ts[mi][h] = row < 0 ? 0.0f : p.a_scale[row];
      }
    }
  const float *ws = (const float *)p.scales + (long long)tile.e * C::n;
#pragma unroll
  for (int j = 0; j < T::wn_regs / 4; ++j)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      cs[j][c] = 1.0f;
      if constexpr (!C::w_block) {
        const int col = tile.n_tile * C::bn + hm_w8ss_col<C>(at, 4 * j + c);
        cs[j][c] = col < C::n ? ws[col] : 0.0f;
      }
    }
#pragma unroll
  for (int mi = 0; mi < T::mt; ++mi) {
    auto &a = hm_w8ss_block<C>(acc, mi);
#pragma unroll
    for (int i = 0; i < T::wn_regs; ++i) a[i] *= ts[mi][(i >> 1) & 1] * cs[i >> 2][i & 1];
  }
}

// Accumulates k-tiles [kb, ke) into acc (zeroed first), stages n, n+1, ..., scales
// applied. Folding configs take a stage's m64 blocks one at a time: issue its wgmmas, wait
// them out, fold (the slot goes back after the last block's wait); the other warpgroup's
// wgmmas cover each fold, and one block's sums in registers leave room for two blocks'
// accumulators. The row scales are read before the wgmmas are issued and the next block
// scale is loaded under them, so that nothing but the wgmmas lies between fence and
// commit. int8 without K-varying scales sums every block in place and keeps one stage's
// wgmmas in flight while the next is issued.
template <class C>
__device__ __forceinline__ void hm_w8ss_mainloop(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke,
                                                 const hm_ws_ring &ring, unsigned &n, const int *a_row,
                                                 const hm_wg_place &at, hm_wg_acc_t<C> &acc) {
  using T = hm_w8ss_traits<C>;
  if constexpr (T::fold) {
    hm_wg_acc_zero<C>(acc);
    hm_w8ss_block_t<C> d;
    float ws = hm_w8wg_block_scale<C>(p, tile, at.wn * hm_wg_traits<C>::wtn, kb);
    for (int kt = kb; kt < ke; ++kt, ++n) {
      const unsigned char *st = hm_ws_acquire<C, T::stage_bytes>(ring, n);
      float s[T::mt][2];
      hm_w8ss_row_scales<C>(st, at, ws, s);
#pragma unroll
      for (int mi = 0; mi < T::mt; ++mi) {
        hm_w8ss_issue<C, true>(st, at, mi, d[0]);
        if (mi == T::mt - 1) ws = hm_w8wg_block_scale<C>(p, tile, at.wn * T::wtn, kt + 1 < ke ? kt + 1 : kt);
        hm_w8ss_wait(d[0]);
        if (mi == T::mt - 1) hm_ws_release<C>(ring, n);
        hm_w8ss_fold<C>(s, mi, d, acc);
      }
    }
  } else {
    hm_w8wg_part_t<C> part;
#pragma unroll
    for (int m = 0; m < T::mb; ++m)
#pragma unroll
      for (int i = 0; i < T::wtm / 2; ++i) part[m][i] = 0;
    for (int kt = kb; kt < ke; ++kt, ++n) {
      const unsigned char *st = hm_ws_acquire<C, T::stage_bytes>(ring, n);
#pragma unroll
      for (int mi = 0; mi < T::mt; ++mi) hm_w8ss_issue<C, false>(st, at, mi, hm_w8ss_block<C>(part, mi));
      // This stage's groups in flight, the previous one's done (a no-op on the segment's
      // first); no branch between wgmmas in flight.
      hm_wgmma_wait<T::mt>();
      hm_ws_release<C>(ring, n - 1, kt > kb);
    }
    hm_w8wg_wait_stage<C>(part);
    hm_ws_release<C>(ring, n - 1);
#pragma unroll
    for (int m = 0; m < T::mb; ++m)
#pragma unroll
      for (int i = 0; i < T::wtm / 2; ++i) acc[m][i] = (float)part[m][i];
  }
  hm_w8ss_finish<C>(p, tile, a_row, at, acc);
}

// The output tile staged in the output type beside the ring, bias and scales applied on the
// way in (hm_ws_store_staged). Half the bytes of f32 staging: bm 128 x bn 128 leaves room
// for five stages instead of four.
template <class C>
struct hm_w8ss_c_out {
  using O = typename hm_w8ss_traits<C>::out;
  static constexpr int bytes = O::bytes;
  __device__ static __forceinline__ void store(const hm_gemm_params &p, const hm_tile &tile,
                                               unsigned char *smem, const int *c_row, const float *row_scale,
                                               int wm, int wn, int wq, int, const hm_wg_acc_t<C> &acc) {
    using T = hm_w8ss_traits<C>;
    hm_wg_place at;
    at.wm = wm, at.wn = wn, at.wq = wq, at.lane = hm_lane_now();
    hm_ws_store_staged<C, O>(p, tile, smem, c_row, wm, [&] {
      const float gs = C::global_scale ? p.global_scale[tile.e] : 1.0f;
      // A thread's rows' scales, read once: the compiler cannot keep them across the
      // staging stores, which may alias them in shared memory, and read them again for
      // every column.
      float rs[T::mt][2];
#pragma unroll
      for (int mi = 0; mi < T::mt; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) rs[mi][h] = row_scale[hm_w8ss_row<C>(at, mi, h)];
#pragma unroll
      for (int j = 0; j < T::wn_regs / 4; ++j) {
        const int col = hm_w8ss_col<C>(at, 4 * j);
        const float2 b = hm_wg_bias_pair<C>(p, tile, col);
#pragma unroll
        for (int mi = 0; mi < T::mt; ++mi)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float *a = &acc[0][0] + mi * T::wn_regs + 4 * j + 2 * h;
            *(hm_u32 *)(smem + O::offset(hm_w8ss_row<C>(at, mi, h), col)) =
                hm_h2_from_f32<C::out_bf16>((a[0] * gs + b.x) * rs[mi][h], (a[1] * gs + b.y) * rs[mi][h]);
          }
      }
    });
  }
};

template <class C>
struct hm_w8ws_traits : hm_w8ss_traits<C> {
  __device__ static __forceinline__ void load_stage(const hm_gemm_params &p, const hm_tile &tile, int kt,
                                                    unsigned char *st, unsigned long long *full,
                                                    const int *a_row, int pt) {
    hm_ws_load_rows<C, 1>(p, kt, st, a_row, pt, full);
    if (pt == 0) hm_w8ss_load_weights<C>(p, tile, kt, st, full);
    if constexpr (C::a_group) hm_w8ss_load_token_scales<C>(p, kt, st, a_row, pt);
  }
  __device__ static __forceinline__ void mainloop(const hm_gemm_params &p, const hm_tile &tile, int kb,
                                                  int ke, const hm_ws_ring &ring, unsigned &n,
                                                  const int *a_row, const hm_wg_place &at,
                                                  hm_wg_acc_t<C> &acc) {
    hm_w8ss_mainloop<C>(p, tile, kb, ke, ring, n, a_row, at, acc);
  }
  __device__ static __forceinline__ void store(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke,
                                               const hm_sk_piece &sk, unsigned char *c_stage,
                                               const hm_gemm_smem_maps &maps, const hm_wg_place &at,
                                               hm_wg_acc_t<C> &acc) {
    hm_wg_finish_segment<C, hm_w8ss_c_out<C>>(p, tile, kb, ke, sk, c_stage, maps, at, acc);
  }
};

template <class C>
__device__ __forceinline__ void hm_w8ws_run(const hm_gemm_params &p, hm_trace_clock &tr) {
  hm_ws_run<C, hm_w8ws_traits<C>>(p, tr);
}
