// SPDX-License-Identifier: Apache-2.0
// Tensor-core MMA of 8-bit operands through mma.sync m16n8k32: int8 x int8 -> s32 (sm_80+)
// and fp8 e4m3 x e4m3 -> f32 or f16 (sm_89+). The accumulator's type picks the instruction.
// Fragments (g = lane / 4, t = lane % 4), four 8-bit values a register, lower k in the
// lower byte:
//   A: a0 (row g, k 4t..4t+3), a1 (row g+8, same k), a2 (row g, k 16+4t..), a3 (row g+8, k 16+4t..)
//   B: b0 (k 4t..4t+3, col g), b1 (k 16+4t..16+4t+3, col g)
//   C: c0,c1 (row g, cols 2t, 2t+1), c2,c3 (row g+8, same cols); f16 accumulators pack
//      c0,c1 into one .f16x2 register and c2,c3 into another, lower column in the lower half
// Byte for byte these are the m16n8k16 fragments of 16-bit values (hm_mma.cuh), so
// ldmatrix of 16-byte rows and the 16-bit weight unit layout serve 8-bit data unchanged.
#pragma once

#include "hm_half2.cuh"

template <class T>
struct hm_is_s32 {
  static constexpr bool value = false;
};
template <>
struct hm_is_s32<int> {
  static constexpr bool value = true;
};

// A template whose discarded branch is never instantiated, so that a module only holds the
// instruction it calls: the fp8 one does not assemble below sm_89.
template <class Acc>
__device__ __forceinline__ void hm_mma_16832(Acc (&c)[4], const hm_u32 (&a)[4], hm_u32 b0, hm_u32 b1) {
  if constexpr (hm_is_s32<Acc>::value)
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// fp8 e4m3 x e4m3 with f16 accumulators, two f16x2 words (sm_89+): on GeForce Ada twice the
// f32 form's rate, on data-center Ada and Hopper the same rate.
__device__ __forceinline__ void hm_mma_16832(hm_u32 (&c)[2], const hm_u32 (&a)[4], hm_u32 b0, hm_u32 b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.f16.e4m3.e4m3.f16 {%0, %1}, "
      "{%2, %3, %4, %5}, {%6, %7}, {%0, %1};\n"
      : "+r"(c[0]), "+r"(c[1])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// fp8 e4m3 m16n8k16, f32 or f16 sums as above (sm_89+, PTX ISA 8.7): one K half of the k32
// MMA. A a0 (row g, k 4t..4t+3), a1 (row g+8, same k); B b0 (k 4t..4t+3, col g): k32 A
// registers 0, 1 and B register 0 hold k 0..15 in this layout, A 2, 3 and B 1 k 16..31.
__device__ __forceinline__ void hm_mma_16816_f8(float (&c)[4], hm_u32 a0, hm_u32 a1, hm_u32 b) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(b));
}

__device__ __forceinline__ void hm_mma_16816_f8(hm_u32 (&c)[2], hm_u32 a0, hm_u32 a1, hm_u32 b) {
  asm("mma.sync.aligned.m16n8k16.row.col.f16.e4m3.e4m3.f16 {%0, %1}, {%2, %3}, {%4}, {%0, %1};\n"
      : "+r"(c[0]), "+r"(c[1])
      : "r"(a0), "r"(a1), "r"(b));
}

// Four e4m3 codes times 2^-7, rounded to nearest e4m3 (sm_89+): exact for codes of 2 and
// more, a multiple of 2^-9 (2^-2 before the scaling) below, through f16, which holds every
// e4m3 value times 2^-7 exactly.
__device__ __forceinline__ hm_u32 hm_e4m3x4_div128(hm_u32 x) {
  hm_u32 d;
  asm("{\n"
      "  .reg .b16 lo, hi;\n"
      "  .reg .b32 hlo, hhi;\n"
      "  mov.b32 {lo, hi}, %1;\n"
      "  cvt.rn.f16x2.e4m3x2 hlo, lo;\n"
      "  cvt.rn.f16x2.e4m3x2 hhi, hi;\n"
      "  mul.rn.f16x2 hlo, hlo, %2;\n"
      "  mul.rn.f16x2 hhi, hhi, %2;\n"
      "  cvt.rn.satfinite.e4m3x2.f16x2 lo, hlo;\n"
      "  cvt.rn.satfinite.e4m3x2.f16x2 hi, hhi;\n"
      "  mov.b32 %0, {lo, hi};\n"
      "}\n"
      : "=r"(d)
      : "r"(x), "r"(0x20002000u));  // f16 2^-7 in both halves
  return d;
}

// Two e4m3 codes (bytes 0 and 1 of x) as an f16 pair, exactly (f16 holds every e4m3
// value), byte 0 in the lower half (sm_89+).
__device__ __forceinline__ hm_u32 hm_e4m3x2_to_f16x2(hm_u32 x) {
  hm_u32 h;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h) : "h"((unsigned short)x));
  return h;
}

// The same two codes in f32, byte 0 in f[0].
__device__ __forceinline__ void hm_e4m3x2_to_f32(hm_u32 x, float (&f)[2]) {
  const hm_u32 h = hm_e4m3x2_to_f16x2(x);
  f[0] = hm_h_to_f32<false>(h);
  f[1] = hm_h_to_f32<false>(h >> 16);
}

// f16 m16n8k16 with f16 accumulators, two f16x2 words (c0,c1 and c2,c3): the acc16 form of
// the MMAs that W4A8's f16 codes feed (gemm_w8a8_kernel.cuh).
__device__ __forceinline__ void hm_mma_16816_f16(hm_u32 (&c)[2], const hm_u32 (&a)[4], hm_u32 b0, hm_u32 b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%0, %1};\n"
      : "+r"(c[0]), "+r"(c[1])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
