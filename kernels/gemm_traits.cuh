// SPDX-License-Identifier: Apache-2.0
// Constants derived from a generated kernel config C (see kernels/gemm_gen.c): thread
// layout, tile counts, and the shared-memory map. The host mirrors the byte counts in
// gemm_config.c (hm_gemm_config_smem_bytes); both follow this file.
//
// C provides: bits (16 = unquantized), act_bf16, out_bf16, group (0 = per channel),
// zero_point, zero_const, bias, global_scale, n, k, experts, gemm_type, stream_k,
// sk_min_iters, bm, bn, bk, warps_m, warps_n, warps_k, stages, exclusive_sm. bm = 8 selects the
// swapped-operand step (gemm_swap.cuh): its accumulators and row maps span 16 rows, of
// which rows 8..15 stay empty.
#pragma once

#include "hm_chunk_grid.cuh"
#include "hm_dequant.cuh"

enum { HM_GT_DENSE = 0, HM_GT_INDEXED = 1, HM_GT_CONTIGUOUS = 2, HM_GT_MASKED = 3 };

// Bytes of the row maps behind a kernel's shared region: a_row, c_row and row_scale of ROWS
// rows, the last-contributor flag, and the per-expert tile prefixes of the grouped types
// that count their tiles from the experts' rows.
template <class C, int ROWS>
constexpr int hm_maps_bytes =
    3 * ROWS * 4 + 4 + ((C::gemm_type == HM_GT_CONTIGUOUS || C::gemm_type == HM_GT_MASKED) ? C::experts * 4 : 0);

// Shared memory of the mma.sync kernels behind their ring of PIPE bytes: the reduction
// across warps_k (RED bytes) and the row maps of ROWS rows. The swapped decode tile runs
// many short segments a CTA (Stream-K pieces of few k-tiles), so it keeps the reduction and
// two sets of row maps beside the ring: the next segment's first stages then load while
// this one reduces and stores (hm_gemm_run). Other tiles reduce in the drained ring.
// Mirrored by the host (hm_gemm_sync_smem_bytes).
template <class C, int PIPE, int RED, int ROWS>
struct hm_sync_smem {
  static constexpr bool overlap = C::bm == 8;
  static constexpr int red_off = overlap ? PIPE : 0;
  static constexpr int maps_off = overlap ? PIPE + RED : (PIPE > RED ? PIPE : RED);
  static constexpr int map_sets = overlap ? 2 : 1;
  static constexpr int bytes = maps_off + hm_maps_bytes<C, ROWS * map_sets>;
};

// A tile that has its SM to itself (C::exclusive_sm, the launch's hm_gemm_exclusive_sm: a
// dense decode tile run one CTA an SM on sm_90) copies its first weight stages before the
// grid dependency (gemm_pdl.cuh), the first HM_EARLY_STAGES at most: the rest of the ring
// fills after the wait. It then warms the HM_EARLY_L2_STAGES k-tiles after those in L2,
// for where the loop, not the DRAM, sets the pace (an H200) and the DRAM has room in the
// wait. Both come from the generated source (gemm_gen.c: HUMMING_PDL_EARLY_STAGES, 3, and
// HUMMING_PDL_EARLY_L2, 0), so that one build can time them.
template <class C>
constexpr int hm_early_stages = C::stages - 1 < HM_EARLY_STAGES ? C::stages - 1 : HM_EARLY_STAGES;

// The weight-only kernels' tile counts and pipeline stage: the activation tile, weight
// units, scales and zero points, padded to ALIGN bytes (128; 1024 for the wgmma kernel, the
// repeat of its 128-byte swizzle).
template <class C, int ALIGN>
struct hm_wo_stage {
  static constexpr bool quant = C::bits < 16;
  static constexpr int bn_units = C::bn / 64;
  static constexpr int steps = C::bk / 16;

  static constexpr int n_units = (C::n + 63) / 64;
  static constexpr int k16 = (C::k + 15) / 16;
  static constexpr int n_tiles = (n_units + bn_units - 1) / bn_units;
  static constexpr int k_iters = (k16 + steps - 1) / steps;
  static constexpr int groups = !quant ? 0 : (C::group ? C::k / C::group : 1);
  static constexpr int stage_groups = (C::group == 0 || C::group >= C::bk) ? 1 : C::bk / C::group;
  static constexpr int unit_bytes = 128 * C::bits;

  static constexpr int a_bytes = C::bm * C::bk * 2;
  static constexpr int b_bytes = bn_units * steps * unit_bytes;
  static constexpr int s_bytes = quant ? stage_groups * bn_units * 128 : 0;
  static constexpr int z_bytes = (quant && C::zero_point) ? stage_groups * bn_units * 64 : 0;
  static constexpr int b_off = a_bytes;
  static constexpr int s_off = b_off + b_bytes;
  static constexpr int z_off = s_off + s_bytes;
  static constexpr int stage_bytes = (z_off + z_bytes + ALIGN - 1) / ALIGN * ALIGN;
  static constexpr int pipe_bytes = stage_bytes * C::stages;

  // The scale group (within a stage) of k16 step s.
  __device__ static __forceinline__ int step_group(int s) {
    return (C::group == 0 || C::group >= C::bk) ? 0 : (s * 16) / C::group;
  }

  static_assert(k_iters < (1 << 16),
                "Stream-K counts two waves of tiles' k-iterations in 32 bits (hm_sk_split.cuh)");
  static_assert(C::group == 0 || (C::group % 16 == 0 && (C::group % C::bk == 0 || C::bk % C::group == 0)),
                "group must be a multiple of 16 that divides or is divided by bk");
};

template <class C>
struct hm_gemm_traits : hm_wo_stage<C, 128> {
  using S = hm_wo_stage<C, 128>;
  static constexpr bool bf16 = C::act_bf16;
  static constexpr int warps_mn = C::warps_m * C::warps_n;
  static constexpr int threads = 32 * warps_mn * C::warps_k;
  static constexpr bool swap_ab = C::bm == 8;
  static constexpr int map_rows = swap_ab ? 16 : C::bm;  // rows of the row maps and accumulators
  // Swapped tiles MMA on the magic-biased codes and apply zero point and scale to f32
  // sums once per scale group (gemm_swap.cuh), unless the codes overflow the mantissa.
  static constexpr bool late_scale = swap_ab && S::quant && !hm_dq<bf16, C::bits>::via_f32;
  static constexpr int wtm = C::bm / C::warps_m;  // warp tile rows
  static constexpr int wtn = C::bn / C::warps_n;  // warp tile columns
  static constexpr int mi = swap_ab ? 1 : wtm / 16;
  static constexpr int nu = wtn / 64;
  static constexpr int wk_steps = S::steps / C::warps_k;
  // Late scale: the k16 steps a warp sums on biased codes before it folds them
  // (gemm_swap.cuh), its steps within one scale group; at most 4 with f16, whose bias
  // 1024 + z cancels 8x more of the f32 sums than bf16's 128 + z.
  static constexpr int group_steps = (C::group == 0 || C::group >= wk_steps * 16) ? wk_steps : C::group / 16;
  static constexpr int late_run = (!bf16 && group_steps > 4) ? 4 : group_steps;

  // Accumulators of one thread and the cross-warp K reduction.
  static constexpr int acc_regs = mi * nu * 32;
  static constexpr int red_bytes = (C::warps_k - 1) * warps_mn * 32 * acc_regs * 4;
  using smem = hm_sync_smem<C, S::pipe_bytes, red_bytes, map_rows>;
  static constexpr int smem_bytes = smem::bytes;
  static constexpr bool fill_before_wait = C::exclusive_sm;
  // A decode tile's few warps, one a scheduler, run their stage's shared loads, dequant and
  // MMAs as one dependent chain an iteration (on an H100 the unit tile waited for stages in
  // 0.41 of its loop's 11.89 us, thirty-first session). Issued before that chain, the next
  // stage's copies hold its first shared loads back (the copies' memory clobber); issued
  // after it, they fill its tail, one stage later: a ring of four or more still keeps two
  // stages in flight under each iteration.
  static constexpr bool copies_after_compute = C::bm <= 16 && C::stages >= 4;
  // A decode tile's warps split K only (warps_k of them on one warp tile), so each reads a
  // k-slice of every stage. They copy in sets of the warps that share a scale group, each
  // set its own slice (hm_chunk_grid), and a set waits for its stage on its own barrier
  // (hm_stage_sync) instead of the CTA's: its warps no longer wait every k-tile for the
  // slowest warp of the CTA. Not where the last k-tile reaches past K (its checked loads
  // copy as one CTA). The grid's coverage is checked on the CPU (test_gemm_chunk_grid); on an
  // H100 dense W4A16 decode ran 1.03-1.04x faster at one to eight tokens and 1.06x at sixteen
  // (docs/PERF.md, forty-seventh session). HUMMING_DECODE_COPY_SETS=0 copies as one CTA.
  static constexpr int copy_sets = hm_copy_sets(HM_COPY_SETS, C::bm, warps_mn, C::warps_k, C::k, C::bk, S::quant,
                                                S::stage_groups);

  static_assert(swap_ab ? C::warps_m == 1 : C::bm % (16 * C::warps_m) == 0,
                "bm must split into 16-row warp tiles, or be 8 (swapped operands) with one warp row");
  static_assert(C::bn % (64 * C::warps_n) == 0, "bn must split into 64-column warp tiles");
  static_assert(C::bk == 64 || C::bk == 128 || C::bk == 256 || C::bk == 512 || C::bk == 1024,
                "bk must be 64, 128, 256, 512 or 1024");
  static_assert(S::steps % C::warps_k == 0, "warps_k must divide bk/16");
  static_assert(C::stages >= 2, "at least two stages");
  static_assert(map_rows <= threads, "one thread per map row fills the row maps");
};

// One thread's accumulators: [weight unit][m16 block][n8 block][c0..c3].
template <class C>
using hm_acc_t = float[hm_gemm_traits<C>::nu][hm_gemm_traits<C>::mi][8][4];
