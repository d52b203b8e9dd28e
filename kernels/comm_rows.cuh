// SPDX-License-Identifier: Apache-2.0
// Row kernels around the comm exchanges (C side: comm/rows_cuda.c; reference:
// comm/rows_host.c, which these match bit for bit): pack rows by destination with an
// optional fp8 e4m3 1x128 quantization, the top-k weighted combine, the identity expert.
// A packed fp8 row is its hidden e4m3 bytes followed by its hidden/128 f32 scales, so
// that one message carries both.
// No toolkit headers: bf16 and e4m3 are handled as bits so NVRTC needs no include path.
#pragma once

#define HM_COMM_FP8_GROUP 128
#define HM_COMM_FP8_MAX 448.0f

__device__ __forceinline__ float hm_comm_bf16_to_f32(unsigned short h) {
  return __uint_as_float((unsigned)h << 16);
}

__device__ __forceinline__ unsigned short hm_comm_f32_to_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return (unsigned short)(u >> 16);
}

__device__ __forceinline__ float hm_comm_e4m3_to_f32(unsigned char v) {
  int e = (v >> 3) & 15, m = v & 7;
  float mag;
  if (e == 15 && m == 7) mag = __uint_as_float(0x7fc00000u);
  else if (e == 0) mag = ldexpf((float)m, -9);
  else mag = ldexpf((float)(8 + m), e - 10);
  return (v & 0x80) ? -mag : mag;
}

// Two e4m3 bytes, lo first in memory; round to nearest even, saturating at 448.
__device__ __forceinline__ unsigned short hm_comm_e4m3x2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  unsigned short d;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
  return d;
#else
  __trap();
  return 0;
#endif
}

__device__ __forceinline__ float hm_comm_load(const void *base, long long i, int is_f32) {
  return is_f32 ? ((const float *)base)[i] : hm_comm_bf16_to_f32(((const unsigned short *)base)[i]);
}

__device__ __forceinline__ void hm_comm_store(void *base, long long i, float v, int is_f32) {
  if (is_f32) ((float *)base)[i] = v;
  else ((unsigned short *)base)[i] = hm_comm_f32_to_bf16(v);
}

// One block a row: out[i] = x[src[i]], 16 bytes a thread at a time (hidden % 8 == 0).
extern "C" __global__ void hm_comm_pack_bf16(const uint4 *x, const int *src, long long n, long long row_vecs,
                                             uint4 *out) {
  long long i = blockIdx.x;
  if (i >= n) return;
  const uint4 *from = x + (long long)src[i] * row_vecs;
  uint4 *to = out + i * row_vecs;
  for (long long v = threadIdx.x; v < row_vecs; v += blockDim.x) to[v] = from[v];
}

// One block a row, one warp a 128-column group: 4 columns a lane, amax over the warp.
extern "C" __global__ void hm_comm_pack_fp8(const unsigned short *x, const int *src, long long n, int hidden,
                                            unsigned char *wire) {
  long long i = blockIdx.x;
  if (i >= n) return;
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  int groups = hidden / HM_COMM_FP8_GROUP;
  const unsigned short *row = x + (long long)src[i] * hidden;
  unsigned char *to = wire + i * (hidden + groups * 4);
  unsigned *out = (unsigned *)to;
  float *scale = (float *)(to + hidden);
  for (int g = warp; g < groups; g += warps) {
    const unsigned short *xg = row + g * HM_COMM_FP8_GROUP + lane * 4;
    float v[4], amax = 0.0f;
    for (int j = 0; j < 4; j++) {
      v[j] = hm_comm_bf16_to_f32(xg[j]);
      amax = fmaxf(amax, fabsf(v[j]));
    }
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    float s = __fdiv_rn(amax, HM_COMM_FP8_MAX);
    unsigned packed = 0;
    if (s > 0.0f) {
      unsigned lo = hm_comm_e4m3x2(__fdiv_rn(v[0], s), __fdiv_rn(v[1], s));
      unsigned hi = hm_comm_e4m3x2(__fdiv_rn(v[2], s), __fdiv_rn(v[3], s));
      packed = lo | (hi << 16);
    }
    out[g * HM_COMM_FP8_GROUP / 4 + lane] = packed;
    if (lane == 0) scale[g] = s;
  }
}

// One block a token: y[t] = sum over slots of w * rows[pos], multiply and add rounded
// separately, slots in order, as the host does.
__device__ __forceinline__ void hm_comm_combine(const void *rows, const int *pos, const float *w, long long tokens,
                                                int hidden, int top_k, void *y, int is_f32) {
  long long t = blockIdx.x;
  if (t >= tokens) return;
  for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
    float acc = 0.0f;
    for (int s = 0; s < top_k; s++) {
      int p = pos[t * top_k + s];
      if (p >= 0) acc = __fadd_rn(acc, __fmul_rn(w[t * top_k + s], hm_comm_load(rows, (long long)p * hidden + c, is_f32)));
    }
    hm_comm_store(y, t * hidden + c, acc, is_f32);
  }
}

extern "C" __global__ void hm_comm_combine_bf16(const void *rows, const int *pos, const float *w, long long tokens,
                                                int hidden, int top_k, void *y) {
  hm_comm_combine(rows, pos, w, tokens, hidden, top_k, y, 0);
}

extern "C" __global__ void hm_comm_combine_f32(const void *rows, const int *pos, const float *w, long long tokens,
                                               int hidden, int top_k, void *y) {
  hm_comm_combine(rows, pos, w, tokens, hidden, top_k, y, 1);
}

// One block a row: y = x dequantized (the identity expert).
__device__ __forceinline__ void hm_comm_loopback(const void *x, const float *scale, long long n, int hidden, void *y,
                                                 int is_fp8, int is_f32) {
  long long r = blockIdx.x;
  if (r >= n) return;
  int groups = hidden / HM_COMM_FP8_GROUP;
  for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
    long long i = r * hidden + c;
    float v = is_fp8 ? __fmul_rn(hm_comm_e4m3_to_f32(((const unsigned char *)x)[i]), scale[r * groups + c / HM_COMM_FP8_GROUP])
                     : hm_comm_bf16_to_f32(((const unsigned short *)x)[i]);
    hm_comm_store(y, i, v, is_f32);
  }
}

extern "C" __global__ void hm_comm_loopback_bf16_bf16(const void *x, const float *scale, long long n, int hidden,
                                                      void *y) {
  hm_comm_loopback(x, scale, n, hidden, y, 0, 0);
}

extern "C" __global__ void hm_comm_loopback_bf16_f32(const void *x, const float *scale, long long n, int hidden,
                                                     void *y) {
  hm_comm_loopback(x, scale, n, hidden, y, 0, 1);
}

extern "C" __global__ void hm_comm_loopback_fp8_bf16(const void *x, const float *scale, long long n, int hidden,
                                                     void *y) {
  hm_comm_loopback(x, scale, n, hidden, y, 1, 0);
}

extern "C" __global__ void hm_comm_loopback_fp8_f32(const void *x, const float *scale, long long n, int hidden,
                                                    void *y) {
  hm_comm_loopback(x, scale, n, hidden, y, 1, 1);
}
