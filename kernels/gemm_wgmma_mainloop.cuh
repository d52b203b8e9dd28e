// SPDX-License-Identifier: Apache-2.0
// The wgmma mainloop: a cp.async ring of stages (activation tile in the 128-byte swizzle
// wgmma reads, weight units, scales, zero points as in the mma.sync kernel), and per
// k16 step: dequantize a warpgroup's weight columns into wgmma A fragments, then one
// m64nNk16 per 64 columns against the tokens in shared memory. One step's wgmmas run
// while the next step is dequantized.
#pragma once

#include "gemm_mainloop.cuh"
#include "gemm_wgmma_traits.cuh"
#include "hm_wgmma.cuh"

template <class C>
__device__ __forceinline__ void hm_wg_acc_zero(hm_wg_acc_t<C> &acc) {
  using T = hm_wg_traits<C>;
#pragma unroll
  for (int m = 0; m < T::mb; ++m) {
#pragma unroll
    for (int i = 0; i < T::wtm / 2; ++i) acc[m][i] = 0.0f;
    hm_wgmma_fence_operands(acc[m]);
  }
}

// Byte offset of 16-byte chunk ch (k = 8*ch..8*ch+7 of the k-tile) of token row r:
// 64-wide k-blocks of bm rows x 128 bytes, chunk c of a row stored at c ^ (r % 8).
template <class C>
__device__ __forceinline__ int hm_wg_a_offset(int r, int ch) {
  return (ch >> 3) * C::bm * 128 + r * 128 + (((ch & 7) ^ (r & 7)) << 4);
}

// A stage's copies: its scales and zero points (few threads, data-dependent branches),
// and part `part` of PARTS of its token rows and weight units (gemm_load.cuh), which
// branch on nothing, so that they may be issued while wgmmas run: with a branch a copy
// there, ptxas 13.0 serialized every wgmma of the kernel (C7513).
template <class C>
__device__ __forceinline__ void hm_wg_load_groups(const hm_gemm_params &p, const hm_tile &tile, int kt,
                                                  unsigned char *st) {
  using T = hm_wg_traits<C>;
  if constexpr (T::quant)
    hm_load_group_data<C, 128, T>((const unsigned char *)p.scales, tile, kt, st + T::s_off);
  if constexpr (T::z_bytes > 0) hm_load_group_data<C, 64, T>(p.zeros, tile, kt, st + T::z_off);
}

// The token-row copies of a wgmma kernel (EB bytes an element: 2, or 1 for W8A8), into the
// 128-byte swizzle its wgmmas read.
template <class C, int EB>
using hm_wg_a_plan = hm_a_plan<C, hm_wg_traits<C>::threads, EB>;

template <class C, int EB>
__device__ __forceinline__ void hm_wg_a_plan_init(hm_wg_a_plan<C, EB> &ap, const hm_gemm_params &p,
                                                  const int *a_row) {
  ap.init(p, a_row, [](int r, int ch) { return hm_wg_a_offset<C>(r, ch); });
}

template <class C, int PARTS = 1>
__device__ __forceinline__ void hm_wg_load_units(const hm_wg_a_plan<C, 2> &ap, const hm_gemm_params &p,
                                                 const hm_tile &tile, int kt, unsigned char *st, int part = 0,
                                                 bool on = true) {
  using T = hm_wg_traits<C>;
  ap.template stage<PARTS>(kt, hm_smem_addr(st), part, on);
  hm_load_b<C, T, PARTS>(p, tile, kt, st, part, on);
}

// Where a thread's A fragments come from. In a unit (hm_dequant.cuh) lane 4*gl + t holds
// columns j*8 + gl (j = 0..7) at the thread's k; its pair slots 4q..4q+3 are columns
// 2q*8 + gl and (2q+1)*8 + gl, the two wgmma rows of one thread. Thread (warp w of the
// warpgroup, g, t) takes unit lane 4*(2w + g%2) + t and slot group q = g/2: each unit
// word is read by one thread, and a warp's reads fall in distinct banks.
struct hm_wg_src {
  int ulane;  // unit lane
  int gl;     // its column within each n8 block
  int q;      // slot group
};

__device__ __forceinline__ hm_wg_src hm_wg_src_of(int wq, int lane) {
  const int g = lane >> 2;
  hm_wg_src s;
  s.gl = 2 * wq + (g & 1);
  s.ulane = 4 * s.gl + (lane & 3);
  s.q = g >> 1;
  return s;
}

// Scale and zero operands of a thread's two columns (h = 0, 1) in one scale group.
struct hm_wg_group {
  hm_u32 s2[2], z2[2];
};

template <class C>
__device__ __forceinline__ void hm_wg_group_load(const unsigned char *st, int gi, int unit_col,
                                                 const hm_wg_src &src, hm_wg_group &g) {
  using T = hm_wg_traits<C>;
  using D = hm_dq<T::bf16, C::bits>;
  // Scales sit at [n8 block j][column gl] within a unit's 64; j = 2q + h.
  const hm_u32 s =
      *(const hm_u32 *)(st + T::s_off + (gi * T::bn_units + unit_col) * 128 + src.gl * 16 + src.q * 4);
  g.s2[0] = hm_h2_broadcast(s, 0);
  g.s2[1] = hm_h2_broadcast(s, 1);
  if constexpr (T::z_bytes > 0) {
    const hm_u32 z = *(const unsigned short *)(st + T::z_off + (gi * T::bn_units + unit_col) * 64 +
                                               src.gl * 8 + src.q * 2);
    g.z2[0] = hm_zero_of_byte<T::bf16, C::bits>(z, 0);
    g.z2[1] = hm_zero_of_byte<T::bf16, C::bits>(z, 1);
  } else {
    g.z2[0] = g.z2[1] = D::zero((hm_u32)C::zero_const);
  }
}

// A fragments of one unit at k16 step s: pair slot 4q+i holds column half h = i/2 at k
// half i%2, and the registers go (h0, k lo), (h1, k lo), (h0, k hi), (h1, k hi).
template <class C>
__device__ __forceinline__ void hm_wg_fragment(const unsigned char *st, int unit_col, int s,
                                               const hm_wg_src &src, const hm_wg_group &g, hm_u32 (&a)[4]) {
  using T = hm_wg_traits<C>;
  using L = hm_wlayout<C::bits>;
  constexpr int group_words = C::bits / 4;  // words holding four pair slots
  constexpr int per_word = 16 / C::bits;    // pair slots per word
  const hm_u32 *w = (const hm_u32 *)(st + T::b_off + (unit_col * T::steps + s) * T::unit_bytes) +
                    L::offset(src.ulane, src.q * group_words);
  hm_u32 words[group_words];
  if constexpr (group_words == 4) {
    const uint4 v = *(const uint4 *)w;
    words[0] = v.x, words[1] = v.y, words[2] = v.z, words[3] = v.w;
  } else if constexpr (group_words == 2) {
    const uint2 v = *(const uint2 *)w;
    words[0] = v.x, words[1] = v.y;
  } else {
    words[0] = *w;
  }
  using D = hm_dq<T::bf16, C::bits>;
  hm_u32 codes[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const hm_u32 x = words[i / per_word] >> ((i % per_word) * C::bits);
    if constexpr (T::quant)
      codes[i] = D::operand(x);
    else
      codes[i] = x & L::mask2;
  }
  if constexpr (!T::quant) {
    a[0] = codes[0], a[1] = codes[2], a[2] = codes[1], a[3] = codes[3];
  } else {
    a[0] = D::apply(codes[0], g.z2[0], g.s2[0]);
    a[1] = D::apply(codes[2], g.z2[1], g.s2[1]);
    a[2] = D::apply(codes[1], g.z2[0], g.s2[0]);
    a[3] = D::apply(codes[3], g.z2[1], g.s2[1]);
  }
}

// The A-fragment registers: a ring of af_ring k16 steps of mb units.
template <class C>
using hm_wg_frags_t = hm_u32[hm_wg_traits<C>::af_ring][hm_wg_traits<C>::mb][4];

// One stage's dequant and wgmmas. retire() runs once no wgmma reads the previous stage
// any more (after the wait of step af_ring - 1), for a pipeline that hands slots back;
// between(s) after step s's wgmmas are issued, while they run.
template <class C, class R, class B>
__device__ __forceinline__ void hm_wg_compute_stage(const unsigned char *st, int wm, int wn,
                                                    const hm_wg_src &src, hm_wg_frags_t<C> &af,
                                                    hm_wg_acc_t<C> &acc, R &&retire, B &&between) {
  using T = hm_wg_traits<C>;
  const unsigned long long desc0 = hm_wgmma_desc_k128(hm_smem_addr(st) + wm * T::wtm * 128);
  hm_wg_group g[T::mb];
#pragma unroll
  for (int s = 0; s < T::steps; ++s) {
    if (s == 0 || (C::group != 0 && C::group < C::bk && (s * 16) % C::group == 0)) {
#pragma unroll
      for (int m = 0; m < T::mb; ++m)
        if constexpr (T::quant) hm_wg_group_load<C>(st, T::step_group(s), wn * T::mb + m, src, g[m]);
    }
    hm_u32(&a)[T::mb][4] = af[s % T::af_ring];
    hm_wgmma_wait<T::af_ring - 1>();  // the wgmmas that last read these registers are done
#pragma unroll
    for (int m = 0; m < T::mb; ++m) hm_wgmma_fence_operands(a[m]);
    if (s == T::af_ring - 1) retire();
#pragma unroll
    for (int m = 0; m < T::mb; ++m) hm_wg_fragment<C>(st, wn * T::mb + m, s, src, g[m], a[m]);
    hm_wgmma_fence();
    // Step s: k-block s / 4, 32 bytes further per k16 within a 128-byte row.
    const unsigned long long desc =
        desc0 + (unsigned long long)((((s >> 2) * C::bm * 128) + (s & 3) * 32) >> 4);
#pragma unroll
    for (int m = 0; m < T::mb; ++m) hm_wgmma_rs<T::wtm, T::bf16>(acc[m], a[m], desc);
    hm_wgmma_commit();
    between(s);
  }
}

// Accumulates k-tiles [kb, ke) of a tile into acc (zeroed first). Stage i + stages - 2
// loads into the slot of stage i - 2, whose wgmmas every warpgroup has waited for
// before the barrier. Its copies are issued a part after each k16 step's wgmmas: issued
// all at once after the barrier, they took 23 % of every warp's time with only the last
// step's wgmmas queued (Nsight's stall sampling, dense M = 4096). Leaves wgmma and
// cp.async drained and the CTA synchronized, so shared memory may be reused on return.
template <class C>
__device__ __forceinline__ void hm_wg_mainloop(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke,
                                               unsigned char *smem, const int *a_row, int wm, int wn,
                                               const hm_wg_src &src, hm_wg_acc_t<C> &acc) {
  using T = hm_wg_traits<C>;
  hm_wg_acc_zero<C>(acc);
  hm_wg_a_plan<C, 2> ap;
  hm_wg_a_plan_init<C>(ap, p, a_row);
  const int count = ke - kb;
  hm_cp_async_fill<0, C::stages - 2>(count, [&](int s) {
    hm_wg_load_groups<C>(p, tile, kb + s, smem + s * T::stage_bytes);
    hm_wg_load_units<C>(ap, p, tile, kb + s, smem + s * T::stage_bytes);
  });
  // A stage's weight units in fewer 16-byte copies than threads (bn64 bk64 of 4-bit codes
  // on two warpgroups) are copied with its groups, before the steps: issued between them,
  // ptxas 13.0 serialized those tiles' wgmmas (C7513; bm128 s5, bm64 s6).
  constexpr bool units_first = T::bn_units * T::steps * T::unit_bytes / 16 < T::threads;
  hm_wg_frags_t<C> af;
  for (int i = 0; i < count; ++i) {
    hm_cp_async_wait<C::stages - 3>();
    hm_fence_proxy_async();
    __syncthreads();
    const int next = i + C::stages - 2;
    unsigned char *next_st = smem + (next % C::stages) * T::stage_bytes;
    if (next < count) hm_wg_load_groups<C>(p, tile, kb + next, next_st);
    if constexpr (units_first) hm_load_b<C, T>(p, tile, kb + next, next_st, 0, next < count);
    hm_wg_compute_stage<C>(smem + (i % C::stages) * T::stage_bytes, wm, wn, src, af, acc, [] {}, [&](int s) {
      if constexpr (units_first)
        ap.template stage<T::steps>(kb + next, hm_smem_addr(next_st), s, next < count);
      else
        hm_wg_load_units<C, T::steps>(ap, p, tile, kb + next, next_st, s, next < count);
    });
    hm_cp_async_commit();
  }
  hm_wgmma_wait<0>();
#pragma unroll
  for (int m = 0; m < T::mb; ++m) hm_wgmma_fence_operands(acc[m]);
  hm_cp_async_wait<0>();
  __syncthreads();
}
