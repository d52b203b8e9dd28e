// SPDX-License-Identifier: Apache-2.0
// Warpgroup MMA (sm_90a): wgmma.mma_async m64nNk16 with A from registers, B from shared
// memory through a matrix descriptor, f32 accumulators. Fragments (warp w of the
// warpgroup, g = lane / 4, t = lane % 4), as in the PTX ISA's m64nNk16 figures:
//   A: four f16x2/bf16x2 registers: rows 16w+g (a[0], a[2]) and 16w+g+8 (a[1], a[3]),
//      k 2t..2t+1 (a[0], a[1]) and 2t+8..2t+9 (a[2], a[3]); lower k in the lower half
//   D: d[i] at row 16w + g + 8*((i>>1)&1), column 8*(i>>2) + 2t + (i&1), N/2 floats
#pragma once

#include "hm_half2.cuh"

// Orders this thread's earlier register writes (A fragments, accumulators) before the
// warpgroup's next wgmma.mma_async.
__device__ __forceinline__ void hm_wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void hm_wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most N committed wgmma groups of this warpgroup are still running.
template <int N>
__device__ __forceinline__ void hm_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Makes this thread's generic-proxy writes to shared memory (cp.async, st.shared)
// visible to the async proxy through which wgmma reads its B operand.
__device__ __forceinline__ void hm_fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Pins accumulators in place around the wgmma pipeline: without it the compiler may
// move their initialization or reads between wgmmas, and ptxas then serializes them.
template <int R>
__device__ __forceinline__ void hm_wgmma_fence_operands(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Keeps A fragments live until the wait that retires their wgmmas, which read them
// asynchronously until then: the compiler sees them dead at the wgmma and could hand
// their registers to the copies issued between wgmmas.
template <int R>
__device__ __forceinline__ void hm_wgmma_fence_operands(hm_u32 (&a)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+r"(a[i])::"memory");
}

// Descriptor of a K-major operand tile with 128-byte swizzle: rows of 64 16-bit
// elements (128 bytes) one after another, 16-byte chunk c of row r stored at chunk
// c ^ (r % 8), groups of 8 rows 1024 bytes apart, the tile 1024-byte aligned. The
// leading byte offset is unused by this layout and set to 1 (16 bytes) by convention.
__device__ __forceinline__ unsigned long long hm_wgmma_desc_k128(unsigned smem_addr) {
  const unsigned long long start = (smem_addr & 0x3ffffu) >> 4;
  return start | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}

// Operand lists of the accumulators, 16 at a time; the register numbers in the text
// follow the same order, and the A registers and the descriptor come after them.
#define HM_WG_D16(b)                                                                                    \
  "+f"(d[b + 0]), "+f"(d[b + 1]), "+f"(d[b + 2]), "+f"(d[b + 3]), "+f"(d[b + 4]), "+f"(d[b + 5]),       \
      "+f"(d[b + 6]), "+f"(d[b + 7]), "+f"(d[b + 8]), "+f"(d[b + 9]), "+f"(d[b + 10]), "+f"(d[b + 11]), \
      "+f"(d[b + 12]), "+f"(d[b + 13]), "+f"(d[b + 14]), "+f"(d[b + 15])
#define HM_WG_R0 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define HM_WG_R1 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define HM_WG_R2 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define HM_WG_R3 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define HM_WG_R4 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define HM_WG_R5 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define HM_WG_R6 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
#define HM_WG_R7 \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

#define HM_WG_REGS_32 HM_WG_R0
#define HM_WG_REGS_64 HM_WG_REGS_32 ", " HM_WG_R1
#define HM_WG_REGS_96 HM_WG_REGS_64 ", " HM_WG_R2
#define HM_WG_REGS_128 HM_WG_REGS_96 ", " HM_WG_R3
#define HM_WG_REGS_160 HM_WG_REGS_128 ", " HM_WG_R4
#define HM_WG_REGS_192 HM_WG_REGS_160 ", " HM_WG_R5
#define HM_WG_REGS_224 HM_WG_REGS_192 ", " HM_WG_R6
#define HM_WG_REGS_256 HM_WG_REGS_224 ", " HM_WG_R7

#define HM_WG_OPS_32 HM_WG_D16(0)
#define HM_WG_OPS_64 HM_WG_OPS_32, HM_WG_D16(16)
#define HM_WG_OPS_96 HM_WG_OPS_64, HM_WG_D16(32)
#define HM_WG_OPS_128 HM_WG_OPS_96, HM_WG_D16(48)
#define HM_WG_OPS_160 HM_WG_OPS_128, HM_WG_D16(64)
#define HM_WG_OPS_192 HM_WG_OPS_160, HM_WG_D16(80)
#define HM_WG_OPS_224 HM_WG_OPS_192, HM_WG_D16(96)
#define HM_WG_OPS_256 HM_WG_OPS_224, HM_WG_D16(112)

#define HM_WG_TAIL_32 "{%16, %17, %18, %19}, %20"
#define HM_WG_TAIL_64 "{%32, %33, %34, %35}, %36"
#define HM_WG_TAIL_96 "{%48, %49, %50, %51}, %52"
#define HM_WG_TAIL_128 "{%64, %65, %66, %67}, %68"
#define HM_WG_TAIL_160 "{%80, %81, %82, %83}, %84"
#define HM_WG_TAIL_192 "{%96, %97, %98, %99}, %100"
#define HM_WG_TAIL_224 "{%112, %113, %114, %115}, %116"
#define HM_WG_TAIL_256 "{%128, %129, %130, %131}, %132"

// d += A * B, scale-d 1, A and B unscaled, B not transposed (K-major).
#define HM_WG_ASM(n, type)                                                                         \
  asm volatile("wgmma.mma_async.sync.aligned.m64n" #n "k16.f32." type "." type " {" HM_WG_REGS_##n \
               "}, " HM_WG_TAIL_##n ", 1, 1, 1, 0;\n"                                              \
               : HM_WG_OPS_##n                                                                     \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc))

#define HM_WG_CASE(n)       \
  if constexpr (N == n) {   \
    if constexpr (BF16)     \
      HM_WG_ASM(n, "bf16"); \
    else                    \
      HM_WG_ASM(n, "f16");  \
  }

// One m64nNk16 MMA of the warpgroup; N a multiple of 32 up to 256.
template <int N, bool BF16>
__device__ __forceinline__ void hm_wgmma_rs(float (&d)[N / 2], const hm_u32 (&a)[4],
                                            unsigned long long desc) {
  static_assert(N % 32 == 0 && N >= 32 && N <= 256, "wgmma N must be a multiple of 32 in 32..256");
  HM_WG_CASE(32)
  HM_WG_CASE(64)
  HM_WG_CASE(96)
  HM_WG_CASE(128)
  HM_WG_CASE(160)
  HM_WG_CASE(192)
  HM_WG_CASE(224)
  HM_WG_CASE(256)
}

#undef HM_WG_CASE
#undef HM_WG_ASM
