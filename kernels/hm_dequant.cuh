// SPDX-License-Identifier: Apache-2.0
// The layout of transformed weights and its dequantization in registers.
//
// A unit is a 16 (k) x 64 (n) block of b-bit codes. Lane l (g = l / 4, t = l % 4) owns
// the 32 codes of its mma.sync B fragments for the eight n8 blocks j of the unit: column
// j*8+g, rows k = 2t, 2t+1 (pair slot 2j) and 2t+8, 2t+9 (pair slot 2j+1). A pair slot
// holds its two codes at bits [s, s+b) and [16+s, 16+s+b) of one word, so one AND/OR
// with a magic exponent turns both into a packed f16/bf16 pair. A lane has b words:
// 16/b pairs fit a word; the pairs left over (b = 3, 5, 6, 7) are spread over the spare
// high bits of each half, so a unit costs exactly 32*b bits per lane. Words are stored
// in chunks of V (4, 2 or 1) so that each lane's load is one V-word vector and a warp's
// load is one contiguous span.
#pragma once

#include "hm_half2.cuh"

template <int B>
struct hm_wlayout {
  static constexpr int words = B;                   // per lane per unit
  static constexpr int per_word = 16 / B;           // pair slots in the low bits of a word
  static constexpr int regular = words * per_word < 16 ? words * per_word : 16;
  static constexpr int spare = 16 - per_word * B;   // spare bits at the top of each half
  static constexpr int spare_div = spare ? spare : 1;
  static constexpr int vec = words % 4 == 0 ? 4 : (words % 2 == 0 ? 2 : 1);
  static constexpr int unit_words = 32 * words;
  static constexpr hm_u32 mask1 = B >= 16 ? 0xffffu : ((1u << B) - 1u);
  static constexpr hm_u32 mask2 = mask1 * 0x10001u;

  // Word index within the unit of word w of lane l.
  __host__ __device__ static constexpr int offset(int lane, int w) {
    return (w / vec) * 32 * vec + lane * vec + w % vec;
  }
};

// Stores codes lo (lower k) and hi of pair slot ps into a lane's words (transform side).
template <int B>
__host__ __device__ __forceinline__ void hm_place_pair(hm_u32 (&w)[B], int ps, hm_u32 lo, hm_u32 hi) {
  using L = hm_wlayout<B>;
  const hm_u32 pair = (lo & L::mask1) | ((hi & L::mask1) << 16);
  if (ps < L::regular) {
    w[ps / L::per_word] |= pair << ((ps % L::per_word) * B);
    return;
  }
  for (int i = 0; i < B; ++i) {
    const int bit = (ps - L::regular) * B + i;
    const int pos = L::per_word * B + bit % L::spare_div;
    w[bit / L::spare_div] |= ((pair >> i) & 0x10001u) << pos;
  }
}

// Both codes of pair slot ps at bits [0, b) and [16, 16+b) (kernel side; ps constant after unrolling).
template <int B>
__host__ __device__ __forceinline__ hm_u32 hm_pair_codes(const hm_u32 (&w)[B], int ps) {
  using L = hm_wlayout<B>;
  if (B >= 16) return w[ps];
  if (ps < L::regular) return (w[ps / L::per_word] >> ((ps % L::per_word) * B)) & L::mask2;
  hm_u32 pair = 0;
#pragma unroll
  for (int i = 0; i < B; ++i) {
    const int bit = (ps - L::regular) * B + i;
    const int pos = L::per_word * B + bit % L::spare_div;
    pair |= ((w[bit / L::spare_div] >> pos) & 0x10001u) << i;
  }
  return pair;
}

// A lane's words of one unit in shared memory, one vector load per chunk; lane_words is
// the unit's address plus the lane's offset in a chunk (hm_lane_words_offset).
template <int B>
__device__ __forceinline__ void hm_load_lane_words_at(hm_u32 (&w)[B], const unsigned char *lane_words) {
  using L = hm_wlayout<B>;
  const hm_u32 *u = (const hm_u32 *)lane_words;
#pragma unroll
  for (int c = 0; c < B / L::vec; ++c) {
    const hm_u32 *p = u + L::offset(0, c * L::vec);
    if constexpr (L::vec == 4) {
      uint4 v = *(const uint4 *)p;
      w[4 * c] = v.x, w[4 * c + 1] = v.y, w[4 * c + 2] = v.z, w[4 * c + 3] = v.w;
    } else if constexpr (L::vec == 2) {
      uint2 v = *(const uint2 *)p;
      w[2 * c] = v.x, w[2 * c + 1] = v.y;
    } else {
      w[c] = *p;
    }
  }
}

// Bytes from a unit's first word to lane's first word.
template <int B>
__host__ __device__ constexpr int hm_lane_words_offset(int lane) {
  return hm_wlayout<B>::offset(lane, 0) * 4;
}

template <int B>
__device__ __forceinline__ void hm_load_lane_words(hm_u32 (&w)[B], const unsigned char *unit, int lane) {
  hm_load_lane_words_at<B>(w, unit + hm_lane_words_offset<B>(lane));
}

// (x & mask) | bits in one lop3: ptxas leaves the mask and the magic as an AND and an OR.
__device__ __forceinline__ hm_u32 hm_and_or(hm_u32 x, hm_u32 mask, hm_u32 bits) {
  hm_u32 d;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(d) : "r"(x), "r"(mask), "r"(bits));
  return d;
}

// Codes are exact small integers once ORed into the mantissa of 1024 (f16) or 128
// (bf16); 8-bit codes overflow bf16's mantissa and go through f32 (2^23) instead.
template <bool BF16, int B>
struct hm_dq {
  static constexpr bool via_f32 = BF16 && B == 8;
  static constexpr hm_u32 magic = BF16 ? 0x4300u : 0x6400u;
  static constexpr hm_u32 magic2 = magic * 0x10001u;

  // The per-column zero operand for zero point z (an 8-bit code).
  __device__ static __forceinline__ hm_u32 zero(hm_u32 z) {
    if constexpr (via_f32) return z;
    return (z | magic) * 0x10001u;
  }

  // What apply takes, from a pair shifted down to bit 0 (bits above it not yet masked):
  // magic + codes (one lop3) where the codes fit the mantissa, else the bare codes.
  __device__ static __forceinline__ hm_u32 operand(hm_u32 x) {
    if constexpr (via_f32) return x & hm_wlayout<B>::mask2;
    return hm_and_or(x, hm_wlayout<B>::mask2, magic2);
  }

  // The operand of pair slot ps of a lane's words. Outside via_f32 it is magic + codes,
  // both halves: the exact values the late-scale step multiplies (gemm_swap.cuh).
  __device__ static __forceinline__ hm_u32 pair(const hm_u32 (&w)[B], int ps) {
    using L = hm_wlayout<B>;
    if (ps >= L::regular) return via_f32 ? hm_pair_codes<B>(w, ps) : hm_pair_codes<B>(w, ps) | magic2;
    return operand(w[ps / L::per_word] >> ((ps % L::per_word) * B));
  }
  static constexpr float magic_value = BF16 ? 128.0f : 1024.0f;
  static constexpr hm_u32 one2 = BF16 ? 0x3f803f80u : 0x3c003c00u;  // (1.0, 1.0)

  // (codes - zero) * scale, both halves, from operand or pair; s2 holds the column's scale
  // in both halves.
  __device__ static __forceinline__ hm_u32 apply(hm_u32 op, hm_u32 z, hm_u32 s2) {
    if constexpr (via_f32) {
      const float zf = __uint_as_float(0x4b000000u | z);
      const float lo = __uint_as_float(0x4b000000u | (op & 0xffu)) - zf;
      const float hi = __uint_as_float(0x4b000000u | (op >> 16)) - zf;
      return hm_h2_mul<true>(hm_h2_from_f32<true>(lo, hi), s2);
    } else {
      return hm_h2_mul<BF16>(hm_h2_sub<BF16>(op, z), s2);
    }
  }
};
