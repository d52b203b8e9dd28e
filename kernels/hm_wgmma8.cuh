// SPDX-License-Identifier: Apache-2.0
// Warpgroup MMA of 8-bit operands (sm_90a): wgmma.mma_async m64nNk32 with A from
// registers, B from shared memory (K-major, through a descriptor): fp8 e4m3 x e4m3 -> f32
// and s8 x s8 -> s32. A fragment (warp w of the warpgroup, g = lane / 4, t = lane % 4),
// four 8-bit values a register, lower k in the lower byte (PTX ISA, wgmma .m64nNk32
// register fragment of A; CUTLASS GMMA::ALayout_64x32):
//   a0 (row 16w+g, k 4t..4t+3), a1 (row 16w+g+8, same k), a2 (row 16w+g, k 16+4t..),
//   a3 (row 16w+g+8, k 16+4t..): byte for byte the m16n8k16 A of 16-bit values
// D is laid out as for m64nNk16 (hm_wgmma.cuh). The integer form has no N above 224.
// hm_wgmma8_ss takes A from shared memory too (gemm_w8a8_ws.cuh: tokens as A).
#pragma once

#include "hm_wgmma.cuh"

#define HM_WG8_R16(b)                                                                                   \
  "+r"(d[b + 0]), "+r"(d[b + 1]), "+r"(d[b + 2]), "+r"(d[b + 3]), "+r"(d[b + 4]), "+r"(d[b + 5]),       \
      "+r"(d[b + 6]), "+r"(d[b + 7]), "+r"(d[b + 8]), "+r"(d[b + 9]), "+r"(d[b + 10]), "+r"(d[b + 11]), \
      "+r"(d[b + 12]), "+r"(d[b + 13]), "+r"(d[b + 14]), "+r"(d[b + 15])
#define HM_WG8_OPS_32 HM_WG8_R16(0)
#define HM_WG8_OPS_64 HM_WG8_OPS_32, HM_WG8_R16(16)
#define HM_WG8_OPS_96 HM_WG8_OPS_64, HM_WG8_R16(32)
#define HM_WG8_OPS_128 HM_WG8_OPS_96, HM_WG8_R16(48)
#define HM_WG8_OPS_160 HM_WG8_OPS_128, HM_WG8_R16(64)
#define HM_WG8_OPS_192 HM_WG8_OPS_160, HM_WG8_R16(80)
#define HM_WG8_OPS_224 HM_WG8_OPS_192, HM_WG8_R16(96)

// scale-d is an immediate: 0 overwrites d (a stage's first k32 step), 1 accumulates.
#define HM_WG8_F8_ASM(n, acc)                                                              \
  asm volatile("wgmma.mma_async.sync.aligned.m64n" #n "k32.f32.e4m3.e4m3 {" HM_WG_REGS_##n \
               "}, " HM_WG_TAIL_##n ", " acc ", 1, 1;\n"                                   \
               : HM_WG_OPS_##n                                                             \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc))
#define HM_WG8_S8_ASM(n, acc)                                                                               \
  asm volatile("wgmma.mma_async.sync.aligned.m64n" #n "k32.s32.s8.s8 {" HM_WG_REGS_##n "}, " HM_WG_TAIL_##n \
               ", " acc ";\n"                                                                               \
               : HM_WG8_OPS_##n                                                                             \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc))

#define HM_WG8_CASE(n, ASM) \
  if constexpr (N == n) {   \
    if constexpr (ACC)      \
      ASM(n, "1");          \
    else                    \
      ASM(n, "0");          \
  }

// One m64nNk32 of the warpgroup: d = A * B (ACC false) or d += A * B. The accumulator's
// type picks the instruction; N a multiple of 32, up to 256 (fp8) or 224 (int8).
template <int N, bool ACC>
__device__ __forceinline__ void hm_wgmma8_rs(float (&d)[N / 2], const hm_u32 (&a)[4],
                                             unsigned long long desc) {
  static_assert(N % 32 == 0 && N >= 32 && N <= 256, "fp8 wgmma N must be a multiple of 32 in 32..256");
  HM_WG8_CASE(32, HM_WG8_F8_ASM)
  HM_WG8_CASE(64, HM_WG8_F8_ASM)
  HM_WG8_CASE(96, HM_WG8_F8_ASM)
  HM_WG8_CASE(128, HM_WG8_F8_ASM)
  HM_WG8_CASE(160, HM_WG8_F8_ASM)
  HM_WG8_CASE(192, HM_WG8_F8_ASM)
  HM_WG8_CASE(224, HM_WG8_F8_ASM)
  HM_WG8_CASE(256, HM_WG8_F8_ASM)
}

template <int N, bool ACC>
__device__ __forceinline__ void hm_wgmma8_rs(int (&d)[N / 2], const hm_u32 (&a)[4], unsigned long long desc) {
  static_assert(N % 32 == 0 && N >= 32 && N <= 224, "int8 wgmma N must be a multiple of 32 in 32..224");
  HM_WG8_CASE(32, HM_WG8_S8_ASM)
  HM_WG8_CASE(64, HM_WG8_S8_ASM)
  HM_WG8_CASE(96, HM_WG8_S8_ASM)
  HM_WG8_CASE(128, HM_WG8_S8_ASM)
  HM_WG8_CASE(160, HM_WG8_S8_ASM)
  HM_WG8_CASE(192, HM_WG8_S8_ASM)
  HM_WG8_CASE(224, HM_WG8_S8_ASM)
}

// A and B both through descriptors: the descriptors follow the N/2 accumulators.
#define HM_WG8_SS_TAIL_64 "%32, %33"
#define HM_WG8_SS_TAIL_128 "%64, %65"
#define HM_WG8_SS_TAIL_192 "%96, %97"
#define HM_WG8_SS_F8_ASM(n, acc)                                                           \
  asm volatile("wgmma.mma_async.sync.aligned.m64n" #n "k32.f32.e4m3.e4m3 {" HM_WG_REGS_##n \
               "}, " HM_WG8_SS_TAIL_##n ", " acc ", 1, 1;\n"                              \
               : HM_WG_OPS_##n                                                             \
               : "l"(desc_a), "l"(desc_b))
#define HM_WG8_SS_S8_ASM(n, acc)                                                                               \
  asm volatile("wgmma.mma_async.sync.aligned.m64n" #n "k32.s32.s8.s8 {" HM_WG_REGS_##n "}, " HM_WG8_SS_TAIL_##n \
               ", " acc ";\n"                                                                                  \
               : HM_WG8_OPS_##n                                                                                \
               : "l"(desc_a), "l"(desc_b))

// One m64nNk32 of the warpgroup from two descriptors; N 64, 128 or 192 (the warp-specialized
// kernel's register rule allows no wider).
template <int N, bool ACC>
__device__ __forceinline__ void hm_wgmma8_ss(float (&d)[N / 2], unsigned long long desc_a,
                                             unsigned long long desc_b) {
  static_assert(N % 64 == 0 && N >= 64 && N <= 192, "fp8 wgmma_ss N must be 64, 128 or 192");
  HM_WG8_CASE(64, HM_WG8_SS_F8_ASM)
  HM_WG8_CASE(128, HM_WG8_SS_F8_ASM)
  HM_WG8_CASE(192, HM_WG8_SS_F8_ASM)
}

template <int N, bool ACC>
__device__ __forceinline__ void hm_wgmma8_ss(int (&d)[N / 2], unsigned long long desc_a,
                                             unsigned long long desc_b) {
  static_assert(N % 64 == 0 && N >= 64 && N <= 192, "int8 wgmma_ss N must be 64, 128 or 192");
  HM_WG8_CASE(64, HM_WG8_SS_S8_ASM)
  HM_WG8_CASE(128, HM_WG8_SS_S8_ASM)
  HM_WG8_CASE(192, HM_WG8_SS_S8_ASM)
}

// Descriptor of a K-major tile without swizzle: 8-row x 16-byte core matrices of 128
// contiguous bytes, LBO bytes apart along K and SBO bytes apart along M or N.
template <int LBO, int SBO>
__device__ __forceinline__ unsigned long long hm_wgmma_desc_plain(unsigned smem_addr) {
  static_assert(LBO % 16 == 0 && SBO % 16 == 0, "descriptor offsets count 16 bytes");
  const unsigned long long start = (smem_addr & 0x3ffffu) >> 4;
  return start | ((unsigned long long)(LBO >> 4) << 16) | ((unsigned long long)(SBO >> 4) << 32);
}

#undef HM_WG8_CASE
#undef HM_WG8_F8_ASM
#undef HM_WG8_S8_ASM
#undef HM_WG8_SS_F8_ASM
#undef HM_WG8_SS_S8_ASM
