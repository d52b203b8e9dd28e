// SPDX-License-Identifier: Apache-2.0
// The W8A8 mma.sync GEMM: int8 x int8 -> s32 (sm_80+) or fp8 e4m3 x e4m3 -> f32 or f16
// (sm_89+), m16n8k32, on the schedule, row maps and epilogue of the weight-only kernel
// (gemm_kernel.cuh). The MMAs sum raw codes; scales are applied in f32 outside them:
// those that change along K (128x128 weight blocks, 1x128 activation groups) when a
// stage's partial sums are folded into the accumulators, the per-channel and per-token
// ones once at the end of a segment. All of it is linear, so warps_k and Stream-K
// partials still add up after it.
//
// C adds to the weight-only constants (bits 8, group 0): a_int8 (else fp8 e4m3), w_block
// (f32 weight scales per 128x128 block, else per channel), a_group (activation scales per
// row and 128 columns, else per row), w4 (W4A8: 4-bit weights widened to 8 bits in
// registers, hm_w4a8_codes.cuh; HM_W4_NONE for 8-bit ones), acc16 (fp8 MMAs with f16
// accumulators, below).
//
// W4A8 int4 is the int8 kernel on half-size units. W4A8 mxfp4 (e2m1, e8m0 scales per 32
// along K) folds each k32 step's MMA into the accumulators with its column's power of two
// in f32, which is exact for any scale; folding the scale into the widened e4m3 code would
// lose the codes past e4m3's range (2^-9..448), so adversarial scales would not survive it.
//
// W4A8 nvfp4 (e2m1, e4m3 scales per 16 along K, an f32 global scale per expert): a group of
// 16 is one K half of the k32 step (PTX ISA, fragments of mma.m16n8k32: A registers a0, a1
// hold k 0..15 and a2, a3 k 16..31; B register b0 k 0..15 and b1 k 16..31). Each step runs
// one fp8 m16n8k16 MMA a half on that half's registers (hm_w8_mma_part, hm_mma_16816_f8) and
// folds its sums with its column's e4m3 scale in f32, as mxfp4 folds its e8m0 one per k32.
// A k32 MMA with the other half of the activations zeroed sums the same, but costs a whole
// k32 MMA a half (sm_89 runs the k16 one natively; ptxas 13.0 lowers sm_90a's fp8 mma.sync
// to f16 MMAs, half as many for k16) and registers of zeros, with which ptxas spilled 50-330
// bytes at two units a warp; the k16 form spills none there on sm_89, about mxfp4's on sm_90a.
// The global scale multiplies the finished sums once, in the epilogue (hm_store_tile): an
// e4m3 scale (4 significant bits) times an f32 one needs up to 28 bits, so folding it into
// the scales would round each of them, where the end rounds one product of all-linear sums.
//
// w4_f16 (mxfp4 or nvfp4 on sm_90, hm_w4a8_f16_codes): sm_90 has no 8-bit mma.sync, and ptxas
// turns each fp8 MMA into f16 ones, unpacking every fp8 operand register on the conversion
// unit first. With the f16 codes (hm_w4a8_codes.cuh) the kernel runs the f16 m16n8k16 MMAs
// itself: the weights widen to f16 pairs with integer ops, and the activations are unpacked
// once a k32 step, shared by the warp's MMA blocks. A k32 step is two k16 halves (nvfp4's
// scale groups): half q takes the fp8 registers of k 16q.. (A 2q, 2q+1; B q), each split
// into the f16 pairs of its bytes 0, 1 and 2, 3, which stand for k 2t, 2t+1 and 2t+8, 2t+9
// of the f16 fragment. The codes enter as 2^-14 times their value, 2^8 below the fp8 form.
//
// The swapped 8-row tile (bm = 8, hm_gemm_traits::swap_ab) runs the weights as the m16 A
// operand and the tokens as the n8 B operand, as the weight-only kernel does
// (gemm_swap.cuh): a unit's lane words are already its A fragments (hm_w8_weight_frags), so
// a 64-column unit takes 4 MMAs a k32 step instead of 8 of which 15/16 of the rows are
// empty, and mxfp4 and nvfp4 fold half as many sums. The sums hold C^T (hm_w8_row_half)
// until the end of the mainloop, where hm_swap_unit_to_std moves them into the standard
// layout that the per-channel and per-token scales, the k reduction, Stream-K and the
// epilogue use.
//
// acc16 (fp8 only, per-channel, mxfp4 or nvfp4 weights, per-token activation scales): each
// k32 MMA sums in f16 from zero and is added into the f32 sums at once, so f16 never holds
// more than 32 products. Even that overflows from raw codes: 32 x 448 x 448 = 6.4e6 against
// f16's 65504, and random normal data quantized to the full e4m3 range already sums to
// about 65000 (one sigma) over 32 products. So A codes enter the MMA as 2^-7 times their
// value (hm_e4m3x4_div128, once per fragment, shared by the warp's n8 blocks) and the f32
// add puts the 2^7 back: 32 x 448 x 3.5 = 50176 stays finite for any codes. The scaling is
// exact for codes of 2 and more; smaller ones (under 1/224 of a row's largest, per-token
// quantization putting that at 448) become multiples of 2^-2, e4m3's own step between 2
// and 4. Keeping f16 partials over a whole stage instead would need 2^-10 at bk 256, a
// step of 2 codes, which outlier-heavy activations (most codes under 16) would feel.
// mxfp4 needs no scaling: widened e2m1 codes are at most 6 x 2^-6, so 32 x 448 x 0.094 =
// 1344. nvfp4 neither: an MMA sums 16 such products, at most 672, and its e4m3 scale
// multiplies the f16 sum in f32, so that the scale being no power of two costs one f32
// rounding on top of mxfp4's f16 one, not f16 range or precision.
#pragma once

#include "gemm_kernel.cuh"
#include "hm_mma8.cuh"
#include "hm_w4a8_codes.cuh"
#include "hm_w8_units.cuh"

template <class C>
struct hm_w8_traits : hm_gemm_traits<C> {
  using G = hm_gemm_traits<C>;
  static constexpr int steps = C::bk / 32;  // k32 steps a stage
  static constexpr int wk_steps = steps / C::warps_k;
  static constexpr int k16 = (C::k + 31) / 32;  // k32 steps of the weights (the name hm_load_b reads)
  static constexpr int unit_bytes = C::w4 ? 32 * 64 / 2 : 32 * 64;  // a 32 (k) x 64 (n) unit of codes
  static constexpr bool mx = C::w4 == HM_W4_E2M1;
  static constexpr bool nv = C::w4 == HM_W4_NVFP4;
  static constexpr bool fp4 = mx || nv;        // e2m1 codes, each MMA's sums folded with its scales
  static constexpr int k_parts = nv ? 2 : 1;   // MMAs a k32 step: one per scale group along K
  static constexpr bool f16w = C::w4_f16;      // f16 codes into f16 MMAs (above)
  // Registers of an MMA operand's fragments a k32 step: fp8 ones, or their f16 pairs.
  static constexpr int frag_regs = f16w ? 8 : 4;
  static constexpr int fp4_unit_bytes = 64 * k_parts;  // scales of a unit's 64 columns at one k32 step
  static constexpr int a_bytes = C::bm * C::bk;
  static constexpr int b_off = a_bytes;
  static constexpr int b_bytes = G::bn_units * steps * unit_bytes;
  static constexpr int s_off = b_off + b_bytes;
  static constexpr int s_bytes = fp4 ? G::bn_units * steps * fp4_unit_bytes : 0;
  static constexpr int stage_bytes = (s_off + s_bytes + 127) / 128 * 128;
  static constexpr int pipe_bytes = stage_bytes * C::stages;
  using smem = hm_sync_smem<C, pipe_bytes, G::red_bytes, G::map_rows>;
  static constexpr int smem_bytes = smem::bytes;
  static constexpr bool k_scaled = C::w_block || C::a_group;  // scales that change along K
  static constexpr int k_blocks = (C::k + 127) / 128;         // 1x128 scales a row, block scales a column
  // MMA blocks a unit: 8 n8 blocks, or (swapped) 4 m16 blocks of 16 weight columns.
  static constexpr int blocks = G::swap_ab ? 4 : 8;
  // Registers of the activation fragments: an m16 A fragment, or (swapped) an n8 B one.
  static constexpr int act_regs = G::swap_ab ? 2 : 4;

  static_assert(steps % C::warps_k == 0, "warps_k must divide bk/32");
  static_assert(!k_scaled || 128 % C::bk == 0, "a stage must lie in one 128-wide K scale block");
  static_assert(C::k % 16 == 0, "A rows are copied in 16-byte pieces");
  static_assert(!mx || (!C::a_int8 && !C::w_block && C::k % 32 == 0), "mxfp4: fp8 A, e8m0 scales per 32");
  static_assert(!nv || (!C::a_int8 && !C::w_block), "nvfp4: fp8 A, e4m3 scales per 16");
  static_assert(!C::acc16 || (!C::a_int8 && !k_scaled), "f16 accumulation: fp8, scales constant along K");
  static_assert(!f16w || fp4, "f16 codes: e2m1 weights");
  // What the f32 sums still carry: int4 codes enter as 16 q (its transform divides the
  // channel scales by 16); e2m1 codes as 2^-6 times their value (f16 codes: 2^-14), e8m0
  // scales as 2^(x - 126), e4m3 ones as their value.
  static constexpr float code_factor = f16w ? 16384.0f : 64.0f;
  static constexpr float w_factor = mx ? code_factor / 2 : (nv ? code_factor : 1.0f);
  // acc16: A codes enter the f16 MMA as 2^-7 times their value, but for e2m1 weights (above).
  static constexpr bool a_div128 = C::acc16 && !fp4;
  static constexpr float a_factor = a_div128 ? 128.0f : 1.0f;
};

template <bool INT8>
struct hm_w8_sum {
  typedef float type;
};
template <>
struct hm_w8_sum<true> {
  typedef int type;
};

// A stage's partial sums of one thread, in the MMA's accumulator type (f32 for acc16, whose
// f16 sums live one MMA long): [unit][m16][block][c0..c3].
template <class C>
using hm_w8_sum_t = typename hm_w8_sum<C::a_int8>::type;
template <class C>
using hm_w8_part_t = hm_w8_sum_t<C>[hm_gemm_traits<C>::nu][hm_gemm_traits<C>::mi][hm_w8_traits<C>::blocks][4];

// Which of a lane's two rows (A rows g, g + 8; swapped: tokens 2t, 2t + 1) and of its two
// columns (2t, 2t + 1 of an n8 block; swapped: unit columns 8(2j) + g, 8(2j + 1) + g of m16
// block j) accumulator element c belongs to.
template <class C>
__device__ __forceinline__ constexpr int hm_w8_row_half(int c) {
  return hm_gemm_traits<C>::swap_ab ? c & 1 : c >> 1;
}
template <class C>
__device__ __forceinline__ constexpr int hm_w8_col_half(int c) {
  return hm_gemm_traits<C>::swap_ab ? c >> 1 : c & 1;
}

// The tile row of a lane's row half h of m16 block m in the standard layout (rows 8..15 of
// a swapped tile hold none), and in the layout of the mainloop's sums (hm_w8_row_half).
template <class C>
__device__ __forceinline__ int hm_w8_std_row(int wm, int m, int h, int lane) {
  return wm * hm_gemm_traits<C>::wtm + m * 16 + (lane >> 2) + 8 * h;
}
template <class C>
__device__ __forceinline__ int hm_w8_sum_row(int wm, int m, int h, int lane) {
  if constexpr (hm_gemm_traits<C>::swap_ab) return 2 * (lane & 3) + h;
  return hm_w8_std_row<C>(wm, m, h, lane);
}

// A rows are bk bytes, in 16-byte chunks swizzled within 128-byte lines, so that the eight
// rows an ldmatrix phase reads fall in eight different bank groups. bk = 64 puts two rows
// in a line.
template <class C>
__device__ __forceinline__ int hm_w8_a_offset(int r, int ch) {
  if constexpr (C::bk >= 128) return r * C::bk + ((ch ^ (r & 7)) << 4);
  return (r >> 1) * 128 + (((((r & 1) << 2) | ch) ^ ((r >> 1) & 7)) << 4);
}

template <class C>
__device__ __forceinline__ void hm_w8_load_a(const hm_gemm_params &p, int kt, unsigned char *st,
                                             const int *a_row) {
  hm_load_a_tile<C, hm_w8_traits<C>::threads, 1>(p, kt, st, a_row,
                                                 [](int r, int ch) { return hm_w8_a_offset<C>(r, ch); });
}

template <class C, int PART = HM_LOAD_ALL>
__device__ __forceinline__ void hm_w8_load_stage(const hm_gemm_params &p, const hm_tile &tile, int kt,
                                                 unsigned char *st, const int *a_row) {
  using T = hm_w8_traits<C>;
  if constexpr (hm_loads_acts(PART)) hm_w8_load_a<C>(p, kt, st, a_row);
  if constexpr (!hm_loads_weights(PART)) return;
  hm_load_b<C, T>(p, tile, kt, st);
  // mxfp4 and nvfp4: the scales, 64 bytes (e8m0) or 128 (e4m3, two K halves) a unit and k32
  // step, laid out like the units (transform_w4a8.cuh).
  if constexpr (T::fp4)
    hm_load_unit_data<C, T, T::fp4_unit_bytes>((const unsigned char *)p.scales, tile, kt, st + T::s_off);
}

// The B fragment pair of n8 block j from a lane's words of one unit (8-bit: two words a
// block; 4-bit: one word, widened).
template <class C, int WORDS>
__device__ __forceinline__ void hm_w8_b_frags(const hm_u32 (&w)[WORDS], int j, hm_u32 &b0, hm_u32 &b1) {
  if constexpr (C::w4 == HM_W4_INT4) {
    hm_w4_widen_i4(w[j], &b0, &b1);
  } else if constexpr (hm_w8_traits<C>::fp4) {
    hm_w4_widen_e2m1(w[j], &b0, &b1);
  } else {
    b0 = w[2 * j];
    b1 = w[2 * j + 1];
  }
}

// f16 codes, the fragments of MMA block j by k16 half q: the B registers of n8 block j at
// wf[2q + i] (its word's pairs, as they come), or, swapped, the A registers of m16 block j
// at wf[4q + 2i + h]: pair 2q + i of the word of n8 block 2j + h (rows g, g + 8).
template <class C, int WORDS>
__device__ __forceinline__ void hm_w8_weight_frags_f16(const hm_u32 (&w)[WORDS], int j, hm_u32 (&wf)[8]) {
  if constexpr (hm_gemm_traits<C>::swap_ab) {
    hm_u32 f[2][4];
#pragma unroll
    for (int h = 0; h < 2; ++h) hm_w4_widen_e2m1_f16(w[2 * j + h], f[h]);
#pragma unroll
    for (int q = 0; q < 2; ++q)
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) wf[4 * q + 2 * i + h] = f[h][2 * q + i];
  } else {
    hm_w4_widen_e2m1_f16(w[j], wf);
  }
}

// The weight fragments of MMA block j of a unit: the B pair wf[0..1] of n8 block j, or,
// swapped, the A fragment of m16 block j, whose register r is B register r / 2 of n8 block
// 2j + r % 2 (hm_swap_a_slot: the m16n8k32 8-bit fragments pair up as the 16-bit ones do).
template <class C, int WORDS>
__device__ __forceinline__ void hm_w8_weight_frags(const hm_u32 (&w)[WORDS], int j,
                                                   hm_u32 (&wf)[hm_w8_traits<C>::frag_regs]) {
  if constexpr (hm_w8_traits<C>::f16w) {
    hm_w8_weight_frags_f16<C>(w, j, wf);
  } else if constexpr (hm_gemm_traits<C>::swap_ab) {
#pragma unroll
    for (int h = 0; h < 2; ++h) hm_w8_b_frags<C>(w, 2 * j + h, wf[h], wf[2 + h]);
  } else {
    hm_w8_b_frags<C>(w, j, wf[0], wf[1]);
  }
}

// c += the MMA of activation fragments af and weight fragments wf: tokens as A, or, swapped,
// weights as A and tokens as B (c then holds C^T). c picks the instruction (hm_mma8.cuh):
// f32 or s32 sums, or two f16x2 words.
template <class C, class Acc, int N>
__device__ __forceinline__ void hm_w8_mma(Acc (&c)[N], const hm_u32 (&af)[4], const hm_u32 (&wf)[4]) {
  if constexpr (hm_gemm_traits<C>::swap_ab)
    hm_mma_16832(c, wf, af[0], af[1]);
  else
    hm_mma_16832(c, af, wf[0], wf[1]);
}

// f16 codes: c += the f16 MMA of k16 half q, A the weights when swapped; c picks f32 sums
// or two f16x2 words (acc16).
template <class C, class Acc, int N>
__device__ __forceinline__ void hm_w8_mma_f16(Acc (&c)[N], const hm_u32 (&af)[8], const hm_u32 (&wf)[8], int q) {
  constexpr bool swap = hm_gemm_traits<C>::swap_ab;
  const hm_u32(&x)[8] = swap ? wf : af;
  const hm_u32(&y)[8] = swap ? af : wf;
  const hm_u32 a[4] = {x[4 * q], x[4 * q + 1], x[4 * q + 2], x[4 * q + 3]};
  if constexpr (N == 2)
    hm_mma_16816_f16(c, a, y[2 * q], y[2 * q + 1]);
  else
    hm_mma_16816<false>(c, a, y[2 * q], y[2 * q + 1]);
}

// c += the MMA of part p of a k32 step (hm_w8_traits::k_parts): all of it, or nvfp4's K
// half p through the m16n8k16 MMA on that half's registers of the k32 fragments.
template <class C, class Acc, int N>
__device__ __forceinline__ void hm_w8_mma_part(Acc (&c)[N], const hm_u32 (&af)[hm_w8_traits<C>::frag_regs],
                                               const hm_u32 (&wf)[hm_w8_traits<C>::frag_regs], int p) {
  if constexpr (hm_w8_traits<C>::f16w) {
#pragma unroll
    for (int q = 0; q < 2; ++q)
      if (hm_w8_traits<C>::k_parts == 1 || q == p) hm_w8_mma_f16<C>(c, af, wf, q);
  } else if constexpr (hm_w8_traits<C>::k_parts == 1)
    hm_w8_mma<C>(c, af, wf);
  else if constexpr (hm_gemm_traits<C>::swap_ab)
    hm_mma_16816_f8(c, wf[2 * p], wf[2 * p + 1], af[p]);
  else
    hm_mma_16816_f8(c, af[2 * p], af[2 * p + 1], wf[p]);
}

// One MMA part's sums from zero, in f32: through the f16-accumulator instruction with acc16.
template <class C>
__device__ __forceinline__ void hm_w8_mma_fresh(float (&d)[4], const hm_u32 (&af)[hm_w8_traits<C>::frag_regs],
                                                const hm_u32 (&wf)[hm_w8_traits<C>::frag_regs], int p) {
  if constexpr (C::acc16) {
    hm_u32 h[2] = {0u, 0u};
    hm_w8_mma_part<C>(h, af, wf, p);
#pragma unroll
    for (int c = 0; c < 4; ++c) d[c] = hm_h_to_f32<false>(h[c >> 1] >> (16 * (c & 1)));
  } else {
#pragma unroll
    for (int c = 0; c < 4; ++c) d[c] = 0.0f;
    hm_w8_mma_part<C>(d, af, wf, p);
  }
}

// part += A B for one MMA block: in the MMA's own accumulators, or, with acc16, from an f16
// MMA of 2^-7 times the activations (hm_w8_traits::a_div128), 2^7 put back in the f32 add.
template <class C>
__device__ __forceinline__ void hm_w8_mma_add(hm_w8_sum_t<C> (&part)[4], const hm_u32 (&af)[4],
                                              const hm_u32 (&wf)[4]) {
  if constexpr (C::acc16) {
    float d[4];
    hm_w8_mma_fresh<C>(d, af, wf, 0);
#pragma unroll
    for (int c = 0; c < 4; ++c) part[c] += d[c] * hm_w8_traits<C>::a_factor;
  } else {
    hm_w8_mma<C>(part, af, wf);
  }
}

// f16 codes: the f16 pairs of a lane's fp8 activation registers x, by k16 half q: as the A
// operand at f[4q + 2i + h], pair i (bytes 2i, 2i + 1) of x[2q + h] (rows g, g + 8); swapped,
// as the B operand at f[2q + i], pair i of x[q].
template <class C>
__device__ __forceinline__ void hm_w8_act_f16(const hm_u32 (&x)[4], hm_u32 (&f)[8]) {
#pragma unroll
  for (int q = 0; q < 2; ++q)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if constexpr (hm_gemm_traits<C>::swap_ab)
        f[2 * q + i] = hm_e4m3x2_to_f16x2(x[q] >> (16 * i));
      else
#pragma unroll
        for (int h = 0; h < 2; ++h) f[4 * q + 2 * i + h] = hm_e4m3x2_to_f16x2(x[2 * q + h] >> (16 * i));
    }
}

// The warp's activation fragments of k32 step s: an m16 A fragment per m block, or, swapped,
// the n8 B fragment of the 8 token rows (ldmatrix matrix 0: k 0..15 of the step, matrix 1:
// k 16..31) in registers 0..1. acc16 fp8: scaled by 2^-7 (hm_w8_traits::a_div128). f16
// codes: their f16 pairs (hm_w8_act_f16).
template <class C>
__device__ __forceinline__ void hm_w8_load_a_frags(unsigned a_base, int wm, int s, int lane,
                                                   hm_u32 (&af)[hm_w8_traits<C>::mi][hm_w8_traits<C>::frag_regs]) {
  using T = hm_w8_traits<C>;
#pragma unroll
  for (int m = 0; m < T::mi; ++m) {
    hm_u32 x[4];
    if constexpr (T::swap_ab) {
      hm_u32 bf[2];
      hm_ldmatrix_x2(bf, a_base + hm_w8_a_offset<C>(lane & 7, s * 2 + ((lane >> 3) & 1)));
      x[0] = bf[0];
      x[1] = bf[1];
      x[2] = x[3] = 0u;
    } else {
      const int r = wm * T::wtm + m * 16 + (lane & 15);
      hm_ldmatrix_x4(x, a_base + hm_w8_a_offset<C>(r, s * 2 + (lane >> 4)));
    }
    if constexpr (T::a_div128)
#pragma unroll
      for (int i = 0; i < T::act_regs; ++i) x[i] = hm_e4m3x4_div128(x[i]);
    if constexpr (T::f16w)
      hm_w8_act_f16<C>(x, af[m]);
    else
#pragma unroll
      for (int i = 0; i < 4; ++i) af[m][i] = x[i];
  }
}

// The warp's k32 steps of one stage: per step the activation fragments, per unit its words,
// per MMA block and m block the weight fragments, handed to the caller's body. unit(u, us)
// runs once per unit (us: its index among the stage's unit steps) and returns the body
// block(u, j, m, af, wf), so that per-unit values (e2m1 formats' scales) load once.
template <class C, class Unit>
__device__ __forceinline__ void hm_w8_walk_stage(const unsigned char *st, int wm, int wn, int wk, int lane,
                                                 Unit &&unit) {
  using T = hm_w8_traits<C>;
  const unsigned a_base = hm_smem_addr(st);
#pragma unroll
  for (int ss = 0; ss < T::wk_steps; ++ss) {
    const int s = wk * T::wk_steps + ss;
    hm_u32 af[T::mi][T::frag_regs];
    hm_w8_load_a_frags<C>(a_base, wm, s, lane, af);
#pragma unroll
    for (int u = 0; u < T::nu; ++u) {
      // Word 2j: k 4t..4t+3 of column j*8+g; word 2j+1: k 16+4t.. (hm_w8_units.cuh); 4-bit
      // units hold both in word j (transform_w4a8.cuh).
      constexpr int words = C::w4 ? 8 : 16;
      const int us = (wn * T::nu + u) * T::steps + s;
      hm_u32 w[words];
      if constexpr (C::w4)
        hm_load_lane_words<words>(w, st + T::b_off + us * T::unit_bytes, lane);
      else
        hm_w8_unit_words(w, st + T::b_off + us * T::unit_bytes, lane);
      auto block = unit(us);
#pragma unroll
      for (int j = 0; j < T::blocks; ++j) {
        hm_u32 wf[T::frag_regs];
        hm_w8_weight_frags<C>(w, j, wf);
#pragma unroll
        for (int m = 0; m < T::mi; ++m) block(u, j, m, af[m], wf);
      }
    }
  }
}

// The warp's k32 steps of one stage into its partial sums.
template <class C>
__device__ __forceinline__ void hm_w8_compute_stage(const unsigned char *st, int wm, int wn, int wk, int lane,
                                                    hm_w8_part_t<C> &part) {
  using T = hm_w8_traits<C>;
  hm_w8_walk_stage<C>(st, wm, wn, wk, lane, [&](int) {
    return [&](int u, int j, int m, const hm_u32(&af)[T::frag_regs], const hm_u32(&wf)[T::frag_regs]) {
      hm_w8_mma_add<C>(part[u][m][j], af, wf);
    };
  });
}

// mxfp4 and nvfp4: the 16 scale bytes of a unit, k32 step and part p (nvfp4's K half, 64
// bytes each) that a lane loads. Bytes 16t' + 2j + i of a part hold column 8j + 2t' + i
// (transform_w4a8.cuh): a lane's own t' = t, or, swapped, the row of its column g (t' = g / 2,
// hm_swap8_scale_row).
template <class C>
__device__ __forceinline__ uint4 hm_w4_load_scales(const unsigned char *unit, int p, int lane) {
  const int row = hm_gemm_traits<C>::swap_ab ? hm_swap8_scale_row(lane) : lane & 3;
  return *(const uint4 *)(unit + p * 64 + row * 16);
}

// The word of the 16 scale bytes that holds a lane's columns of MMA block j, and the byte in
// it of its column half i (hm_w8_col_half): bytes 2j + i, or, swapped, 4j + hm_swap8_scale_byte.
template <class C>
__device__ __forceinline__ hm_u32 hm_w4_scale_word(const uint4 &sc, int j) {
  const int wi = hm_gemm_traits<C>::swap_ab ? j : j >> 1;
  return wi < 2 ? (wi == 0 ? sc.x : sc.y) : (wi == 2 ? sc.z : sc.w);
}
template <class C>
__device__ __forceinline__ int hm_w4_scale_byte(int j, int lane, int i) {
  return hm_gemm_traits<C>::swap_ab ? hm_swap8_scale_byte(lane, i) : 2 * (j & 1) + i;
}

// The scales of a lane's two columns of MMA block j in f32: e8m0 as 2^(x - 126), or e4m3,
// both through one conversion.
template <class C>
__device__ __forceinline__ void hm_w4_col_scales(const uint4 &sc, int j, int lane, float (&s2)[2]) {
  const hm_u32 word = hm_w4_scale_word<C>(sc, j);
  if constexpr (hm_w8_traits<C>::nv) {
    const hm_u32 pair = hm_w4_scale_byte<C>(j, lane, 1) << 4 | hm_w4_scale_byte<C>(j, lane, 0);
    hm_e4m3x2_to_f32(__byte_perm(word, 0u, 0x4400u | pair), s2);
  } else {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const hm_u32 x = __byte_perm(word, 0u, 0x4440u + hm_w4_scale_byte<C>(j, lane, i));
      s2[i] = __uint_as_float(hm_w4_e8m0_bits_x2(x));
    }
  }
}

// mxfp4 and nvfp4: the warp's k32 steps of one stage, each MMA's sums folded into acc with its
// columns' scales (and the rows' 1x128 scales ra) right away: one MMA a step, or one a K half.
template <class C>
__device__ __forceinline__ void hm_w4_fp4_stage(const unsigned char *st, int wm, int wn, int wk, int lane,
                                                const float (&ra)[hm_w8_traits<C>::mi][2], hm_acc_t<C> &acc) {
  using T = hm_w8_traits<C>;
  hm_w8_walk_stage<C>(st, wm, wn, wk, lane, [&](int us) {
    uint4 sc[T::k_parts];
#pragma unroll
    for (int p = 0; p < T::k_parts; ++p)
      sc[p] = hm_w4_load_scales<C>(st + T::s_off + us * T::fp4_unit_bytes, p, lane);
    return [&, sc](int u, int j, int m, const hm_u32(&af)[T::frag_regs], const hm_u32(&wf)[T::frag_regs]) {
#pragma unroll
      for (int p = 0; p < T::k_parts; ++p) {
        float s2[2];
        hm_w4_col_scales<C>(sc[p], j, lane, s2);
        float d[4];
        hm_w8_mma_fresh<C>(d, af, wf, p);
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const float s = s2[hm_w8_col_half<C>(c)];
          acc[u][m][j][c] += d[c] * (C::a_group ? s * ra[m][hm_w8_row_half<C>(c)] : s);
        }
      }
    };
  });
}

// The scale of A row r of the tile for K block kb (0 for rows the tile does not have).
template <class C, bool PER_K>
__device__ __forceinline__ float hm_w8_row_scale(const hm_gemm_params &p, const int *a_row, int r, int kb) {
  const int row = a_row[r];
  if (row < 0) return 0.0f;
  if constexpr (PER_K) return p.a_scale[(long long)row * hm_w8_traits<C>::k_blocks + kb];
  return p.a_scale[row];
}

// The 1x128 scales of K block kb of the thread's accumulator rows (1 for per-token ones).
template <class C>
__device__ __forceinline__ void hm_w8_k_row_scales(const hm_gemm_params &p, const int *a_row, int kb, int wm,
                                                   int lane, float (&ra)[hm_w8_traits<C>::mi][2]) {
  using T = hm_w8_traits<C>;
#pragma unroll
  for (int m = 0; m < T::mi; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      ra[m][h] = C::a_group ? hm_w8_row_scale<C, true>(p, a_row, hm_w8_sum_row<C>(wm, m, h, lane), kb) : 1.0f;
}

// acc += part * (the K-varying scales of K block kb); part = 0.
template <class C>
__device__ __forceinline__ void hm_w8_fold(const hm_gemm_params &p, const hm_tile &tile, int kb,
                                           const int *a_row, int wm, int wn, int lane, hm_w8_part_t<C> &part,
                                           hm_acc_t<C> &acc) {
  using T = hm_w8_traits<C>;
  float ra[T::mi][2];
  hm_w8_k_row_scales<C>(p, a_row, kb, wm, lane, ra);
#pragma unroll
  for (int u = 0; u < T::nu; ++u) {
    float ws = 1.0f;
    if constexpr (C::w_block) {
      // A unit's 64 columns lie in one 128-row block of the weights.
      const int nb = (tile.n_tile * C::bn + wn * T::wtn + u * 64) / 128;
      ws = nb < C::n / 128
               ? ((const float *)p.scales)[((long long)tile.e * (C::n / 128) + nb) * T::k_blocks + kb]
               : 0.0f;
    }
#pragma unroll
    for (int m = 0; m < T::mi; ++m)
#pragma unroll
      for (int j = 0; j < T::blocks; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          acc[u][m][j][c] += (float)part[u][m][j][c] * (ra[m][hm_w8_row_half<C>(c)] * ws);
          part[u][m][j][c] = 0;
        }
  }
}

// acc *= the scales constant along K: per token (A row) and per channel (weight column),
// in the standard layout (the swapped tile's sums are moved into it first).
template <class C>
__device__ __forceinline__ void hm_w8_finish(const hm_gemm_params &p, const hm_tile &tile, const int *a_row,
                                             int wm, int wn, int lane, hm_acc_t<C> &acc) {
  using T = hm_w8_traits<C>;
  float ra[T::mi][2];
#pragma unroll
  for (int m = 0; m < T::mi; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      ra[m][h] = C::a_group ? 1.0f : hm_w8_row_scale<C, false>(p, a_row, hm_w8_std_row<C>(wm, m, h, lane), 0);
  const float *ws = (const float *)p.scales + (long long)tile.e * C::n;
#pragma unroll
  for (int u = 0; u < T::nu; ++u)
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int col = tile.n_tile * C::bn + wn * T::wtn + u * 64 + j * 8 + (lane & 3) * 2;
      float w0 = T::w_factor, w1 = T::w_factor;
      if constexpr (!C::w_block && !T::fp4) {
        w0 = col < C::n ? ws[col] : 0.0f;  // N is even: col + 1 < N with col
        w1 = col < C::n ? ws[col + 1] : 0.0f;
      }
#pragma unroll
      for (int m = 0; m < T::mi; ++m)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[u][m][j][c] *= ra[m][c >> 1] * (c & 1 ? w1 : w0);
    }
}

// The MMAs of k-tile kt, staged at st, into part (scaled into acc where the scales change
// along K) or, for mxfp4 and nvfp4, straight into acc.
template <class C>
__device__ __forceinline__ void hm_w8_consume(const hm_gemm_params &p, const hm_tile &tile, int kt,
                                              const unsigned char *st, const int *a_row, int wm, int wn,
                                              int wk, int lane, hm_w8_part_t<C> &part, hm_acc_t<C> &acc) {
  using T = hm_w8_traits<C>;
  if constexpr (T::fp4) {
    float ra[T::mi][2];
    hm_w8_k_row_scales<C>(p, a_row, kt * C::bk / 128, wm, lane, ra);
    hm_w4_fp4_stage<C>(st, wm, wn, wk, lane, ra, acc);
  } else {
    hm_w8_compute_stage<C>(st, wm, wn, wk, lane, part);
    if constexpr (T::k_scaled) hm_w8_fold<C>(p, tile, kt * C::bk / 128, a_row, wm, wn, lane, part, acc);
  }
}

// Issues stages [S0, S1) of the first stages - 1 k-tiles of [kb, ke), a commit group each,
// all copies or the part PART names (as hm_mainloop_fill).
template <class C, int PART = HM_LOAD_ALL, int S0 = 0, int S1 = C::stages - 1>
__device__ __forceinline__ void hm_w8_fill(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke,
                                           unsigned char *smem, const int *a_row) {
  hm_cp_async_fill<S0, S1>(ke - kb, [&](int s) {
    hm_w8_load_stage<C, PART>(p, tile, kb + s, smem + s * hm_w8_traits<C>::stage_bytes, a_row);
  });
}

// Accumulates k-tiles [kb, ke) of a tile into acc (zeroed first), scales applied, their
// first stages in flight (hm_w8_fill). Leaves the pipeline drained and the CTA
// synchronized, so shared memory may be reused on return.
template <class C>
__device__ void hm_w8_mainloop(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke,
                               unsigned char *smem, const int *a_row, int wm, int wn, int wk, int lane,
                               hm_acc_t<C> &acc, hm_trace_clock &tr) {
  using T = hm_w8_traits<C>;
  hm_acc_zero<C>(acc);
  hm_w8_part_t<C> part;
#pragma unroll
  for (int u = 0; u < T::nu; ++u)
#pragma unroll
    for (int m = 0; m < T::mi; ++m)
#pragma unroll
      for (int j = 0; j < T::blocks; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) part[u][m][j][c] = 0;
  const int count = ke - kb;
  for (int i = 0; i < count; ++i) {
    tr.awaiting();
    hm_cp_async_wait<C::stages - 2>();
    __syncthreads();
    tr.arrived(i);
    const int next = i + C::stages - 1;
    if (next < count)
      hm_w8_load_stage<C>(p, tile, kb + next, smem + (next % C::stages) * T::stage_bytes, a_row);
    hm_cp_async_commit();
    hm_w8_consume<C>(p, tile, kb + i, smem + (i % C::stages) * T::stage_bytes, a_row, wm, wn, wk, lane, part,
                     acc);
  }
  tr.looped();
  if constexpr (!T::k_scaled && !T::fp4) hm_w8_fold<C>(p, tile, 0, a_row, wm, wn, lane, part, acc);
  if constexpr (T::swap_ab)
#pragma unroll
    for (int u = 0; u < T::nu; ++u) hm_swap_unit_to_std(acc[u][0], lane);
  hm_w8_finish<C>(p, tile, a_row, wm, wn, lane, acc);
  hm_cp_async_wait<0>();
  __syncthreads();
}

template <class C>
struct hm_w8_loop {
  using traits = hm_w8_traits<C>;
  using smem = typename traits::smem;
  static constexpr bool fill_before_wait = traits::fill_before_wait;
  template <int PART = HM_LOAD_ALL, int S0 = 0, int S1 = C::stages - 1>
  __device__ static __forceinline__ void fill(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke,
                                              unsigned char *smem, const int *a_row) {
    hm_w8_fill<C, PART, S0, S1>(p, tile, kb, ke, smem, a_row);
  }
  __device__ static __forceinline__ void run(const hm_gemm_params &p, const hm_tile &tile, int kb, int ke,
                                             unsigned char *smem, const int *a_row, int wm, int wn, int wk,
                                             int lane, hm_acc_t<C> &acc, hm_trace_clock &tr) {
    hm_w8_mainloop<C>(p, tile, kb, ke, smem, a_row, wm, wn, wk, lane, acc, tr);
  }
};

template <class C>
__device__ __forceinline__ void hm_w8_run(const hm_gemm_params &p, hm_trace_clock &tr) {
  hm_gemm_run<C, hm_w8_loop<C>>(p, tr);
}
