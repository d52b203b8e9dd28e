// SPDX-License-Identifier: Apache-2.0
// Which thread copies which 16-byte chunk of a pipeline stage (gemm_load.cuh's
// hm_chunk_grid), and in how many sets of warps a decode tile copies
// (hm_gemm_traits::copy_sets). Plain C as well as CUDA, so that a CPU test checks that
// every chunk of a stage is copied once, and by a thread of the set whose warps read it.
#ifndef HM_CHUNK_GRID_CUH
#define HM_CHUNK_GRID_CUH

#if defined(__CUDACC__)
#define HM_CG_FN __host__ __device__ __forceinline__ constexpr
#else
#define HM_CG_FN static inline
#endif

// A stream of a stage: `total` 16-byte chunks, `per_row` a row, copied by `threads`
// threads in `sets` sets of consecutive threads (warps). Set j copies only the j-th k-slice
// of the stage: of each row its j-th per_row / sets chunks where k runs along a row
// (k_inner: token rows, weight unit columns), else its j-th total / sets chunks (scale
// groups and zero points, rows in k order).
typedef struct {
  int per_row, threads, total, sets, k_inner;
} hm_chunk_shape;

HM_CG_FN int hm_cg_set_threads(hm_chunk_shape g) {
  return g.threads / g.sets;
}
HM_CG_FN int hm_cg_set_total(hm_chunk_shape g) {
  return g.total / g.sets;
}

// A set's chunks of a row.
HM_CG_FN int hm_cg_slice(hm_chunk_shape g) {
  return g.k_inner ? g.per_row / g.sets : g.per_row;
}

// Copies a thread makes, at most.
HM_CG_FN int hm_cg_iters(hm_chunk_shape g) {
  return (hm_cg_set_total(g) + hm_cg_set_threads(g) - 1) / hm_cg_set_threads(g);
}

// When a set's threads and its slice of a row divide one another, a copy's row and chunk
// are a constant of the copy plus the thread's own part, so that a thread's copies lie at
// constant distances from its first.
HM_CG_FN int hm_cg_split(hm_chunk_shape g) {
  return hm_cg_set_threads(g) % hm_cg_slice(g) == 0 || hm_cg_slice(g) % hm_cg_set_threads(g) == 0;
}

// A set's k-slice is whole chunks of every row, or whole rows.
HM_CG_FN int hm_cg_valid(hm_chunk_shape g) {
  return g.threads % g.sets == 0 && g.total % g.sets == 0 &&
         (g.k_inner ? g.per_row % g.sets : hm_cg_set_total(g) % g.per_row) == 0;
}

// The thread's set and its place in it. One set is every thread and takes the index as it
// is: the compiler, which does not know tid < threads, would keep a modulo.
HM_CG_FN int hm_cg_set_of(hm_chunk_shape g, unsigned tid) {
  return g.sets == 1 ? 0 : (int)(tid / hm_cg_set_threads(g));
}
HM_CG_FN unsigned hm_cg_in_set(hm_chunk_shape g, unsigned tid) {
  return g.sets == 1 ? tid : tid % hm_cg_set_threads(g);
}

// Whether copy `it` of thread tid exists; its row and chunk: in a set, chunk
// it * set_threads + (place in the set) of the set's slice, in the whole grid's order.
HM_CG_FN int hm_cg_has(hm_chunk_shape g, int it, unsigned tid) {
  return hm_cg_set_total(g) % hm_cg_set_threads(g) == 0 ||
         it * hm_cg_set_threads(g) + hm_cg_in_set(g, tid) < (unsigned)hm_cg_set_total(g);
}
HM_CG_FN int hm_cg_row(hm_chunk_shape g, int it, unsigned tid) {
  const int st = hm_cg_set_threads(g), slice = hm_cg_slice(g);
  const unsigned t = hm_cg_in_set(g, tid);
  const int r = hm_cg_split(g) ? it * st / slice + (int)(t / slice) : (int)((it * st + t) / slice);
  return g.k_inner ? r : hm_cg_set_of(g, tid) * (hm_cg_set_total(g) / g.per_row) + r;
}
HM_CG_FN int hm_cg_chunk(hm_chunk_shape g, int it, unsigned tid) {
  const int st = hm_cg_set_threads(g), slice = hm_cg_slice(g);
  const unsigned t = hm_cg_in_set(g, tid);
  const int c = hm_cg_split(g) ? it * st % slice + (int)(t % slice) : (int)((it * st + t) % slice);
  return g.k_inner ? hm_cg_set_of(g, tid) * slice + c : c;
}

// The copy sets of a tile (warps_mn warps over M and N, warps_k over K; stage_groups scale
// groups a stage, quant: whether it has scales): a warp a set, or where warps share a scale
// group, the warps of a group, so that a set reads only its own k-slice of every stream. Not
// where the last k-tile reaches past K (its checked loads copy as one CTA), nor for tiles
// of more than 16 rows, nor unless `enabled` (HUMMING_DECODE_COPY_SETS).
HM_CG_FN int hm_copy_sets(int enabled, int bm, int warps_mn, int warps_k, int k, int bk, int quant,
                          int stage_groups) {
  if (!enabled || bm > 16 || warps_mn != 1 || warps_k == 1 || k % bk != 0) return 1;
  const int sets = quant && stage_groups < warps_k ? stage_groups : warps_k;
  return warps_k % sets == 0 && (!quant || stage_groups % sets == 0) ? sets : 1;
}

#endif
