// SPDX-License-Identifier: Apache-2.0
// Tensor-core MMA through mma.sync (SM80+): m16n8k16 with f16 or bf16 inputs and f32
// accumulators, and ldmatrix to fetch A fragments from shared memory.
// Fragments (g = lane / 4, t = lane % 4):
//   A: a0 (row g, k 2t..2t+1), a1 (row g+8, same k), a2 (row g, k 2t+8..), a3 (row g+8, k 2t+8..)
//   B: b0 (k 2t..2t+1, col g), b1 (k 2t+8..2t+9, col g); lower k in the lower half
//   C: c0,c1 (row g, cols 2t, 2t+1), c2,c3 (row g+8, same cols)
#pragma once

#include "hm_half2.cuh"

// Four 8x8 matrices of 16-bit values; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void hm_ldmatrix_x4(hm_u32 (&r)[4], unsigned smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
}

template <bool BF16>
__device__ __forceinline__ void hm_mma_16816(float (&c)[4], const hm_u32 (&a)[4], hm_u32 b0, hm_u32 b1) {
  if constexpr (BF16)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
