// SPDX-License-Identifier: Apache-2.0
// Repacks canonical 8-bit weights (int8 or fp8 e4m3 codes, K-contiguous) into the units the
// W8A8 kernels read (hm_w8_units.cuh): 32 (k) x 64 (n) bytes, lane l (g = l / 4, t = l % 4)
// holding the m16n8k32 B fragments of the eight n8 blocks j, word 2j = k 4t..4t+3 and word
// 2j+1 = k 16+4t..16+4t+3 of column j*8+g, word w of every lane together (a core matrix).
// Codes stay as they are: int8 is two's complement for the s8 MMA, e4m3 raw. Scales become
// f32 in their canonical order, (E, N) per channel or (E, N/128, K/128) per block: the
// kernel reads them from global memory once a segment or once a K block.
#pragma once

#include "hm_w8_units.cuh"
#include "transform_weights.cuh"

struct hm_w8_transform_params {
  const hm_u32 *qweight;  // (E, N, K/4) four codes a word, lower k in the lower byte
  const void *scales;     // (E, scales_per_expert) in the scale type
  hm_u32 *out_weight;     // (E, N/64, K/32, unit)
  float *out_scales;      // (E, scales_per_expert)
  long long experts;
  int n, k, scales_per_expert;
  int part;  // 0 weights, 1 scales
};

// One thread per (expert, unit column, k32, lane): the lane's 16 words of one unit. K is a
// multiple of 16, so a word of four codes is all inside K or all past it.
__device__ __forceinline__ void hm_w8_transform_lane(const hm_w8_transform_params &p, long long idx) {
  const int n_units = (p.n + 63) / 64, k32s = (p.k + 31) / 32, row_words = p.k / 4;
  const int lane = (int)(idx % 32), k32 = (int)(idx / 32 % k32s);
  const long long unit_e = idx / 32 / k32s;  // e * n_units + unit
  const int unit = (int)(unit_e % n_units);
  const long long e = unit_e / n_units;
  const int g = lane >> 2, t = lane & 3;
  hm_u32 *dst = p.out_weight + (unit_e * k32s + k32) * (hm_w8_unit_bytes / 4);
#pragma unroll
  for (int w = 0; w < 16; ++w) {
    const int n = unit * 64 + (w >> 1) * 8 + g;
    const int k = k32 * 32 + 4 * t + 16 * (w & 1);
    dst[hm_w8_unit_offset(lane, w) / 4] = n < p.n && k < p.k ? p.qweight[(e * p.n + n) * row_words + k / 4] : 0u;
  }
}

template <int SCALE_IN>
__device__ __forceinline__ void hm_w8_transform_run(const hm_w8_transform_params &p) {
  const int n_units = (p.n + 63) / 64, k32s = (p.k + 31) / 32;
  const long long total = p.part == 0 ? p.experts * n_units * k32s * 32 : p.experts * p.scales_per_expert;
  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (long long)gridDim.x * blockDim.x) {
    if (p.part == 0)
      hm_w8_transform_lane(p, idx);
    else
      p.out_scales[idx] = hm_scale_in<SCALE_IN>(p.scales, idx);
  }
}
