// SPDX-License-Identifier: Apache-2.0
// L2 prefetch of a tile segment's first k-tiles: one bulk prefetch (sm_90) per weight unit
// column and per scale or zero-point row, issued by as many threads. A decode GEMM's CTA
// otherwise starts each segment with a pipeline fill that waits out a DRAM round trip
// after its row maps' own (traced on the H200, MoE down M = 1: 5 us of fills a CTA over
// three segments); warmed ahead, the fill reads L2. Bulk prefetches go through the copy
// engine, not the load queue, so they do not delay the loads issued after them.
#pragma once

#include "gemm_params.cuh"
#include "gemm_sched.cuh"

__device__ __forceinline__ void hm_prefetch_l2(const void *src, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
#endif
}

// k-tiles [kb, kb + count) of tile (expert e, column tile n_tile), at most `stages` of them.
// T: the kernel's traits (unit layout (E, N/64, k16, unit_bytes)); T::group_scales: the
// weight-only kernels' scale and zero-point rows ((E, groups, N/64) x 128 and 64 bytes).
template <class C, class T>
__device__ __forceinline__ void hm_prefetch_k_tiles(const hm_gemm_params &p, int e, int n_tile, int kb,
                                                    int count) {
  const int n = count < C::stages ? count : C::stages;
  const int u0 = n_tile * T::bn_units;
  const int units = T::n_units - u0 < T::bn_units ? T::n_units - u0 : T::bn_units;
  const int tid = threadIdx.x;
  if (tid < units) {
    const int k0 = kb * T::steps, k1 = (kb + n) * T::steps < T::k16 ? (kb + n) * T::steps : T::k16;
    const long long unit = (long long)e * T::n_units + u0 + tid;
    hm_prefetch_l2((const unsigned char *)p.b + (unit * T::k16 + k0) * T::unit_bytes,
                   (unsigned)((k1 - k0) * T::unit_bytes));
    return;
  }
  if constexpr (T::group_scales) {
    const int g0 = C::group == 0 ? 0 : kb * C::bk / C::group;
    const int g1 = C::group == 0 ? 1 : ((kb + n) * C::bk + C::group - 1) / C::group;
    const int rows = (g1 < T::groups ? g1 : T::groups) - g0;
    const int r = tid - T::bn_units;
    if (r >= 2 * rows || (r >= rows && T::z_bytes == 0)) return;
    const bool zero = r >= rows;
    const long long row = (long long)e * T::groups + g0 + (zero ? r - rows : r);
    const int bytes = zero ? 64 : 128;
    const void *src = zero ? (const void *)(p.zeros + (row * T::n_units + u0) * 64)
                           : (const void *)((const unsigned char *)p.scales + (row * T::n_units + u0) * 128);
    hm_prefetch_l2(src, (unsigned)(units * bytes));
  }
}
