// SPDX-License-Identifier: Apache-2.0
// Programmatic dependent launch (sm_90). A kernel triggers as soon as it starts, so that a
// kernel launched after it with the attribute (jit_launch.c, the GEMMs) may be scheduled
// onto the SMs its CTAs leave, instead of after the whole grid and a launch round trip.
// Triggering early is always safe: the dependent's wait still returns only once this
// grid has finished and its writes are visible. Both are no-ops below sm_90 and when the
// launch did not ask for programmatic serialization.
#pragma once

__device__ __forceinline__ void hm_pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Blocks until the previous grid on the stream has finished and flushed its writes.
__device__ __forceinline__ void hm_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
