// SPDX-License-Identifier: Apache-2.0
// Shared-memory barriers (mbarrier, sm_90) and what warp-specialized pipelines need around
// them: bulk copies that complete onto a barrier, cp.async completion as an arrival, named
// barriers for a subset of the CTA's warps, and register reallocation between warpgroups.
// A barrier completes a phase when its pending arrivals reach zero and every byte announced
// with expect_tx has landed; waiters name the phase by its parity.
#pragma once

#include "hm_cp_async.cuh"

__device__ __forceinline__ void hm_mbar_init(unsigned long long *bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(hm_smem_addr(bar)), "r"(arrivals)
               : "memory");
}

// Makes initialized barriers visible to the other threads and to the async proxy (bulk
// copies complete onto them); a CTA barrier must follow before anyone uses them.
__device__ __forceinline__ void hm_mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival; release semantics, so this thread's earlier shared-memory writes are
// visible to whoever waits out the phase.
__device__ __forceinline__ void hm_mbar_arrive(unsigned long long *bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(hm_smem_addr(bar)) : "memory");
}

// An arrival where pred holds, by a predicated instruction rather than a branch: it may
// sit between wgmmas in flight, which ptxas serializes across divergent control flow.
__device__ __forceinline__ void hm_mbar_arrive_if(unsigned long long *bar, bool pred) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.u32 p, %1, 0;\n"
      "@p mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n"
      "}\n" ::"r"(hm_smem_addr(bar)),
      "r"((unsigned)pred)
      : "memory");
}

// One arrival for the whole (converged) warp, by the lane elect.sync picks, where pred
// holds. Predicated like hm_mbar_arrive_if, and without the lane index: kept as a
// register, ptxas re-reads it (S2R) between the fp8 kernel's wgmma issues each k-block,
// and the issue behind it waited on that read in 2.6 % of Nsight's samples.
__device__ __forceinline__ void hm_mbar_arrive_elected_if(unsigned long long *bar, bool pred) {
  asm volatile(
      "{\n"
      ".reg .pred e, p;\n"
      "elect.sync _|e, 0xffffffff;\n"
      "setp.ne.and.u32 p, %1, 0, e;\n"
      "@p mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n"
      "}\n" ::"r"(hm_smem_addr(bar)),
      "r"((unsigned)pred)
      : "memory");
}

// One arrival that also announces bytes the phase must wait for (bulk copies).
__device__ __forceinline__ void hm_mbar_arrive_expect_tx(unsigned long long *bar, unsigned bytes) {
  asm volatile(
      "mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(hm_smem_addr(bar)),
      "r"(bytes)
      : "memory");
}

// Waits until the phase of the given parity has completed (acquire). A fresh barrier is in
// phase 0, so waiting for parity 1 returns at once: the "previous" phase counts as done.
__device__ __forceinline__ void hm_mbar_wait(unsigned long long *bar, unsigned parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "HM_MBAR_WAIT:\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra HM_MBAR_WAIT;\n"
      "}\n" ::"r"(hm_smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// An arrival once all of this thread's earlier cp.async copies have landed. noinc: the
// arrival is one of those the barrier was initialized to expect.
__device__ __forceinline__ void hm_cp_async_arrive(unsigned long long *bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(hm_smem_addr(bar)) : "memory");
}

// bytes (a multiple of 16, both addresses 16-byte aligned) from global to shared memory
// through the copy engine; they count against the barrier's announced bytes.
__device__ __forceinline__ void hm_bulk_copy(void *smem, const void *gmem, unsigned bytes,
                                             unsigned long long *bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          hm_smem_addr(smem)),
      "l"(gmem), "r"(bytes), "r"(hm_smem_addr(bar))
      : "memory");
}

// bytes (a multiple of 16, both addresses 16-byte aligned) from shared to global memory
// through the copy engine, in this thread's next bulk group (hm_bulk_commit).
__device__ __forceinline__ void hm_bulk_store(void *gmem, const void *smem, unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(gmem),
               "r"(hm_smem_addr(smem)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void hm_bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Waits until every bulk store this thread committed has read its shared memory (the
// global writes may still be on their way).
__device__ __forceinline__ void hm_bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

// Bytes the barrier's current phase must also wait for, without an arrival: the caller's
// own arrival, still to come, keeps the phase open until they are announced.
__device__ __forceinline__ void hm_mbar_expect_tx(unsigned long long *bar, unsigned bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(hm_smem_addr(bar)), "r"(bytes)
               : "memory");
}

// A box of a 2-D tensor map (a kernel parameter's address: __grid_constant__) at element
// coordinates (x, y) into shared memory, completing onto bar like a bulk copy.
__device__ __forceinline__ void hm_tma_load_2d(void *smem, const void *map, int x, int y,
                                               unsigned long long *bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];\n" ::"r"(hm_smem_addr(smem)),
      "l"(map), "r"(x), "r"(y), "r"(hm_smem_addr(bar))
      : "memory");
}

// A box of shared memory out to a 2-D tensor map at element coordinates (x, y), in this
// thread's next bulk group (hm_bulk_commit); elements past the tensor's ends are not
// written.
__device__ __forceinline__ void hm_tma_store_2d(const void *map, int x, int y, const void *smem) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(map),
               "r"(x), "r"(y), "r"(hm_smem_addr(smem))
               : "memory");
}

// Barrier `id` (1..15; 0 is __syncthreads) over `threads` threads, a multiple of 32.
__device__ __forceinline__ void hm_named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// The warpgroup gives registers back to the CTA's pool, or takes them from it; all its
// threads execute it. N a multiple of 8 in 24..256.
template <int N>
__device__ __forceinline__ void hm_setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void hm_setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
