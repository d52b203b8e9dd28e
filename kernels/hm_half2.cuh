// SPDX-License-Identifier: Apache-2.0
// Packed pairs of f16 or bf16 in one 32-bit register, through PTX so that kernels need
// no toolkit header under NVRTC. bf16 arithmetic goes through fma.rn.bf16x2, the one
// packed bf16 operation SM80 has (sub/mul.bf16x2 arrive with SM90).
#pragma once

typedef unsigned int hm_u32;

template <bool BF16>
__device__ __forceinline__ hm_u32 hm_h2_fma(hm_u32 a, hm_u32 b, hm_u32 c) {
  hm_u32 d;
  if constexpr (BF16)
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  else
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// a - b, exact when both are small integers of the same binade (the dequant case).
template <bool BF16>
__device__ __forceinline__ hm_u32 hm_h2_sub(hm_u32 a, hm_u32 b) {
  if constexpr (BF16) return hm_h2_fma<true>(b, 0xbf80bf80u, a);
  hm_u32 d;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

template <bool BF16>
__device__ __forceinline__ hm_u32 hm_h2_mul(hm_u32 a, hm_u32 b) {
  if constexpr (BF16) return hm_h2_fma<true>(a, b, 0x80008000u);
  hm_u32 d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// (lo, hi) f32 -> one packed pair, round to nearest even.
template <bool BF16>
__device__ __forceinline__ hm_u32 hm_h2_from_f32(float lo, float hi) {
  hm_u32 d;
  if constexpr (BF16)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

// One 16-bit value (in the low half of x) -> f32.
template <bool BF16>
__device__ __forceinline__ float hm_h_to_f32(hm_u32 x) {
  if constexpr (BF16) return __uint_as_float(x << 16);
  float f;
  unsigned short h = (unsigned short)(x & 0xffffu);
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

// The 16-bit value at half `which` of x, copied into both halves.
__device__ __forceinline__ hm_u32 hm_h2_broadcast(hm_u32 x, int which) {
  return __byte_perm(x, 0, which ? 0x3232 : 0x1010);
}
