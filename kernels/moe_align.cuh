/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Token alignment on the GPU: from top-k ids to each layout's metadata, in the order of
 * the host version (moe/align_host.c) so both give identical arrays. Ids are taken in
 * tiles of 256; a row's rank inside its expert is the count of same-expert ids before
 * it: earlier tiles (a per-tile count, scanned) plus earlier ids of its own tile (warp
 * match, then the earlier warps' counts). Small inputs run in one block (fused); large
 * ones in three kernels: count per tile, scan, scatter.
 * With an appended expert (a MoE layer's shared expert run as expert E - 1), each token's
 * last of top_k slots is that expert and the ids hold only the other top_k - 1 columns.
 * Also the row permutation that copies rows of x into expert order.
 * The parameter structs are plain C so that moe/align_cuda.c shares their layout.
 * Specialized by HM_ALIGN_E (alignment) or HM_PERMUTE (permutation).
 */
#ifndef HM_MOE_ALIGN_CUH
#define HM_MOE_ALIGN_CUH

#define HM_ALIGN_THREADS 256
#define HM_ALIGN_WARPS (HM_ALIGN_THREADS / 32)
#define HM_ALIGN_INDEXED 1
#define HM_ALIGN_CONTIGUOUS 2
#define HM_ALIGN_MASKED 3

struct hm_moe_align_params {
  const int *topk_ids;   /* [n] */
  int *row_of;           /* [n] or NULL */
  int *expert_counts;    /* [E] or NULL */
  int *expert_offsets;   /* [E+1] or NULL */
  int *num_padded;       /* [1] or NULL */
  int *sorted_ids;       /* [max_padded] or NULL */
  int *expert_ids;       /* [max_blocks] or NULL */
  int *tile_counts;      /* workspace [tiles, E]: counts, then exclusive bases */
  int *work_counts;      /* workspace [E] */
  int *work_offsets;     /* workspace [E+1] */
  long long n;           /* tokens * top_k; also the sentinel */
  long long max_padded;
  long long max_blocks;
  int layout;            /* HM_ALIGN_INDEXED, _CONTIGUOUS or _MASKED */
  int block_m;
  int max_m;
  int top_k;             /* slots per token, the appended one included */
  int appended;          /* 1: slot top_k - 1 of every token is expert E - 1 */
};

struct hm_moe_permute_params {
  const int *row_of;          /* [items] destination row, -1 skipped */
  const unsigned char *src;   /* rows of row_bytes, one per token */
  unsigned char *dst;
  const unsigned char *src2;  /* a second plane (activation scales), or NULL */
  unsigned char *dst2;
  long long row_bytes;
  long long row_bytes2;
  long long items;            /* tokens * top_k */
  int top_k;
};

#if defined(__CUDACC__) && defined(HM_ALIGN_E)

__device__ __forceinline__ int hm_align_expert(const hm_moe_align_params &p, long long i) {
  if (i >= p.n) return -1;
  if (!p.appended) {
    const int e = p.topk_ids[i];
    return e >= 0 && e < HM_ALIGN_E ? e : -1;
  }
  const long long t = i / p.top_k;
  const int j = (int)(i - t * p.top_k);
  if (j == p.top_k - 1) return HM_ALIGN_E - 1;
  /* A caller's id may not name the appended expert: it is not one of theirs. */
  const int e = p.topk_ids[t * (p.top_k - 1) + j];
  return e >= 0 && e < HM_ALIGN_E - 1 ? e : -1;
}

__device__ __forceinline__ int hm_align_padded(const hm_moe_align_params &p, int count) {
  return (count + p.block_m - 1) / p.block_m * p.block_m;
}

/* The expert whose padded segment holds row q, -1 past the last segment. */
__device__ __forceinline__ int hm_align_segment(const int *offsets, long long q) {
  if (q >= offsets[HM_ALIGN_E]) return -1;
  int lo = 0, hi = HM_ALIGN_E - 1;
  /* The last expert starting at or before q: empty experts before it share its start. */
  while (lo < hi) {
    int mid = (lo + hi + 1) >> 1;
    if (offsets[mid] <= q) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* offsets[0..E] = exclusive scan of the padded counts; every thread of the block calls it. */
__device__ void hm_align_offsets(const hm_moe_align_params &p, const int *counts, int *offsets, int *warp_sums) {
  const int per = (HM_ALIGN_E + HM_ALIGN_THREADS - 1) / HM_ALIGN_THREADS;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int first = threadIdx.x * per;
  int local = 0;
  for (int j = 0; j < per; j++)
    if (first + j < HM_ALIGN_E) local += hm_align_padded(p, counts[first + j]);
  int inclusive = local;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    int v = __shfl_up_sync(0xffffffffu, inclusive, off);
    if (lane >= off) inclusive += v;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  int run = inclusive - local;
  for (int w = 0; w < warp; w++) run += warp_sums[w];
  for (int j = 0; j < per; j++) {
    if (first + j >= HM_ALIGN_E) break;
    offsets[first + j] = run;
    run += hm_align_padded(p, counts[first + j]);
  }
  if (threadIdx.x == HM_ALIGN_THREADS - 1) offsets[HM_ALIGN_E] = run;
  __syncthreads();
}

/* Counts, offsets, num_padded and per-block experts; threads first, first+stride, ... */
__device__ void hm_align_write_meta(const hm_moe_align_params &p, const int *counts, const int *offsets,
                                    long long first, long long stride) {
  for (long long e = first; e < HM_ALIGN_E; e += stride) {
    int c = counts[e];
    if (p.layout == HM_ALIGN_MASKED && c > p.max_m) c = p.max_m;
    if (p.expert_counts) p.expert_counts[e] = c;
  }
  if (p.layout == HM_ALIGN_MASKED) return;
  for (long long e = first; e <= HM_ALIGN_E; e += stride)
    if (p.expert_offsets) p.expert_offsets[e] = offsets[e];
  if (first == 0 && p.num_padded) *p.num_padded = offsets[HM_ALIGN_E];
  if (p.layout != HM_ALIGN_INDEXED || !p.expert_ids) return;
  for (long long b = first; b < p.max_blocks; b += stride) p.expert_ids[b] = hm_align_segment(offsets, b * p.block_m);
}

/* sorted_ids of padding rows (inside a segment past its count, or past the last segment). */
__device__ void hm_align_fill_padding(const hm_moe_align_params &p, const int *counts, const int *offsets,
                                      long long first, long long stride) {
  if (p.layout != HM_ALIGN_INDEXED || !p.sorted_ids) return;
  for (long long q = first; q < p.max_padded; q += stride) {
    int e = hm_align_segment(offsets, q);
    if (e < 0 || q - offsets[e] >= counts[e]) p.sorted_ids[q] = (int)p.n;
  }
}

/*
 * Rank of this thread's id among the earlier ids of its tile with the same expert.
 * warp_counts [WARPS][E] must be zero; on return it holds each warp's count per expert.
 */
__device__ int hm_align_tile_rank(int e, int *warp_counts) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned same = __match_any_sync(0xffffffffu, e);
  const int below = __popc(same & ((1u << lane) - 1u));
  if (e >= 0 && below == 0) warp_counts[warp * HM_ALIGN_E + e] = __popc(same);
  __syncthreads();
  int rank = below;
  if (e >= 0)
    for (int w = 0; w < warp; w++) rank += warp_counts[w * HM_ALIGN_E + e];
  return rank;
}

/* Places id i (expert e, rank within the expert) in its layout; returns its row. */
__device__ int hm_align_scatter(const hm_moe_align_params &p, long long i, int e, int rank,
                                const int *offsets) {
  if (i >= p.n) return -1;
  int row = -1;
  if (e >= 0 && p.layout == HM_ALIGN_MASKED) {
    if (rank < p.max_m) row = e * p.max_m + rank;
  } else if (e >= 0) {
    int pos = offsets[e] + rank;
    row = pos;
    if (p.layout == HM_ALIGN_INDEXED) {
      if (p.sorted_ids) p.sorted_ids[pos] = (int)i;
      row = (int)i;
    }
  }
  if (p.row_of) p.row_of[i] = row;
  return row;
}

__device__ void hm_align_zero(int *a, int count) {
  for (int i = threadIdx.x; i < count; i += HM_ALIGN_THREADS) a[i] = 0;
}

/*
 * One block does everything: for inputs of a few thousand ids (decode). rows, when not
 * NULL, gets row_of as well (shared memory of the calling kernel). Every thread calls it.
 */
__device__ void hm_align_in_block(const hm_moe_align_params &p, int *rows) {
  __shared__ int counts[HM_ALIGN_E], running[HM_ALIGN_E], offsets[HM_ALIGN_E + 1];
  __shared__ int warp_counts[HM_ALIGN_WARPS * HM_ALIGN_E];
  __shared__ int warp_sums[HM_ALIGN_WARPS];
  hm_align_zero(counts, HM_ALIGN_E);
  hm_align_zero(running, HM_ALIGN_E);
  __syncthreads();
  for (long long i = threadIdx.x; i < p.n; i += HM_ALIGN_THREADS) {
    int e = hm_align_expert(p, i);
    if (e >= 0) atomicAdd(&counts[e], 1);
  }
  __syncthreads();
  if (p.layout != HM_ALIGN_MASKED) hm_align_offsets(p, counts, offsets, warp_sums);
  hm_align_write_meta(p, counts, offsets, threadIdx.x, HM_ALIGN_THREADS);
  for (long long base = 0; base < p.n; base += HM_ALIGN_THREADS) {
    hm_align_zero(warp_counts, HM_ALIGN_WARPS * HM_ALIGN_E);
    __syncthreads();
    const long long i = base + threadIdx.x;
    const int e = hm_align_expert(p, i);
    int rank = hm_align_tile_rank(e, warp_counts);
    if (e >= 0) rank += running[e];
    const int row = hm_align_scatter(p, i, e, rank, offsets);
    if (rows && i < p.n) rows[i] = row;
    __syncthreads();
    for (int x = threadIdx.x; x < HM_ALIGN_E; x += HM_ALIGN_THREADS)
      for (int w = 0; w < HM_ALIGN_WARPS; w++) running[x] += warp_counts[w * HM_ALIGN_E + x];
    __syncthreads();
  }
  hm_align_fill_padding(p, counts, offsets, threadIdx.x, HM_ALIGN_THREADS);
}

extern "C" __global__ void __launch_bounds__(HM_ALIGN_THREADS) hm_moe_align_fused(hm_moe_align_params p) {
  hm_align_in_block(p, nullptr);
}

/* Large inputs, kernel 1 of 3: each block counts its tile's ids per expert. */
extern "C" __global__ void __launch_bounds__(HM_ALIGN_THREADS) hm_moe_align_count(hm_moe_align_params p) {
  __shared__ int counts[HM_ALIGN_E];
  hm_align_zero(counts, HM_ALIGN_E);
  __syncthreads();
  int e = hm_align_expert(p, (long long)blockIdx.x * HM_ALIGN_THREADS + threadIdx.x);
  if (e >= 0) atomicAdd(&counts[e], 1);
  __syncthreads();
  for (int x = threadIdx.x; x < HM_ALIGN_E; x += HM_ALIGN_THREADS)
    p.tile_counts[(long long)blockIdx.x * HM_ALIGN_E + x] = counts[x];
}

/* Kernel 2 of 3, one block: tile counts -> tile bases, totals, offsets, metadata. */
extern "C" __global__ void __launch_bounds__(HM_ALIGN_THREADS) hm_moe_align_scan(hm_moe_align_params p) {
  __shared__ int counts[HM_ALIGN_E], offsets[HM_ALIGN_E + 1];
  __shared__ int warp_sums[HM_ALIGN_WARPS];
  const long long tiles = (p.n + HM_ALIGN_THREADS - 1) / HM_ALIGN_THREADS;
  for (int e = threadIdx.x; e < HM_ALIGN_E; e += HM_ALIGN_THREADS) {
    int run = 0;
#pragma unroll 8
    for (long long t = 0; t < tiles; t++) {
      int c = p.tile_counts[t * HM_ALIGN_E + e];
      p.tile_counts[t * HM_ALIGN_E + e] = run;
      run += c;
    }
    counts[e] = run;
    p.work_counts[e] = run;
  }
  __syncthreads();
  if (p.layout != HM_ALIGN_MASKED) {
    hm_align_offsets(p, counts, offsets, warp_sums);
    for (int e = threadIdx.x; e <= HM_ALIGN_E; e += HM_ALIGN_THREADS) p.work_offsets[e] = offsets[e];
  }
  hm_align_write_meta(p, counts, offsets, threadIdx.x, HM_ALIGN_THREADS);
}

/* Kernel 3 of 3: each block places its tile's ids; the grid fills the padding. */
extern "C" __global__ void __launch_bounds__(HM_ALIGN_THREADS) hm_moe_align_scatter(hm_moe_align_params p) {
  __shared__ int warp_counts[HM_ALIGN_WARPS * HM_ALIGN_E];
  hm_align_zero(warp_counts, HM_ALIGN_WARPS * HM_ALIGN_E);
  __syncthreads();
  const long long i = (long long)blockIdx.x * HM_ALIGN_THREADS + threadIdx.x;
  const int e = hm_align_expert(p, i);
  int rank = hm_align_tile_rank(e, warp_counts);
  if (e >= 0) rank += p.tile_counts[(long long)blockIdx.x * HM_ALIGN_E + e];
  hm_align_scatter(p, i, e, rank, p.work_offsets);
  hm_align_fill_padding(p, p.work_counts, p.work_offsets, i, (long long)gridDim.x * HM_ALIGN_THREADS);
}

#endif

#if defined(__CUDACC__) && (defined(HM_PERMUTE) || defined(HM_ALIGN_E))

/* Copies a row with the whole block, 16 bytes a load when sizes and addresses allow. */
__device__ __forceinline__ void hm_permute_copy(unsigned char *dst, const unsigned char *src, long long bytes) {
  const bool vector = ((bytes | (long long)(unsigned long long)dst | (long long)(unsigned long long)src) & 15) == 0;
  if (vector) {
    uint4 *d = reinterpret_cast<uint4 *>(dst);
    const uint4 *s = reinterpret_cast<const uint4 *>(src);
    for (long long c = threadIdx.x; c < bytes / 16; c += blockDim.x) d[c] = s[c];
    return;
  }
  for (long long c = threadIdx.x; c < bytes; c += blockDim.x) dst[c] = src[c];
}

#endif

#if defined(__CUDACC__) && defined(HM_PERMUTE)

/* One block per (token, slot): dst[row_of[i]] = src[i / top_k]. */
extern "C" __global__ void __launch_bounds__(256) hm_moe_permute(hm_moe_permute_params p) {
  const long long i = blockIdx.x;
  if (i >= p.items) return;
  const int row = p.row_of[i];
  if (row < 0) return;
  const long long token = i / p.top_k;
  hm_permute_copy(p.dst + row * p.row_bytes, p.src + token * p.row_bytes, p.row_bytes);
  if (p.dst2) hm_permute_copy(p.dst2 + row * p.row_bytes2, p.src2 + token * p.row_bytes2, p.row_bytes2);
}

#endif
#endif
