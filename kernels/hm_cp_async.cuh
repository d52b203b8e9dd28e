// SPDX-License-Identifier: Apache-2.0
// Asynchronous global -> shared copies (SM80 cp.async), the data movement of the
// multi-stage pipelines. A predicated-off copy writes zeros, which is how tiles are
// padded past the edges of A and B.
#pragma once

__device__ __forceinline__ unsigned hm_smem_addr(const void *p) {
  return (unsigned)__cvta_generic_to_shared(p);
}

// 16 bytes, bypassing L1 (.cg): every byte is read once per CTA. smem: a shared address.
__device__ __forceinline__ void hm_cp_async16(unsigned smem, const void *gmem, bool valid) {
  int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void hm_cp_async16(void *smem, const void *gmem, bool valid) {
  hm_cp_async16(hm_smem_addr(smem), gmem, valid);
}

__device__ __forceinline__ void hm_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void hm_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Issues a pipeline's first stages [S0, S1) of the count k-tiles it runs, load(s) for each
// and a commit group each, empty past count, so that the mainloop's wait for all but its
// newest groups finds each stage's copies done whatever the segment's length.
template <int S0, int S1, class Load>
__device__ __forceinline__ void hm_cp_async_fill(int count, Load &&load) {
#pragma unroll
  for (int s = S0; s < S1; ++s) {
    if (s < count) load(s);
    hm_cp_async_commit();
  }
}
