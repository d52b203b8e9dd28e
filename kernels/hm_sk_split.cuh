// SPDX-License-Identifier: Apache-2.0
// How a persistent launch shares its tiles among CTAs: whole tiles in data-parallel waves,
// then the k-iterations of the rest in equal Stream-K ranges. Plain C as well as CUDA, so
// that the kernels (gemm_kernel.cuh, gemm_wgmma_kernel.cuh) and the cost model
// (heuristics/choose_cost.c) split the same way and a CPU test checks the rules.
#ifndef HM_SK_SPLIT_CUH
#define HM_SK_SPLIT_CUH

#if defined(__CUDACC__)
#define HM_SK_FN __host__ __device__ __forceinline__
#else
#define HM_SK_FN static inline
#endif

// Tiles run whole, `grid` at a time. Stream-K keeps the last wave or two for splitting,
// so that every CTA streams until the end; without it every tile runs whole.
HM_SK_FN int hm_sk_dp_tiles(int tiles, int grid, int stream_k) {
  if (!stream_k || tiles % grid == 0) return tiles;
  return tiles < grid ? 0 : (tiles / grid - 1) * grid;
}

// CTAs that share `tiles` Stream-K tiles of k_iters iterations, from up to `grid`, at
// least min_iters each. A CTA whose range crosses a tile boundary refills its pipeline and
// publishes a partial at each crossing; where the tiles fit the grid, a multiple of them
// whose share of a tile divides k_iters keeps every CTA inside one tile, which pays for
// up to an eighth of the CTAs left idle (dense decode: 32 tiles on 132 SMs run on 128,
// 8 % faster on the H200). None where nothing is split. A data-parallel kernel's min_iters
// is 0 and counts as 1: in a kernel it is a compile-time constant, and a division by a
// constant 0 is undefined. nvcc folded it (the count became the grid), and the division
// by zero tiles after it sent the loop below counting down through up to 2^31 divisors: a
// decode prefetch's spare CTAs ran minutes in it (docs/PERF.md, thirty-seventh session).
HM_SK_FN int hm_sk_ctas(int tiles, int k_iters, int grid, int min_iters) {
  if (tiles < 1 || k_iters < 1) return 0;
  const int cap = tiles * k_iters / (min_iters < 1 ? 1 : min_iters);
  const int ctas = cap < 1 ? 1 : (cap < grid ? cap : grid);
  if (tiles > ctas) return ctas;
  int s = ctas / tiles;
  while (k_iters % s != 0) --s;
  return 8 * tiles * s >= 7 * ctas ? tiles * s : ctas;
}

// Iterations [begin(c), begin(c+1)) of the split tiles go to CTA c, the first iters % ctas
// CTAs one more than the rest. In 32 bits: the split tiles are under two waves of the grid
// (hm_sk_dp_tiles), so iters stays far below 2^31, and on the GPU a 64-bit division is a
// software routine of some hundred dependent instructions, which every CTA ran on its way to
// its first stage and again in each fix-up.
HM_SK_FN int hm_sk_begin(int c, int iters, int ctas) {
  const int q = iters / ctas, r = iters % ctas;
  return c * q + (c < r ? c : r);
}

// The CTA whose range holds iteration i.
HM_SK_FN int hm_sk_owner(int i, int iters, int ctas) {
  const int q = iters / ctas, r = iters % ctas, longer = r * (q + 1);
  return i < longer ? i / (q + 1) : r + (i - longer) / q;
}

#endif
