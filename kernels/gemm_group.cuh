// SPDX-License-Identifier: Apache-2.0
// The scale and zero operands of the dequant, built once per scale group a warp meets
// in a stage instead of once per k16 step: they are constant over the group, and
// rebuilding them per step cost about as many instructions as the codes themselves. And
// where a lane finds its operands in a stage (hm_lane_addr).
#pragma once

#include "gemm_traits.cuh"

// A lane's operands for the eight n8 blocks j of one weight unit: its column's scale and
// its zero operand (hm_dq::zero of the zero point), each in both halves.
struct hm_group_vals {
  hm_u32 s2[8];
  hm_u32 z2[8];
};

// hm_dq::zero of byte b of a word of zero points, in one byte permute: the magic's high
// byte over the zero point in both halves (exact: zero points stay below the magic's ulp
// span, 2^bits <= 128 for bf16 and <= 1024 for f16).
template <bool BF16, int B>
__device__ __forceinline__ hm_u32 hm_zero_of_byte(hm_u32 zeros, int b) {
  using D = hm_dq<BF16, B>;
  if constexpr (D::via_f32) return (zeros >> (8 * b)) & 0xffu;
  constexpr hm_u32 high = (D::magic >> 8) * 0x01010101u;
  return __byte_perm(zeros, high, 0x4040u | (hm_u32)b * 0x0101u);
}

// The f32 magic + z of zero point byte b, which the late-scale fold subtracts (exact: a
// byte over the magic's high byte; bf16 lands as the f32's high half, f16 converts).
template <bool BF16, int B>
__device__ __forceinline__ float hm_biased_zero_f32(hm_u32 zeros, int b) {
  if constexpr (BF16)
    return __uint_as_float(__byte_perm(zeros, hm_dq<true, B>::magic >> 8, 0x4055u | (hm_u32)b << 8));
  return hm_h_to_f32<false>(hm_zero_of_byte<false, B>(zeros, b));
}

// The late-scale fold's operands of one scale group and unit column, for the eight n8
// blocks j: the column's scale and its biased zero, in f32. sc and zp: the lane's scale
// and zero words (hm_lane_addr). Read once per run of a warp's steps in one group, so
// they are not kept live across the steps.
template <class C>
__device__ __forceinline__ void hm_fold_load(const unsigned char *sc, const unsigned char *zp, float (&s)[8],
                                             float (&zb)[8]) {
  using T = hm_gemm_traits<C>;
  using D = hm_dq<T::bf16, C::bits>;
  const uint4 v = *(const uint4 *)sc;
  const hm_u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 8; ++j) s[j] = hm_h_to_f32<T::bf16>((j & 1) ? w[j >> 1] >> 16 : w[j >> 1]);
  if constexpr (T::z_bytes > 0) {
    const uint2 z = *(const uint2 *)zp;
#pragma unroll
    for (int j = 0; j < 8; ++j) zb[j] = hm_biased_zero_f32<T::bf16, C::bits>(j < 4 ? z.x : z.y, j & 3);
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) zb[j] = D::magic_value + (float)C::zero_const;
  }
}

// Loads the operands of one scale group and unit column from the lane's scale and zero
// words sc and zp (hm_lane_addr).
template <class C>
__device__ __forceinline__ void hm_group_load(const unsigned char *sc, const unsigned char *zp,
                                              hm_group_vals &g) {
  using T = hm_gemm_traits<C>;
  using D = hm_dq<T::bf16, C::bits>;
  const uint4 v = *(const uint4 *)sc;
  const hm_u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 8; ++j) g.s2[j] = hm_h2_broadcast(w[j >> 1], j & 1);
  if constexpr (T::z_bytes > 0) {
    const uint2 z = *(const uint2 *)zp;
#pragma unroll
    for (int j = 0; j < 8; ++j) g.z2[j] = hm_zero_of_byte<T::bf16, C::bits>(j < 4 ? z.x : z.y, j & 3);
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) g.z2[j] = D::zero((hm_u32)C::zero_const);
  }
}

// The dequantized pair slot ps (of n8 block ps / 2) of a lane's unit words.
template <class C>
__device__ __forceinline__ hm_u32 hm_dq_pair(const hm_u32 (&w)[C::bits], int ps, const hm_group_vals &g) {
  using T = hm_gemm_traits<C>;
  using D = hm_dq<T::bf16, C::bits>;
  if constexpr (!T::quant) return hm_pair_codes<C::bits>(w, ps);
  return D::apply(D::pair(w, ps), g.z2[ps >> 1], g.s2[ps >> 1]);
}

// Whether k16 step ss (of the warp's wk_steps) starts a scale group for this warp: a warp's
// steps lie in one group unless groups are shorter than its share of the stage.
template <class C>
__device__ __forceinline__ constexpr bool hm_group_starts(int ss) {
  using T = hm_gemm_traits<C>;
  return (C::group == 0 || C::group >= T::wk_steps * 16) ? ss == 0 : (ss * 16) % C::group == 0;
}

// A lane's operand offsets in a stage for its warp's first k16 step: the ldmatrix row of
// steps 0..3, its words of the warp's first unit, its scale and zero words of that unit's
// column. Built once per segment; later steps, units and groups lie at constant distances
// (hm_lane_addr_a, hm_lane_group), so a k16 step does no address arithmetic.
template <class C>
struct hm_lane_addr {
  static constexpr int a_slots = hm_gemm_traits<C>::wk_steps < 4 ? hm_gemm_traits<C>::wk_steps : 4;
  unsigned a[a_slots];
  unsigned b, s, z;
};

// The ldmatrix row offset of the warp's step ss: its chunk index 2 s + h XORs with the row
// only in its low three bits, so steps four apart are 128 bytes apart.
template <class C>
__device__ __forceinline__ unsigned hm_lane_addr_a(const hm_lane_addr<C> &la, int ss) {
  return la.a[ss & 3] + (ss >> 2) * 128;
}

// The scale group of the warp's step ss less that of its first step: groups shorter than
// the warp's steps start at multiples of group, longer ones cover all of them.
template <class C>
__device__ __forceinline__ constexpr int hm_lane_group(int ss) {
  using T = hm_gemm_traits<C>;
  return (C::group == 0 || C::group >= C::bk || C::group > T::wk_steps * 16) ? 0 : ss * 16 / C::group;
}
