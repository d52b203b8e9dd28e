// SPDX-License-Identifier: Apache-2.0
// The warp-specialized weight-only wgmma GEMM (sm_90a): the dequant and wgmmas of
// gemm_wgmma_mainloop.cuh on the pipeline of gemm_ws_pipe.cuh. A stage holds the token
// rows (TMA or cp.async into the 128-byte swizzle) and the weight units, scales and zero points
// of the tile's unit columns. transform_weights.cuh orders units (E, N/64, K/16) and
// scales and zero points (E, G, N/64, 64), so a stage's units of one unit column, and its
// scales (or zero points) of one group, are each one contiguous run: one bulk copy each.
//
// The output tile is staged in the output type (hm_wgws_c_out), beside the ring: in f32,
// bm 128 x bn 256 takes 129 KiB and leaves room for one stage of bk 128 (49 KiB) or three
// of bk 64; in bf16 (64 KiB) three of bk 128 or six of bk 64 fit. Staging in ring slots
// instead would hold the producer back until the consumers have stored the tile: a
// bubble of a ring refill at every tile.
#pragma once

#include "gemm_ws_pipe.cuh"
#include "gemm_ws_store.cuh"

// The row pitch of the staging tile without tensor stores: an odd number of words keeps a
// warp's 4-byte writes (8 tokens x 4 column pairs) conflict-free. The swizzled tile of the
// tensor stores takes them 4-way (each lane's 4 bytes at the same word of a 16-byte chunk;
// a chunk's 8 columns lie in four warps, so no shuffle gathers them), and still the tail
// is shorter without the copy loop (dense M = 4096: 7.0 → 5.6 us a segment, H100,
// forty-second session).
template <class C>
constexpr int hm_wgws_c_pitch = C::bn * 2 + 4;

// The output tile staged in the output type (hm_ws_store_staged).
template <class C>
struct hm_wgws_c_out {
  using O = hm_ws_out<C, hm_wgws_c_pitch<C>>;
  static constexpr int bytes = O::bytes;
  __device__ static __forceinline__ void store(const hm_gemm_params &p, const hm_tile &tile,
                                               unsigned char *smem, const int *c_row, const float *row_scale,
                                               int wm, int wn, int wq, int, const hm_wg_acc_t<C> &acc) {
    const int lane = hm_lane_now();
    hm_ws_store_staged<C, O>(p, tile, smem, c_row, wm,
                             [&] { hm_wg_stage_out<C, O>(p, tile, smem, row_scale, wm, wn, wq, lane, acc); });
  }
};

// The stage's weight units, scales and zero points (producer thread 0), announced on the full
// barrier first. Unit columns past N, k16 steps past K and groups past the last are not
// copied; see hm_ws_run for the K tail.
template <class C>
__device__ __forceinline__ void hm_wgws_load_weights(const hm_gemm_params &p, const hm_tile &tile, int kt,
                                                     unsigned char *st, unsigned long long *full) {
  using T = hm_wg_traits<C>;
  const int left_k = T::k16 - kt * T::steps, left_n = T::n_units - tile.n_tile * T::bn_units;
  const int units = left_k < T::steps ? left_k : T::steps;
  const int cols = left_n < T::bn_units ? left_n : T::bn_units;
  const int g0 = C::group == 0 ? 0 : kt * C::bk / C::group;
  const int groups = !T::quant ? 0 : (T::groups - g0 < T::stage_groups ? T::groups - g0 : T::stage_groups);
  constexpr int group_bytes = 128 + (T::z_bytes > 0 ? 64 : 0);  // scales and zero points of a unit column
  const unsigned run_bytes = (unsigned)(units * T::unit_bytes);
  hm_mbar_arrive_expect_tx(full, (unsigned)cols * (run_bytes + (unsigned)(groups * group_bytes)));
  const unsigned char *b = (const unsigned char *)p.b;
  const long long unit0 = (long long)tile.e * T::n_units + tile.n_tile * T::bn_units;
  for (int c = 0; c < cols; ++c)
    hm_bulk_copy(st + T::b_off + c * T::steps * T::unit_bytes,
                 b + ((unit0 + c) * T::k16 + kt * T::steps) * T::unit_bytes, run_bytes, full);
  for (int gi = 0; gi < groups; ++gi) {
    const long long first =
        ((long long)tile.e * T::groups + g0 + gi) * T::n_units + tile.n_tile * T::bn_units;
    hm_bulk_copy(st + T::s_off + gi * T::bn_units * 128, (const unsigned char *)p.scales + first * 128,
                 (unsigned)cols * 128, full);
    if constexpr (T::z_bytes > 0)
      hm_bulk_copy(st + T::z_off + gi * T::bn_units * 64, p.zeros + first * 64, (unsigned)cols * 64, full);
  }
}

// Accumulates k-tiles [kb, ke) into acc (zeroed first), stages n, n+1, ...; a stage's
// slot goes back as soon as the next stage's second step has waited out its wgmmas, the
// last one's here unless the output tile is staged in it (RELEASE_LAST false).
template <class C, bool RELEASE_LAST>
__device__ __forceinline__ void hm_wgws_mainloop(int kb, int ke, const hm_ws_ring &ring, unsigned &n,
                                                 const hm_wg_place &at, hm_wg_acc_t<C> &acc) {
  using T = hm_wg_traits<C>;
  hm_wg_acc_zero<C>(acc);
  hm_wg_frags_t<C> af;
  for (int kt = kb; kt < ke; ++kt, ++n) {
    const unsigned char *st = hm_ws_acquire<C, T::stage_bytes>(ring, n);
    hm_wg_compute_stage<C>(st, at.wm, at.wn, at.src, af, acc,
                           [&] { hm_ws_release<C>(ring, n - 1, kt > kb); }, [](int) {});
  }
  hm_wgmma_wait<0>();
#pragma unroll
  for (int m = 0; m < T::mb; ++m) hm_wgmma_fence_operands(acc[m]);
  if constexpr (RELEASE_LAST) hm_ws_release<C>(ring, n - 1);
}

// The weight-only stage on the warp-specialized pipeline (the policy of gemm_ws_pipe.cuh).
template <class C>
struct hm_wgws_traits : hm_wg_traits<C> {
  using G = hm_wg_traits<C>;
  // The producer's copies spill at 72 registers (grouped layouts, bm 64), a consumer (128
  // accumulators, A fragments, scales) at 208 does not (ptxas 13.0). C::c_in_ring comes
  // from the host (hm_gemm_ws_c_in_ring), which knows the SM's shared memory.
  using layout = hm_ws_layout<C, G::pipe_bytes, C::c_in_ring ? 0 : hm_wgws_c_out<C>::bytes, 80>;
  static_assert(!C::c_in_ring || G::stage_bytes >= hm_wgws_c_out<C>::bytes, "a stage slot holds the tile");
  static constexpr int smem_bytes = layout::smem_bytes;

  __device__ static __forceinline__ void load_stage(const hm_gemm_params &p, const hm_tile &tile, int kt,
                                                    unsigned char *st, unsigned long long *full,
                                                    const int *a_row, int pt) {
    hm_ws_load_rows<C, 2>(p, kt, st, a_row, pt, full);
    if (pt == 0) hm_wgws_load_weights<C>(p, tile, kt, st, full);
  }
  __device__ static __forceinline__ void mainloop(const hm_gemm_params &p, const hm_tile &tile, int kb,
                                                  int ke, const hm_ws_ring &ring, unsigned &n,
                                                  const int *a_row, const hm_wg_place &at,
                                                  hm_wg_acc_t<C> &acc) {
    hm_wgws_mainloop<C, !layout::c_in_ring>(kb, ke, ring, n, at, acc);
  }
  __device__ static __forceinline__ void store(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke,
                                               const hm_sk_piece &sk, unsigned char *c_stage,
                                               const hm_gemm_smem_maps &maps, const hm_wg_place &at,
                                               hm_wg_acc_t<C> &acc) {
    hm_wg_finish_segment<C, hm_wgws_c_out<C>>(p, tile, kb, ke, sk, c_stage, maps, at, acc);
  }
};

template <class C>
__device__ __forceinline__ void hm_wgws_run(const hm_gemm_params &p, hm_trace_clock &tr) {
  hm_ws_run<C, hm_wgws_traits<C>>(p, tr);
}
