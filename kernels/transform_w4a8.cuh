// SPDX-License-Identifier: Apache-2.0
// Repacks canonical 4-bit weights (int4 two's complement or e2m1 codes, K-contiguous,
// LSB-first, eight a word) into the units the W8A8 kernel reads for W4A8
// (gemm_w8a8_kernel.cuh): 32 (k) x 64 (n) codes, 1024 bytes, lane l (g = l / 4, t = l % 4)
// holding in word j the fragment pair of column j*8+g, k 4t..4t+3 and 16+4t..16+4t+3, as
// hm_w4_pack_word places it (or, for f16 codes, hm_w4_pack_word_f16: hm_w4a8_codes.cuh),
// in hm_wlayout<8> word order (two 16-byte loads a lane). Scales: int4 per channel into f32
// divided by 16 (its codes widen to 16 q); mxfp4 e8m0 bytes stay bytes, permuted to
// (E, N/64, K/32) blocks of 64 where lane t of a quad finds its 16 (columns j*8 + 2t,
// j*8 + 2t + 1 for j = 0..7) at byte 16 t; nvfp4 e4m3 bytes the same, two such blocks of
// 64 a unit and k32 step, one per K half of 16.
#pragma once

#include "hm_w4a8_codes.cuh"
#include "transform_weights.cuh"

struct hm_w4_transform_params {
  const hm_u32 *qweight;  // (E, N, K/8)
  const void *scales;     // int4: (E, N) in the scale type; mxfp4: (E, N, K/32) e8m0 bytes;
                          // nvfp4: (E, N, K/16) e4m3 bytes
  hm_u32 *out_weight;     // (E, N/64, K/32, unit)
  void *out_scales;       // int4: f32 (E, N); mxfp4: bytes (E, N/64, K/32, 64); nvfp4: (.., 2, 64)
  long long experts;
  int n, k;
  int part;  // 0 weights, 1 scales
};

// Four codes of row n from k (a multiple of 4), 0 past K (a multiple of 16, so all four
// are inside K or none is).
__device__ __forceinline__ hm_u32 hm_w4_codes4(const hm_w4_transform_params &p, long long e, int n, int k) {
  if (n >= p.n || k >= p.k) return 0u;
  const hm_u32 word = p.qweight[(e * p.n + n) * (p.k / 8) + k / 8];
  return (word >> (4 * (k % 8))) & 0xffffu;
}

// One thread per (expert, unit column, k32, lane): the lane's 8 words of one unit, placed
// for fp8 operands or, F16, as the f16 codes.
template <int FMT, bool F16>
__device__ __forceinline__ void hm_w4_transform_lane(const hm_w4_transform_params &p, long long idx) {
  using L = hm_wlayout<8>;
  const int n_units = (p.n + 63) / 64, k32s = (p.k + 31) / 32;
  const int lane = (int)(idx % 32), k32 = (int)(idx / 32 % k32s);
  const long long unit_e = idx / 32 / k32s;  // e * n_units + unit
  const int unit = (int)(unit_e % n_units);
  const long long e = unit_e / n_units;
  const int g = lane >> 2, t = lane & 3;
  hm_u32 *dst = p.out_weight + (unit_e * k32s + k32) * L::unit_words;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int n = unit * 64 + j * 8 + g, k = k32 * 32 + 4 * t;
    const hm_u32 lo = hm_w4_codes4(p, e, n, k), hi = hm_w4_codes4(p, e, n, k + 16);
    dst[L::offset(lane, j)] = F16 ? hm_w4_pack_word_f16(lo, hi) : hm_w4_pack_word(FMT, lo, hi);
  }
}

// One thread per output byte (expert, unit column, k32, scale block, byte) of an e2m1
// format's scales: a block per scale group along the k32 step (hm_w4_scale_parts). The
// padding (columns past N; nvfp4: the second half of a last k32 step past K) gets 1.0:
// e8m0 127, e4m3 0x38.
template <int FMT>
__device__ __forceinline__ void hm_w4_transform_fp4_scale(const hm_w4_transform_params &p, long long idx) {
  const int parts = hm_w4_scale_parts(FMT), bytes = 64 * parts;
  constexpr unsigned char one = FMT == HM_W4_NVFP4 ? 0x38 : 127;
  const int n_units = (p.n + 63) / 64, k32s = (p.k + 31) / 32, groups = p.k / (32 / parts);
  const int pos = (int)(idx % bytes), k32 = (int)(idx / bytes % k32s);
  const long long unit_e = idx / bytes / k32s;
  const int unit = (int)(unit_e % n_units);
  const long long e = unit_e / n_units;
  const int part = pos / 64, t = pos % 64 / 16, j = pos % 16 / 2, h = pos % 2;
  const int n = unit * 64 + j * 8 + 2 * t + h, g = parts * k32 + part;
  const unsigned char *in = (const unsigned char *)p.scales;
  ((unsigned char *)p.out_scales)[idx] = n < p.n && g < groups ? in[(e * p.n + n) * groups + g] : one;
}

template <int FMT, int SCALE_IN, bool F16>
__device__ __forceinline__ void hm_w4_transform_run(const hm_w4_transform_params &p) {
  const int n_units = (p.n + 63) / 64, k32s = (p.k + 31) / 32;
  const long long units = p.experts * n_units * k32s;
  long long total = units * 32;
  if (p.part == 1) total = FMT == HM_W4_INT4 ? p.experts * p.n : units * 64 * hm_w4_scale_parts(FMT);
  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (long long)gridDim.x * blockDim.x) {
    if (p.part == 0)
      hm_w4_transform_lane<FMT, F16>(p, idx);
    else if constexpr (FMT != HM_W4_INT4)
      hm_w4_transform_fp4_scale<FMT>(p, idx);
    else
      ((float *)p.out_scales)[idx] = hm_scale_in<SCALE_IN>(p.scales, idx) * 0.0625f;
  }
}
