// SPDX-License-Identifier: Apache-2.0
// Programmatic dependent launch (sm_90). A GEMM built for sm_90 is flagged for it in its
// launch metadata (gemm_gen.c), so it may start while the kernel before it on the stream
// still drains. It first lets the kernel after it do the same, then waits for the previous
// grid to finish and flush: everything it reads may be that grid's output.
//
// A dense decode tile (T::fill_before_wait) waits later, in hm_gemm_run: its tiles follow
// from the launch alone and its weights are no kernel's output, so it lays out its first
// segment and copies that segment's first weight stages into shared memory while the
// previous grid's last CTAs finish (traced 3.6 us, ninth session, with DRAM under-used),
// and after the wait only the activations' copies (from L2) stand between it and its
// first MMA.
#pragma once

#include "gemm_trace.cuh"

__device__ __forceinline__ void hm_pdl_wait(hm_trace_clock &tr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  tr.once(HM_TRACE_WAITED);
}

// Starts the CTA's trace (gemm_trace.cuh), so that it shows the wait too.
template <class T>
__device__ __forceinline__ void hm_pdl_enter(hm_trace_clock &tr) {
  tr.start();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
  if constexpr (!T::fill_before_wait) hm_pdl_wait(tr);
}
