// SPDX-License-Identifier: Apache-2.0
// The mainloop shared by every GEMM type: a ring of `stages` shared-memory stages filled
// with cp.async (A tile swizzled for ldmatrix, weight units, scales, zero points; copies
// planned once per tile segment, gemm_load.cuh), and per k16 step: ldmatrix A, dequantize
// B in registers, mma.sync (operands swapped for 8-row tiles, gemm_swap.cuh).
#pragma once

#include "gemm_load.cuh"
#include "gemm_swap.cuh"
#include "gemm_trace.cuh"
#include "hm_mbarrier.cuh"
#include "hm_mma.cuh"

template <class C>
__device__ __forceinline__ void hm_acc_zero(hm_acc_t<C> &acc) {
  float *a = &acc[0][0][0][0];
#pragma unroll
  for (int i = 0; i < hm_gemm_traits<C>::acc_regs; ++i) a[i] = 0.0f;
}

// One weight unit at a k16 step (words: the lane's words of it): dequantized B fragments
// of the eight n8 blocks, MMAs for all m16 rows.
template <class C>
__device__ __forceinline__ void hm_unit_mma(const unsigned char *words,
                                            const hm_u32 (&af)[hm_gemm_traits<C>::mi][4],
                                            const hm_group_vals &g,
                                            float (&acc)[hm_gemm_traits<C>::mi][8][4]) {
  using T = hm_gemm_traits<C>;
  hm_u32 w[C::bits];
  hm_load_lane_words_at<C::bits>(w, words);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const hm_u32 b0 = hm_dq_pair<C>(w, 2 * j, g), b1 = hm_dq_pair<C>(w, 2 * j + 1, g);
#pragma unroll
    for (int m = 0; m < T::mi; ++m) hm_mma_16816<T::bf16>(acc[m][j], af[m], b0, b1);
  }
}

// The lane's operand offsets of warp (wm, wn, wk) (hm_lane_addr).
template <class C>
__device__ __forceinline__ hm_lane_addr<C> hm_lane_addr_init(int wm, int wn, int wk, int lane) {
  using T = hm_gemm_traits<C>;
  hm_lane_addr<C> la;
  const int s0 = wk * T::wk_steps;
  // Swapped: the 8 token rows as the n8 operand, matrix 0 holding k 0..7 of a step and
  // matrix 1 k 8..15; else the m16 A fragment, lanes 16.. on k 8..15.
  const int row = T::swap_ab ? (lane & 7) : wm * T::wtm + (lane & 15);
  const int half = T::swap_ab ? (lane >> 3) & 1 : lane >> 4;
#pragma unroll
  for (int x = 0; x < hm_lane_addr<C>::a_slots; ++x)
    la.a[x] = hm_opaque((unsigned)hm_a_offset<C>(row, 2 * (s0 + x) + half));
  la.b = hm_opaque((unsigned)(T::b_off + (wn * T::nu * T::steps + s0) * T::unit_bytes +
                              hm_lane_words_offset<C::bits>(lane)));
  const int col = T::step_group(s0) * T::bn_units + wn * T::nu;
  la.s = hm_opaque((unsigned)(T::s_off + col * 128 + (lane >> 2) * 16));
  la.z = hm_opaque((unsigned)(T::z_off + col * 64 + (lane >> 2) * 8));
  return la;
}

template <class C>
__device__ __forceinline__ void hm_compute_stage(const unsigned char *st, const hm_lane_addr<C> &la,
                                                 hm_acc_t<C> &acc) {
  using T = hm_gemm_traits<C>;
  const unsigned a_base = hm_smem_addr(st);
  hm_group_vals g[T::nu];
  float sa[4];  // late scale: the tokens' activation sums of the current run
#pragma unroll
  for (int ss = 0; ss < T::wk_steps; ++ss) {
    const unsigned char *words = st + la.b + ss * T::unit_bytes;
    // Tiles of several m16 blocks amortize the dequant over their MMAs and are short of
    // registers: they rebuild the operands per step instead of keeping them live.
    if constexpr (T::quant && !T::late_scale) {
      if (T::mi > 1 || hm_group_starts<C>(ss)) {
        const int col = hm_lane_group<C>(ss) * T::bn_units;
#pragma unroll
        for (int u = 0; u < T::nu; ++u)
          hm_group_load<C>(st + la.s + (col + u) * 128, st + la.z + (col + u) * 64, g[u]);
      }
    }
    if constexpr (T::swap_ab) {
      hm_u32 bf[2];
      hm_ldmatrix_x2(bf, a_base + hm_lane_addr_a<C>(la, ss));
      if constexpr (T::late_scale) {
        hm_swap_late_step<C>(st, la, ss, bf, sa, acc);
      } else {
#pragma unroll
        for (int u = 0; u < T::nu; ++u)
          hm_swap_unit_mma<C>(words + u * T::steps * T::unit_bytes, bf, g[u], acc[u][0]);
      }
    } else {
      hm_u32 af[T::mi][4];
#pragma unroll
      for (int m = 0; m < T::mi; ++m)
        hm_ldmatrix_x4(af[m], a_base + hm_lane_addr_a<C>(la, ss) + m * 16 * C::bk * 2);
#pragma unroll
      for (int u = 0; u < T::nu; ++u) hm_unit_mma<C>(words + u * T::steps * T::unit_bytes, af, g[u], acc[u]);
    }
  }
}

// Issues the first stages - 1 k-tiles of [kb, ke), a commit group each, as the mainloop
// expects to find them in flight: stages [S0, S1) of them, all copies or the part PART
// names. Filled in parts (weights, then activations, hm_gemm_begin_segment), a stage is a
// group in each, and the mainloop's wait for its oldest groups still waits for each stage's
// last group: groups commit in stage order within a part, and a stage's last part after
// the earlier stages' last parts.
template <class C, int PART = HM_LOAD_ALL, int S0 = 0, int S1 = C::stages - 1>
__device__ __forceinline__ void hm_mainloop_fill(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke,
                                                 unsigned char *smem, const int *a_row) {
  using T = hm_gemm_traits<C>;
  const hm_load_plan<C> plan = hm_load_plan_init<C>(p, tile, a_row);
  hm_cp_async_fill<S0, S1>(ke - kb, [&](int s) {
    hm_load_plan_stage<C, PART>(plan, p, tile, kb + s, smem + s * T::stage_bytes, a_row);
  });
}

// The stream's next GEMM's weights (p.next_b, set where hm_gemm_warms_next) warmed in L2 by
// thread 0 of a decode tile alone on its SM, once it has issued its last weight copy: of
// unit c of the next GEMM, which the next grid's CTA c takes first, as many leading bytes
// as this tile's ring holds (units past this grid stay cold). Aimed at the time from this
// grid's last copies to the next grid's first stage (traced 3.15 us from a CTA's entry to
// its first stage on an H100): that fell to 2.51 us, but the loop then waited for the rest
// as long, level on the H100, whose DRAM sets that loop's pace (forty-fourth session).
template <class C>
__device__ __forceinline__ void hm_warm_next_weights(const hm_gemm_params &p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using T = hm_gemm_traits<C>;
  if ((int)blockIdx.x >= p.next_units) return;  // none named, or a unit past the next GEMM's
  constexpr long long ring = (long long)C::stages * T::steps * T::unit_bytes;
  const unsigned bytes = (unsigned)(p.next_unit_bytes < ring ? p.next_unit_bytes : ring);
  const unsigned char *src = (const unsigned char *)p.next_b + (long long)blockIdx.x * p.next_unit_bytes;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
#endif
}

// Makes the stage's copies of the warp's copy set (hm_gemm_traits::copy_sets), which it
// has waited for, visible to the set's warps: one warp alone, the named barrier 1 + set, or
// the whole CTA.
template <class C>
__device__ __forceinline__ void hm_stage_sync(int wk) {
  using T = hm_gemm_traits<C>;
  constexpr int warps = C::warps_k / T::copy_sets;
  if constexpr (T::copy_sets == 1)
    __syncthreads();
  else if constexpr (warps == 1)
    __syncwarp();
  else
    hm_named_sync(1 + wk / warps, 32 * warps);
}

// Accumulates k-tiles [kb, ke) of a tile into acc (zeroed first), their first stages in
// flight (hm_mainloop_fill). Leaves the pipeline drained and the CTA synchronized, so shared
// memory may be reused on return.
template <class C>
__device__ void hm_mainloop(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke, unsigned char *smem,
                            const int *a_row, int wm, int wn, int wk, int lane,
                            hm_acc_t<C> &acc, hm_trace_clock &tr) {
  using T = hm_gemm_traits<C>;
  hm_acc_zero<C>(acc);
  // Built again rather than kept from the fill: the decode tile's fill comes before the
  // previous segment's fix-up, across which the plan's registers would stay live.
  const hm_load_plan<C> plan = hm_load_plan_init<C>(p, tile, a_row);
  const hm_lane_addr<C> la = hm_lane_addr_init<C>(wm, wn, wk, lane);
  const int count = ke - kb;
  const int last_refill = count > C::stages ? count - C::stages : 0;  // copies the last k-tile
  for (int i = 0; i < count; ++i) {
    tr.awaiting();
    hm_cp_async_wait<C::stages - 2>();
    hm_stage_sync<C>(wk);
    tr.arrived(i);
    const auto refill = [&] {
      const int next = i + C::stages - 1;
      if (next < count)
        hm_load_plan_stage<C>(plan, p, tile, kb + next, smem + (next % C::stages) * T::stage_bytes, a_row);
    };
    if constexpr (!T::copies_after_compute) refill();
    hm_compute_stage<C>(smem + (i % C::stages) * T::stage_bytes, la, acc);
    if constexpr (T::copies_after_compute) refill();
    hm_cp_async_commit();
    if constexpr (C::exclusive_sm)
      if (i == last_refill && threadIdx.x == 0) hm_warm_next_weights<C>(p);
  }
  tr.looped();
  if constexpr (T::swap_ab) {
#pragma unroll
    for (int u = 0; u < T::nu; ++u) hm_swap_unit_to_std(acc[u][0], lane);
  }
  hm_cp_async_wait<0>();
  __syncthreads();
}
