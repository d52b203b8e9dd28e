/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The activation between the two expert GEMMs on the GPU: one block per row, f32 math,
 * output in the down GEMM's activation type; 8-bit outputs get absmax scales per row
 * or per 1x128 group with the rule of hm_quantize_activations (scale = absmax / qmax,
 * 1 when absmax is 0; q = round-to-nearest-even(x / scale), saturated). The identity
 * function quantizes x for 8-bit paths.
 * Also the bf16 / f16 / e4m3 conversions and bf16 loads the MoE kernels share (round to
 * nearest even).
 * Specialized by HM_ACT_FN, HM_ACT_WIDTH, HM_ACT_OUT and HM_ACT_SCALE (values below).
 */
#ifndef HM_MOE_ACT_CUH
#define HM_MOE_ACT_CUH

#define HM_ACT_FN_SILU_MUL 0
#define HM_ACT_FN_GELU_MUL 1
#define HM_ACT_FN_RELU2 2
#define HM_ACT_FN_IDENTITY 3
#define HM_ACT_OUT_BF16 0
#define HM_ACT_OUT_F16 1
#define HM_ACT_OUT_E4M3 2
#define HM_ACT_OUT_I8 3
#define HM_ACT_SCALE_NONE_ 0
#define HM_ACT_SCALE_TOKEN_ 1
#define HM_ACT_SCALE_GROUP_ 2
#define HM_ACT_THREADS 256
#define HM_ACT_VEC 8

struct hm_moe_act_params {
  const int *row_of;           /* item -> row, -1 skipped; NULL: item is the row */
  const unsigned short *in;    /* bf16 rows of in_stride elements: gate, then up */
  void *out;                   /* rows of WIDTH elements of the output type */
  float *out_scale;            /* rows of 1 or ceil(WIDTH / 128) scales (8-bit outputs) */
  long long in_stride;
  long long items;
};

#ifdef __CUDACC__

__device__ __forceinline__ float hm_bf16_to_f32(unsigned short h) { return __uint_as_float((unsigned)h << 16); }

__device__ __forceinline__ unsigned short hm_f32_to_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}

__device__ __forceinline__ unsigned short hm_f32_to_f16(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

/* Eight bf16 from a 16-byte aligned address; element 2j is the low half of word j. */
__device__ __forceinline__ void hm_load_bf16x8(const unsigned short *src, float *out) {
  const uint4 q = *reinterpret_cast<const uint4 *>(src);
  const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int j = 0; j < 4; j++) {
    out[2 * j] = __uint_as_float(w[j] << 16);
    out[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
  }
}

/* OCP e4m3 ("fn"): no infinities, saturates to +-448, NaN is S.1111.111. */
__device__ __forceinline__ unsigned char hm_f32_to_e4m3(float f) {
  const unsigned u = __float_as_uint(f);
  const unsigned sign = (u >> 24) & 0x80u;
  const float a = fabsf(f);
  if (a != a) return (unsigned char)(sign | 0x7fu);
  if (a >= 448.0f) return (unsigned char)(sign | 0x7eu);
  if (a < 0.015625f) /* subnormal: multiples of 2^-9; 8 of them is the smallest normal */
    return (unsigned char)(sign | (unsigned)__float2int_rn(a * 512.0f));
  const unsigned ua = __float_as_uint(a);
  int exponent = (int)(ua >> 23) - 127;
  const float frac = __uint_as_float((ua & 0x7fffffu) | 0x3f800000u) - 1.0f;
  int mant = __float2int_rn(frac * 8.0f);
  if (mant == 8) {
    mant = 0;
    exponent++;
  }
  unsigned code = ((unsigned)(exponent + 7) << 3) | (unsigned)mant;
  return (unsigned char)(sign | (code > 0x7eu ? 0x7eu : code));
}

#endif

#if defined(__CUDACC__) && defined(HM_ACT_WIDTH)

#define HM_ACT_GATED (HM_ACT_FN == HM_ACT_FN_SILU_MUL || HM_ACT_FN == HM_ACT_FN_GELU_MUL)
#define HM_ACT_GROUPS ((HM_ACT_WIDTH + 127) / 128)

__device__ __forceinline__ float hm_act_fn(float g, float u) {
#if HM_ACT_FN == HM_ACT_FN_SILU_MUL
  return g / (1.0f + expf(-g)) * u;
#elif HM_ACT_FN == HM_ACT_FN_GELU_MUL
  return 0.5f * g * (1.0f + erff(g * 0.70710678118654752f)) * u;
#elif HM_ACT_FN == HM_ACT_FN_RELU2
  (void)u;
  const float r = g > 0.0f ? g : 0.0f;
  return r * r;
#else
  (void)u;
  return g;
#endif
}

/* The activation of columns [c0, c0 + VEC) (0 past the width); vector: 16-byte loads allowed. */
__device__ __forceinline__ void hm_act_chunk(const unsigned short *row, int c0, bool vector, float *v) {
  float g[HM_ACT_VEC], u[HM_ACT_VEC];
  if (vector && c0 + HM_ACT_VEC <= HM_ACT_WIDTH) {
    hm_load_bf16x8(row + c0, g);
#if HM_ACT_GATED
    hm_load_bf16x8(row + HM_ACT_WIDTH + c0, u);
#else
#pragma unroll
    for (int j = 0; j < HM_ACT_VEC; j++) u[j] = 0.0f;
#endif
  } else {
#pragma unroll
    for (int j = 0; j < HM_ACT_VEC; j++) {
      const bool in = c0 + j < HM_ACT_WIDTH;
      g[j] = in ? hm_bf16_to_f32(row[c0 + j]) : 0.0f;
      u[j] = in && HM_ACT_GATED ? hm_bf16_to_f32(row[HM_ACT_WIDTH * HM_ACT_GATED + c0 + j]) : 0.0f;
    }
  }
#pragma unroll
  for (int j = 0; j < HM_ACT_VEC; j++) v[j] = c0 + j < HM_ACT_WIDTH ? hm_act_fn(g[j], u[j]) : 0.0f;
}

__device__ __forceinline__ float hm_act_absmax(const float *v) {
  float m = 0.0f;
#pragma unroll
  for (int j = 0; j < HM_ACT_VEC; j++) m = fmaxf(m, fabsf(v[j]));
  return m;
}

__device__ __forceinline__ float hm_act_scale_of(float absmax) {
  const float qmax = HM_ACT_OUT == HM_ACT_OUT_E4M3 ? 448.0f : 127.0f;
  const float s = absmax / qmax;
  return s == 0.0f ? 1.0f : s;
}

/* Output element j of a chunk, in the output type's bits. */
__device__ __forceinline__ unsigned hm_act_encode(float v, float scale) {
#if HM_ACT_OUT == HM_ACT_OUT_BF16
  (void)scale;
  return hm_f32_to_bf16(v);
#elif HM_ACT_OUT == HM_ACT_OUT_F16
  (void)scale;
  return hm_f32_to_f16(v);
#elif HM_ACT_OUT == HM_ACT_OUT_E4M3
  return hm_f32_to_e4m3(v / scale);
#else
  const int q = __float2int_rn(v / scale);
  return (unsigned)(q < -128 ? -128 : q > 127 ? 127 : q) & 0xffu;
#endif
}

/* Stores columns [c0, c0 + VEC) of a row; vector: one 16- or 8-byte store allowed. */
__device__ __forceinline__ void hm_act_store(void *out_row, int c0, bool vector, const float *v, float scale) {
  unsigned code[HM_ACT_VEC];
#pragma unroll
  for (int j = 0; j < HM_ACT_VEC; j++) code[j] = hm_act_encode(v[j], scale);
  const bool wide = HM_ACT_OUT == HM_ACT_OUT_BF16 || HM_ACT_OUT == HM_ACT_OUT_F16;
  if (vector && c0 + HM_ACT_VEC <= HM_ACT_WIDTH) {
    if (wide) {
      uint4 q = make_uint4(code[0] | code[1] << 16, code[2] | code[3] << 16, code[4] | code[5] << 16,
                           code[6] | code[7] << 16);
      reinterpret_cast<uint4 *>((unsigned short *)out_row + c0)[0] = q;
    } else {
      uint2 q = make_uint2(code[0] | code[1] << 8 | code[2] << 16 | code[3] << 24,
                           code[4] | code[5] << 8 | code[6] << 16 | code[7] << 24);
      reinterpret_cast<uint2 *>((unsigned char *)out_row + c0)[0] = q;
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < HM_ACT_VEC; j++) {
    if (c0 + j >= HM_ACT_WIDTH) break;
    if (wide) ((unsigned short *)out_row)[c0 + j] = (unsigned short)code[j];
    else ((unsigned char *)out_row)[c0 + j] = (unsigned char)code[j];
  }
}

/* Largest |activation| of the row, for per-token scales; all threads get it. */
__device__ float hm_act_row_absmax(const unsigned short *row, bool vector) {
  __shared__ float warp_max[HM_ACT_THREADS / 32];
  float m = 0.0f;
  for (int c0 = threadIdx.x * HM_ACT_VEC; c0 < HM_ACT_WIDTH; c0 += HM_ACT_THREADS * HM_ACT_VEC) {
    float v[HM_ACT_VEC];
    hm_act_chunk(row, c0, vector, v);
    m = fmaxf(m, hm_act_absmax(v));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  m = 0.0f;
#pragma unroll
  for (int w = 0; w < HM_ACT_THREADS / 32; w++) m = fmaxf(m, warp_max[w]);
  return m;
}

/*
 * Each warp takes 32 * VEC = 256 consecutive columns per pass (loop bounds are the same
 * for the whole warp, as the shuffles need); a pass of the block covers THREADS * VEC =
 * 2048 columns. The 16 lanes of a 1x128 group are consecutive lanes of one warp.
 */
extern "C" __global__ void __launch_bounds__(HM_ACT_THREADS) hm_moe_act(hm_moe_act_params p) {
  const long long item = blockIdx.x;
  if (item >= p.items) return;
  const long long row = p.row_of ? (long long)p.row_of[item] : item;
  if (row < 0) return; /* the whole block leaves */
  const unsigned short *in = p.in + row * p.in_stride;
  const int elem_bytes = HM_ACT_OUT == HM_ACT_OUT_BF16 || HM_ACT_OUT == HM_ACT_OUT_F16 ? 2 : 1;
  void *out = (unsigned char *)p.out + row * (long long)HM_ACT_WIDTH * elem_bytes;
  /* 16-byte loads of gate and up and one store per chunk need aligned rows. */
  const bool vector = HM_ACT_WIDTH % HM_ACT_VEC == 0 && p.in_stride % HM_ACT_VEC == 0 &&
                      (((unsigned long long)p.in | (unsigned long long)p.out) & 15) == 0;
#if HM_ACT_SCALE == HM_ACT_SCALE_TOKEN_
  const float token_scale = hm_act_scale_of(hm_act_row_absmax(in, vector));
  if (threadIdx.x == 0) p.out_scale[row] = token_scale;
#endif
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int base = warp * 32 * HM_ACT_VEC; base < HM_ACT_WIDTH; base += HM_ACT_THREADS * HM_ACT_VEC) {
    const int c0 = base + lane * HM_ACT_VEC;
    float v[HM_ACT_VEC];
    hm_act_chunk(in, c0, vector, v);
    float scale = 1.0f;
#if HM_ACT_SCALE == HM_ACT_SCALE_TOKEN_
    scale = token_scale;
#elif HM_ACT_SCALE == HM_ACT_SCALE_GROUP_
    float m = hm_act_absmax(v);
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off, 16));
    scale = hm_act_scale_of(m);
    if ((lane & 15) == 0 && c0 < HM_ACT_WIDTH) p.out_scale[row * HM_ACT_GROUPS + c0 / 128] = scale;
#endif
    hm_act_store(out, c0, vector, v, scale);
  }
}

#endif
#endif
