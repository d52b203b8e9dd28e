// SPDX-License-Identifier: Apache-2.0
// The warp-specialized pipeline of the wgmma kernels (sm_90a), whatever a stage holds. A
// warpgroup after the consumers produces: its four warps fill the row maps of each segment
// and copy each stage (bulk copies for what is contiguous in global memory, TMA for token
// tiles of consecutive rows, cp.async for gathered ones); the two (or three) consumer
// warpgroups only wait for full stages, compute, and hand stages back. Nothing but the
// barriers ties the roles, so the producer runs ahead across segments while the consumers
// compute and store.
//
// All four producer warps copy gathered token rows because one warp cannot issue them fast
// enough: at bm 128 x bk 128 bf16 a stage is 2048 16-byte copies, ~20 instructions each
// with its address, so ~1300 dependent instructions on one warp against the ~2800 cycles in
// which the consumers' wgmmas finish the stage at cuBLAS's rate (fp8: half of that). Even
// four warps left the fp8 consumers waiting for full stages in a quarter of Nsight's
// samples; a TMA box a stage does not (docs/PERF.md, 2026-12-04 twelfth session).
//
// Per stage slot a "full" barrier (thread 0's expect_tx arrival, the bulk bytes, one
// cp.async arrival per producer thread) and an "empty" one (an arrival per consumer warp
// once its wgmmas that read the slot are done). Per segment one of two row map sets, with
// the same pair of barriers (an arrival per producer thread, per consumer warp). Both
// sides count stages and segments from the start of the kernel, so slot = count % depth
// and the phase parity is count / depth % 2.
//
// A kernel brings a policy K: its layout (hm_ws_layout), stage_bytes, and
//   load_stage(p, tile, kt, st, full, a_row, pt)  producer thread pt's copies of a stage
//                                                  (pt 0 also issues the bulk copies)
//   mainloop(p, tile, kb, ke, ring, n, a_row, at, acc)  a segment's k-tiles, stages n, n+1, ..
//   store(p, tile, kb, ke, sk, c_stage, maps, at, acc)  the segment's output
#pragma once

#include "gemm_wgmma_kernel.cuh"
#include "hm_mbarrier.cuh"

constexpr int hm_ws_producers = 128;   // the producer warpgroup's threads
constexpr int hm_ws_producer_bar = 2;  // their named barrier (1 is the consumers', hm_wg_sync)

// Shared memory after a ring of PIPE_BYTES: the staged output tile (C_BYTES, its own,
// since the producer fills stages of the next segment while the consumers store), the
// barriers (full and empty per stage, then per map set), two row map sets, flag, prefix.
// A tile too large to sit beside three stages (C_BYTES 0, c_in_ring) is staged in the slot
// of its segment's last stage instead, which the consumers hand back only once it is
// stored: the producer refills the other slots meanwhile, so the next segment starts on
// stages - 1 of them.
// And the registers: the SM's 64K split evenly at launch (384 threads: 168 each, 512: 128),
// then the producer warpgroup keeps PRODUCER_REGS and the consumers share what it gives back
// (two consumer warpgroups: 56 leaves them 224, 80 leaves 208; three: 56 leaves 152).
template <class C, int PIPE_BYTES, int C_BYTES, int PRODUCER_REGS>
struct hm_ws_layout {
  static constexpr bool c_in_ring = C_BYTES == 0;
  static constexpr int consumers = hm_wg_traits<C>::threads;
  static constexpr int consumer_warps = consumers / 32;
  static constexpr int launch_regs = 65536 / (consumers + hm_ws_producers) / 8 * 8;
  static constexpr int producer_regs = PRODUCER_REGS;
  static constexpr int consumer_regs =
      (launch_regs * (consumers + hm_ws_producers) - hm_ws_producers * PRODUCER_REGS) / consumers / 8 * 8;
  static constexpr int c_off = PIPE_BYTES;
  static constexpr int bar_off = c_off + C_BYTES;
  static constexpr int bar_count = 2 * C::stages + 4;
  static constexpr int maps_off = bar_off + bar_count * 8;
  static constexpr int maps_bytes = 3 * C::bm * 4;
  // Two map sets of bm rows take the bytes of one of 2 bm rows.
  static constexpr int smem_bytes = 1024 + maps_off + hm_maps_bytes<C, 2 * C::bm>;

  static_assert(C::ws, "the warp-specialized kernel of a config that asks for it");
  static_assert(consumers == 256 || consumers == 384, "two or three consumer warpgroups");
  static_assert(consumer_regs <= 256, "setmaxnreg gives a thread at most 256 registers");
  static_assert(C_BYTES % 8 == 0, "barriers are 8-byte aligned");
  static_assert(!C::tma_c || PIPE_BYTES % 1024 == 0,
                "a staging tile for tensor stores on the swizzle's repeat");
};

// The stage ring and the barriers of the row map sets, in shared memory.
struct hm_ws_ring {
  unsigned char *stages;
  unsigned long long *full, *empty;            // [stages]
  unsigned long long *maps_full, *maps_empty;  // [2]
};

template <class C, class L>
__device__ __forceinline__ hm_ws_ring hm_ws_ring_at(unsigned char *smem) {
  hm_ws_ring r;
  r.stages = smem;
  r.full = (unsigned long long *)(smem + L::bar_off);
  r.empty = r.full + C::stages;
  r.maps_full = r.empty + C::stages;
  r.maps_empty = r.maps_full + 2;
  return r;
}

// Row map set b; both sets share the flag and prefix after the second.
template <class C, class L>
__device__ __forceinline__ hm_gemm_smem_maps hm_ws_maps(unsigned char *smem, int b) {
  hm_gemm_smem_maps maps = hm_wg_maps_at(smem + L::maps_off + b * L::maps_bytes, C::bm);
  const hm_gemm_smem_maps last = hm_wg_maps_at(smem + L::maps_off + L::maps_bytes, C::bm);
  maps.flag = last.flag;
  maps.prefix = last.prefix;
  return maps;
}

// The stage's token rows (bk * EB bytes each, EB bytes an element; zero past K) into the
// swizzled tile (hm_wg_a_offset). With C::tma_a the tile's rows are consecutive A rows from
// a_row[0] and thread 0 loads them with one TMA box per 128 bytes of k (announced on the
// full barrier before its arrival); rows past the tile's own hold the next rows of A or
// zeros, whose output columns are never stored. Otherwise the producer threads copy each
// 16-byte piece, zero for rows without a token.
template <class C, int EB>
__device__ __forceinline__ void hm_ws_load_rows(const hm_gemm_params &p, int kt, unsigned char *st,
                                                const int *a_row, int pt, unsigned long long *full) {
  if constexpr (C::tma_a) {
    constexpr int boxes = C::bk * EB / 128;
    if (pt != 0) return;
    hm_mbar_expect_tx(full, boxes * C::bm * 128);
#pragma unroll
    for (int j = 0; j < boxes; ++j)
      hm_tma_load_2d(st + j * C::bm * 128, &p.tma_a, kt * C::bk + j * (128 / EB), a_row[0], full);
    return;
  }
  constexpr int per_row = C::bk * EB / 16;
  const unsigned char *a = (const unsigned char *)p.a;
#pragma unroll 4
  for (int i = pt; i < C::bm * per_row; i += hm_ws_producers) {
    const int r = i / per_row, ch = i % per_row;
    const int row = a_row[r];
    const int k = kt * C::bk + ch * (16 / EB);
    const bool ok = row >= 0 && k < C::k;
    hm_cp_async16(st + hm_wg_a_offset<C>(r, ch), ok ? a + ((long long)row * C::k + k) * EB : a, ok);
  }
}

// The producer threads (pt = 0..127): per segment the row maps, then each k-tile's stage
// once its slot is empty. Their cp.async arrivals and pt 0's bulk bytes complete the full
// barrier.
template <class C, class K>
__device__ void hm_ws_produce(const hm_gemm_params &p, int tiles, unsigned char *smem, int pt) {
  using L = typename K::layout;
  const hm_ws_ring ring = hm_ws_ring_at<C, L>(smem);
  unsigned n = 0, seg = 0;
  hm_walk_segments<C, hm_wg_traits<C>>(p, tiles, hm_ws_maps<C, L>(smem, 0).prefix,
                [&](const hm_tile &tile, int kb, int ke, const hm_sk_piece &) {
                  const int b = seg & 1;
                  const hm_gemm_smem_maps maps = hm_ws_maps<C, L>(smem, b);
                  hm_mbar_wait(&ring.maps_empty[b], ((seg >> 1) & 1) ^ 1);
                  for (int r = pt; r < C::bm; r += hm_ws_producers)
                    hm_tile_row<C>(p, tile, r, maps.a_row, maps.c_row, maps.row_scale);
                  hm_mbar_arrive(&ring.maps_full[b]);
                  hm_named_sync(hm_ws_producer_bar, hm_ws_producers);  // each thread copies all rows
                  for (int kt = kb; kt < ke; ++kt, ++n) {
                    const int slot = n % C::stages;
                    unsigned char *st = ring.stages + slot * K::stage_bytes;
                    hm_mbar_wait(&ring.empty[slot], ((n / C::stages) & 1) ^ 1);
                    K::load_stage(p, tile, kt, st, &ring.full[slot], maps.a_row, pt);
                    hm_cp_async_arrive(&ring.full[slot]);
                  }
                  ++seg;
                });
  // Exits only once every slot is handed back: the arrivals its cp.async copies owe the
  // full barriers are this thread's, and must not be left behind by an exited thread.
  for (int s = 0; s < C::stages; ++s, ++n)
    hm_mbar_wait(&ring.empty[n % C::stages], ((n / C::stages) & 1) ^ 1);
}

// Waits for stage n and returns its slot's bytes. Tokens copied by cp.async are generic-proxy
// writes, which wgmma reads through the async proxy only after a proxy fence; TMA and bulk
// copies write through the async proxy and need none.
template <class C, int STAGE_BYTES>
__device__ __forceinline__ const unsigned char *hm_ws_acquire(const hm_ws_ring &ring, unsigned n) {
  hm_mbar_wait(&ring.full[n % C::stages], (n / C::stages) & 1);
  if constexpr (!C::tma_a) hm_fence_proxy_async();
  return ring.stages + (n % C::stages) * STAGE_BYTES;
}

// One arrival for this warp (where ready), once all its lanes are here. Branch-free, so
// that it may run between wgmmas in flight.
__device__ __forceinline__ void hm_ws_warp_arrive(unsigned long long *bar, bool ready = true) {
  __syncwarp();
  hm_mbar_arrive_elected_if(bar, ready);
}

// Hands stage n's slot back (where ready) once this warp's wgmmas that read it are
// waited for.
template <class C>
__device__ __forceinline__ void hm_ws_release(const hm_ws_ring &ring, unsigned n, bool ready = true) {
  hm_ws_warp_arrive(&ring.empty[n % C::stages], ready);
}

// The consumer warpgroups: per segment wait for its row maps, accumulate, store (or
// publish the Stream-K partial), then hand the map set back, a warp at a time. Nothing here
// synchronizes the consumers: a store does so before it stages a tile, with all of them or
// with its own warpgroup where that stores its rows alone (gemm_w8a8_ws.cuh). Traced, thread
// 0 splits each segment into fill (to its first full stage, which it then waits for here),
// loop and tail (the store).
template <class C, class K>
__device__ void hm_ws_consume(const hm_gemm_params &p, int tiles, unsigned char *smem, hm_trace_clock &tr) {
  using L = typename K::layout;
  const hm_ws_ring ring = hm_ws_ring_at<C, L>(smem);
  const hm_wg_place at = hm_wg_place_of<C>(threadIdx.x);
  hm_wg_acc_t<C> acc;
  unsigned n = 0, seg = 0;
  hm_walk_segments<C, hm_wg_traits<C>>(p, tiles, hm_ws_maps<C, L>(smem, 0).prefix,
                [&](const hm_tile &tile, int kb, int ke, const hm_sk_piece &sk) {
                  const int b = seg & 1;
                  const hm_gemm_smem_maps maps = hm_ws_maps<C, L>(smem, b);
                  tr.begin();
                  hm_mbar_wait(&ring.maps_full[b], (seg >> 1) & 1);
                  tr.once(HM_TRACE_MAPS);
                  if (hm_traced && ke > kb) {
                    hm_ws_acquire<C, K::stage_bytes>(ring, n);
                    tr.arrived(0);
                  }
                  K::mainloop(p, tile, kb, ke, ring, n, maps.a_row, at, acc);
                  tr.looped();
                  tr.once(HM_TRACE_FIRST_LOOP_END);
                  tr.count(HM_TRACE_SEGMENTS, 1);
                  tr.count(HM_TRACE_ITERS, ke - kb);
                  tr.begin();
                  unsigned char *c_stage =
                      L::c_in_ring ? ring.stages + (n - 1) % C::stages * K::stage_bytes : smem + L::c_off;
                  K::store(p, tile, kb, ke, sk, c_stage, maps, at, acc);
                  if constexpr (L::c_in_ring) {
                    hm_bulk_wait_read();     // the tile's tensor stores have read the slot
                    hm_fence_proxy_async();  // the tile's st.shared before the producer's copies into the slot
                    hm_ws_release<C>(ring, n - 1);
                  }
                  hm_ws_warp_arrive(&ring.maps_empty[b]);
                  tr.add(HM_TRACE_TAIL);
                  tr.once(HM_TRACE_FIRST_END);
                  ++seg;
                });
  hm_bulk_wait_read();  // the CTA's shared memory outlives the reads of its last bulk stores
  tr.finish();
}

template <class C, class K>
__device__ __forceinline__ void hm_ws_run(const hm_gemm_params &p, hm_trace_clock &tr) {
  using L = typename K::layout;
  constexpr int ring_bytes = C::stages * K::stage_bytes;
  extern __shared__ __align__(1024) unsigned char hm_ws_smem[];
  unsigned char *smem = hm_wg_smem_base(hm_ws_smem);
  const hm_ws_ring ring = hm_ws_ring_at<C, L>(smem);
  // The last k-tile copies only the weights inside K; the rest of its slot is whatever the
  // slot held, times zero tokens. Zeroed once, a slot only ever holds real (finite) data,
  // so that product is 0, not NaN.
  if constexpr (C::k % C::bk != 0) {
    for (int i = threadIdx.x; i < ring_bytes / 16; i += blockDim.x)
      ((uint4 *)smem)[i] = make_uint4(0, 0, 0, 0);
    hm_fence_proxy_async();
  }
  if (threadIdx.x == 0) {
    for (int s = 0; s < C::stages; ++s) {
      hm_mbar_init(&ring.full[s], hm_ws_producers + 1);
      hm_mbar_init(&ring.empty[s], L::consumer_warps);
    }
    for (int b = 0; b < 2; ++b) {
      hm_mbar_init(&ring.maps_full[b], hm_ws_producers);
      hm_mbar_init(&ring.maps_empty[b], L::consumer_warps);
    }
    hm_mbar_init_fence();
  }
  __syncthreads();
  const int tiles = hm_count_m_tiles<C>(p, hm_ws_maps<C, L>(smem, 0).prefix) * hm_wg_traits<C>::n_tiles;
  if (threadIdx.x >= hm_wg_traits<C>::threads) {
    hm_setmaxnreg_dec<L::producer_regs>();
    hm_ws_produce<C, K>(p, tiles, smem, threadIdx.x - hm_wg_traits<C>::threads);
    return;
  }
  hm_setmaxnreg_inc<L::consumer_regs>();
  hm_ws_consume<C, K>(p, tiles, smem, tr);
}
