// SPDX-License-Identifier: Apache-2.0
// W4A8 codes: how 4-bit weights sit in the words of a W4A8 unit and widen to the 8-bit
// B fragments of mma.sync m16n8k32 (hm_mma8.cuh). A word holds one fragment pair of one
// column: b0 = codes of k 4t..4t+3, b1 = codes of k 16+4t..16+4t+3, byte i of the word
// carrying the i-th code of each. Plain C as well as CUDA, so that host tests check it.
//
// int4: byte = b0 code << 4 | b1 code. The high nibble as a signed byte is 16 q exactly
// (-128..112), so b0 = w & 0xf0f0f0f0 and b1 = (w << 4) & 0xf0f0f0f0 feed the s8 MMA with
// no correction term (offset binary with 8 sum(a) would cost a sum of A), and the 1/16
// goes into the f32 channel scale, exactly. The s32 sums grow by 16: 128 * 127 * K stays
// below 2^31 up to K = 132104.
//
// e2m1 (sign s, exponent e1 e0, mantissa m): placed as the e4m3 byte s 0 0 e1 e0 m 0 0,
// whose value is the e2m1 value times 2^-6 for all 16 codes, the subnormal 0.5 and -0
// included (an e2m1 exponent field x is the e4m3 field x, bias 1 against 7; e2m1 x = 0 is
// subnormal with mantissa m/2, e4m3 field 0 is subnormal with mantissa 4m/8 times 2^-6).
// The b0 code takes bits 7 4 3 2 of its byte, the b1 code bits 5 (s) 6 (e1) 1 (e0) 0 (m):
// b0 = w & 0x9c9c9c9c, b1 = (w << 2) & 0x8c8c8c8c | (w >> 2) & 0x10101010, five
// operations a word where a 16-entry prmt table takes ten. The 2^6 goes into the f32
// scales, exactly. mxfp4 and nvfp4 share these codes; they differ in their scales only.
//
// f16 codes (e2m1 only, the kernel's w4_f16): sm_90 has no 8-bit mma.sync, and ptxas
// unpacks each fp8 operand register into two f16 ones (F2FP, a conversion unit op) before
// an f16 MMA. This layout lets the kernel build those f16 operands itself with integer
// ops: the f16 with sign s at bit 15 and e1 e0 m at bits 11..9 is the e2m1 value times
// 2^-14 for all 16 codes (f16 exponent field e1e0, bias 15 against 1; field 0 is subnormal
// with mantissa m/2, as e2m1's), and the 2^14 goes into the f32 scales. The word's f16
// pair p (p = 0..3) holds in its half h the code of lane p of half h: magnitude (e1 e0 m)
// at bits 9-3p..11-3p of the half, sign at bit 15-p. So pair p is the word shifted left
// by 3p under the magnitude mask and by p under the sign mask: pair 0 one AND, twelve
// operations a word in all (nibbles take fifteen). Pairs 0 and 1 carry b0's codes 0, 1
// and 2, 3 (k 4t..4t+3), pairs 2 and 3 b1's: pair 2q + i is the k16 half q's f16 register
// i of an m16n8k16 B fragment, k 2t, 2t+1 of it standing for k 4t+2i, 4t+2i+1, as the
// activations' converted registers do (gemm_w8a8_kernel.cuh).
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define HM_W4_FN __host__ __device__ __forceinline__
#else
#define HM_W4_FN static inline
#endif

// Weight formats of the W4A8 kernel (the generated config's w4 constant).
#define HM_W4_NONE 0
#define HM_W4_INT4 1
#define HM_W4_E2M1 2   // mxfp4: e8m0 scales per 32 along K
#define HM_W4_NVFP4 3  // e4m3 scales per 16 along K, an f32 global scale

// Scale blocks of a unit at one k32 step, 64 bytes each, one byte a column
// (transform_w4a8.cuh): one for mxfp4 (e8m0 per 32 along K), one a K half for nvfp4 (e4m3
// per 16); none for int4, whose scales are per channel.
HM_W4_FN int hm_w4_scale_parts(int fmt) {
  return fmt == HM_W4_NVFP4 ? 2 : (fmt == HM_W4_E2M1 ? 1 : 0);
}

// Places the b0 code lo and the b1 code hi (4-bit each) into one byte.
HM_W4_FN unsigned hm_w4_pack_byte(int fmt, unsigned lo, unsigned hi) {
  lo &= 0xfu, hi &= 0xfu;
  if (fmt == HM_W4_INT4) return lo << 4 | hi;
  const unsigned a = (lo & 8u) << 4 | (lo & 7u) << 2;
  const unsigned b = (hi & 8u) << 2 | (hi & 4u) << 4 | (hi & 3u);
  return a | b;
}

// The word of a fragment pair: lo16 and hi16 hold the four b0 and b1 codes, lowest k in
// the lowest nibble (the canonical LSB-first order).
HM_W4_FN unsigned hm_w4_pack_word(int fmt, unsigned lo16, unsigned hi16) {
  unsigned w = 0;
  for (int i = 0; i < 4; ++i) w |= hm_w4_pack_byte(fmt, lo16 >> (4 * i), hi16 >> (4 * i)) << (8 * i);
  return w;
}

// The f16-codes word of four b0 codes (lo16) and four b1 codes (hi16), lowest k in the
// lowest nibble: code c of pair p = 2q + i, half h is nibble 2i + h of q's field.
HM_W4_FN unsigned hm_w4_pack_word_f16(unsigned lo16, unsigned hi16) {
  unsigned w = 0;
  for (int p = 0; p < 4; ++p)
    for (int h = 0; h < 2; ++h) {
      const unsigned c = ((p < 2 ? lo16 : hi16) >> (4 * (2 * (p & 1) + h))) & 0xfu;
      w |= ((c >> 3) << (15 - p) | (c & 7u) << (9 - 3 * p)) << (16 * h);
    }
  return w;
}

// The four f16 pairs of an f16-codes word (above).
HM_W4_FN void hm_w4_widen_e2m1_f16(unsigned w, unsigned f[4]) {
  const unsigned w1 = w << 1, w3 = w << 3;
  f[0] = w & 0x8e008e00u;
  f[1] = (w3 & 0x0e000e00u) | (w1 & 0x80008000u);
  f[2] = ((w << 6) & 0x0e000e00u) | ((w << 2) & 0x80008000u);
  f[3] = ((w << 9) & 0x0e000e00u) | (w3 & 0x80008000u);
}

HM_W4_FN void hm_w4_widen_i4(unsigned w, unsigned *b0, unsigned *b1) {
  *b0 = w & 0xf0f0f0f0u;
  *b1 = (w << 4) & 0xf0f0f0f0u;
}

HM_W4_FN void hm_w4_widen_e2m1(unsigned w, unsigned *b0, unsigned *b1) {
  *b0 = w & 0x9c9c9c9cu;
  *b1 = ((w << 2) & 0x8c8c8c8cu) | ((w >> 2) & 0x10101010u);
}

// The f32 bits of 2^(x - 126) for an e8m0 code x (2^(x - 127)): twice the scale, so that
// code 0 (2^-127, an f32 subnormal) is a normal number too; 2^(x - 126) overflows only for
// x = 254, where six times the scale already exceeds f32. Callers fold the 1/2 elsewhere.
HM_W4_FN unsigned hm_w4_e8m0_bits_x2(unsigned x) {
  return x * (1u << 23) + (1u << 23);
}
