// SPDX-License-Identifier: Apache-2.0
// Per-CTA timeline of the persistent mma.sync GEMM (hm_gemm_run) and of the warp-specialized
// wgmma ones (hm_ws_run, as consumer thread 0 sees it), built in only when the generator
// defines HM_TRACE (HUMMING_TRACE=1): a launch's CTAs each write one row of
// hm_trace, which the host reads back from the module (hm_kernel_read_global) after the
// run. Stamps are SM clocks since the CTA's entry, with the global timer at entry and
// exit to place CTAs against each other and to convert clocks to time. Every slot is
// written by every launch, so a row always holds the last launch's CTA.
#pragma once

#include "hm_trace_slots.cuh"

#ifdef HM_TRACE
// For the steps a kernel takes only to be timed (the warp-specialized consumers' wait for
// a segment's first stage, gemm_ws_pipe.cuh).
constexpr bool hm_traced = true;

// Defined (the braces make it a definition) in every traced kernel's own module.
extern "C" {
__device__ unsigned long long hm_trace[HM_TRACE_CTAS * HM_TRACE_SLOTS];
}

// Deltas in 32-bit clocks (they wrap after seconds) keep the row in 16 registers.
struct hm_trace_clock {
  unsigned t0;    // clock at entry
  unsigned mark;  // start of the phase being summed
  unsigned stall_mark;  // before the current mainloop iteration's wait for its stage
  unsigned row[HM_TRACE_SLOTS];
  unsigned long long gt_entry;

  __device__ __forceinline__ static unsigned clock() {
    unsigned c;
    asm volatile("mov.u32 %0, %%clock;" : "=r"(c)::"memory");
    return c;
  }
  __device__ __forceinline__ static unsigned long long globaltimer() {
    unsigned long long g;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g)::"memory");
    return g;
  }
  __device__ __forceinline__ void start() {
#pragma unroll
    for (int i = 0; i < HM_TRACE_SLOTS; ++i) row[i] = 0;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(row[HM_TRACE_SM]));
    gt_entry = globaltimer();
    t0 = clock();
  }
  // The first time an event happens in this launch.
  __device__ __forceinline__ void once(int slot) {
    if (row[slot] == 0) row[slot] = clock() - t0 + 1;
  }
  __device__ __forceinline__ void begin() {
    mark = clock();
  }
  __device__ __forceinline__ void add(int slot) {
    row[slot] += clock() - mark;
  }
  __device__ __forceinline__ void count(int slot, int n) {
    row[slot] += (unsigned)n;
  }
  // Before mainloop iteration i waits for its stage.
  __device__ __forceinline__ void awaiting() {
    stall_mark = clock();
  }
  // Mainloop iteration i has its stage: the first one ends the segment's fill; a later
  // one's wait tells a loop that waits for memory from one that keeps up with it.
  __device__ __forceinline__ void arrived(int i) {
    if (i != 0) {
      row[HM_TRACE_STALL] += clock() - stall_mark;
      return;
    }
    add(HM_TRACE_FILL);
    once(HM_TRACE_FIRST_STAGE);
    begin();
  }
  __device__ __forceinline__ void looped() {
    add(HM_TRACE_LOOP);
  }
  __device__ __forceinline__ void finish() {
    row[HM_TRACE_EXIT] = clock() - t0 + 1;
    const unsigned long long gt_exit = globaltimer();
    if (threadIdx.x != 0 || blockIdx.x >= HM_TRACE_CTAS) return;
    unsigned long long *out = hm_trace + blockIdx.x * HM_TRACE_SLOTS;
#pragma unroll
    for (int i = 0; i < HM_TRACE_SLOTS; ++i) out[i] = row[i];
    out[HM_TRACE_GT_ENTRY] = gt_entry;
    out[HM_TRACE_GT_EXIT] = gt_exit;
  }
};
#else
constexpr bool hm_traced = false;

// Without HM_TRACE every call compiles to nothing.
struct hm_trace_clock {
  __device__ __forceinline__ void start() {}
  __device__ __forceinline__ void once(int) {}
  __device__ __forceinline__ void begin() {}
  __device__ __forceinline__ void add(int) {}
  __device__ __forceinline__ void count(int, int) {}
  __device__ __forceinline__ void awaiting() {}
  __device__ __forceinline__ void arrived(int) {}
  __device__ __forceinline__ void looped() {}
  __device__ __forceinline__ void finish() {}
};
#endif
