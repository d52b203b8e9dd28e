// SPDX-License-Identifier: Apache-2.0
// Repacks canonical weights (DESIGN.md) into the layout the GEMM mainloop reads
// (hm_dequant.cuh): codes into per-lane fragment units, scales into the activation type
// at [E][G][N/64][g][j], zero points into bytes at the same positions. One kernel with
// three parts so that a layer compiles one module; each part is a separate launch.
#pragma once

#include "hm_dequant.cuh"

struct hm_transform_params {
  const hm_u32 *qweight;  // (E, N, row_words) codes, K-contiguous, LSB first
  const void *scales;     // (E, N, G) group or (E, N) channel, in the scale type
  const hm_u32 *zeros;    // (E, G, zero_words) codes packed along N
  hm_u32 *out_weight;     // (E, N/64, K/16, unit)
  void *out_scales;       // (E, G, N/64, 64) activation type
  unsigned char *out_zeros;  // (E, G, N/64, 64)
  long long experts;
  int n, k, groups;
  int row_words, zero_words;
  int part;               // 0 weights, 1 scales, 2 zero points
};

enum { HM_SCALE_IN_F16 = 0, HM_SCALE_IN_BF16 = 1, HM_SCALE_IN_F32 = 2 };

// Code `index` of a packed LSB-first row; codes may straddle two words.
template <int B>
__host__ __device__ __forceinline__ hm_u32 hm_code_at(const hm_u32 *row, long long index) {
  const long long bit = index * B;
  const int sh = (int)(bit & 31);
  hm_u32 v = row[bit >> 5] >> sh;
  if (sh + B > 32) v |= row[(bit >> 5) + 1] << (32 - sh);
  return v & hm_wlayout<B>::mask1;
}

// One thread per (expert, unit column, k16, lane): the lane's words of one unit.
template <int B, bool SIGNED>
__host__ __device__ __forceinline__ void hm_transform_weight_lane(const hm_transform_params &p, long long idx) {
  using L = hm_wlayout<B>;
  const int n_units = (p.n + 63) / 64, k16s = (p.k + 15) / 16;
  const int lane = (int)(idx % 32), k16 = (int)(idx / 32 % k16s);
  const long long unit_e = idx / 32 / k16s;  // e * n_units + unit
  const int unit = (int)(unit_e % n_units);
  const long long e = unit_e / n_units;
  hm_u32 w[B];
#pragma unroll
  for (int i = 0; i < B; ++i) w[i] = 0;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int ps = 0; ps < 16; ++ps) {
    const int n = unit * 64 + (ps >> 1) * 8 + g;
    const int k = k16 * 16 + 2 * t + 8 * (ps & 1);
    hm_u32 lo = 0, hi = 0;
    if (n < p.n) {
      const hm_u32 *row = p.qweight + (e * p.n + n) * p.row_words;
      if (k < p.k) lo = hm_code_at<B>(row, k);
      if (k + 1 < p.k) hi = hm_code_at<B>(row, k + 1);
    }
    if (SIGNED) {  // two's complement -> offset binary; the kernel subtracts 2^(B-1)
      lo ^= 1u << (B - 1);
      hi ^= 1u << (B - 1);
    }
    hm_place_pair<B>(w, ps, lo, hi);
  }
  hm_u32 *dst = p.out_weight + ((unit_e * k16s) + k16) * L::unit_words;
#pragma unroll
  for (int i = 0; i < B; ++i) dst[L::offset(lane, i)] = w[i];
}

template <int SCALE_IN>
__device__ __forceinline__ float hm_scale_in(const void *scales, long long i) {
  if constexpr (SCALE_IN == HM_SCALE_IN_F32) return ((const float *)scales)[i];
  return hm_h_to_f32<SCALE_IN == HM_SCALE_IN_BF16>(((const unsigned short *)scales)[i]);
}

// One thread per output position (e, g, unit, lg, j) <- column unit*64 + j*8 + lg.
template <int B, int SCALE_IN, bool ACT_BF16>
__device__ __forceinline__ void hm_transform_group_data(const hm_transform_params &p, long long idx) {
  const int n_units = (p.n + 63) / 64;
  const int pos = (int)(idx % 64);
  const long long eg_unit = idx / 64;
  const int unit = (int)(eg_unit % n_units);
  const long long eg = eg_unit / n_units;  // e * groups + g
  const int g = (int)(eg % p.groups);
  const long long e = eg / p.groups;
  const int n = unit * 64 + (pos & 7) * 8 + (pos >> 3);
  if (p.part == 1) {
    float s = n < p.n ? hm_scale_in<SCALE_IN>(p.scales, (e * p.n + n) * p.groups + g) : 0.0f;
    ((unsigned short *)p.out_scales)[idx] = (unsigned short)(hm_h2_from_f32<ACT_BF16>(s, 0.0f) & 0xffffu);
  } else {
    hm_u32 z = n < p.n ? hm_code_at<B>(p.zeros + eg * p.zero_words, n) : 0;
    p.out_zeros[idx] = (unsigned char)z;
  }
}

template <int B, bool SIGNED, int SCALE_IN, bool ACT_BF16>
__device__ __forceinline__ void hm_transform_run(const hm_transform_params &p) {
  const int n_units = (p.n + 63) / 64, k16s = (p.k + 15) / 16;
  const long long total =
      p.part == 0 ? p.experts * n_units * k16s * 32 : p.experts * p.groups * n_units * 64;
  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (long long)gridDim.x * blockDim.x) {
    if (p.part == 0)
      hm_transform_weight_lane<B, SIGNED>(p, idx);
    else if constexpr (B < 16)
      hm_transform_group_data<B, SCALE_IN, ACT_BF16>(p, idx);
  }
}
