// SPDX-License-Identifier: Apache-2.0
// Row moves between the comm exchanges' messages and the expert layout (C side:
// comm/rows_cuda.c; reference: comm/rows_host.c). A message row is a payload row, then
// for fp8 its scale row (kernels/comm_rows.cuh packs it so); the layout keeps them apart.
#pragma once

// One block a received row: out[dst[i]] = its payload words, out_scale[dst[i]] its scale words.
extern "C" __global__ void hm_comm_scatter_rows(const unsigned *in, const int *dst, long long n, int row_words,
                                                unsigned *out, int scale_words, unsigned *out_scale) {
  long long i = blockIdx.x;
  if (i >= n) return;
  long long d = dst[i];
  const unsigned *from = in + i * (row_words + scale_words);
  unsigned *to = out + d * row_words;
  if (scale_words == 0 && (row_words & 3) == 0) {
    // Whole 16-byte words: rows start 16-byte aligned when they hold a multiple of 4 words.
    const uint4 *from4 = (const uint4 *)from;
    uint4 *to4 = (uint4 *)to;
    for (int v = threadIdx.x; v < row_words / 4; v += blockDim.x) to4[v] = from4[v];
    return;
  }
  for (int v = threadIdx.x; v < row_words; v += blockDim.x) to[v] = from[v];
  for (int c = threadIdx.x; c < scale_words; c += blockDim.x) out_scale[d * scale_words + c] = from[row_words + c];
}

// One block a returned row: out[i] = in[src[i]], rows of 16-byte words.
extern "C" __global__ void hm_comm_gather_rows(const uint4 *in, const int *src, long long n, long long row_vecs,
                                               uint4 *out) {
  long long i = blockIdx.x;
  if (i >= n) return;
  const uint4 *from = in + (long long)src[i] * row_vecs;
  uint4 *to = out + i * row_vecs;
  for (long long v = threadIdx.x; v < row_vecs; v += blockDim.x) to[v] = from[v];
}
