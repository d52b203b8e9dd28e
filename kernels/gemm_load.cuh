// SPDX-License-Identifier: Apache-2.0
// Global -> shared copies of one pipeline stage with cp.async: the A tile swizzled for
// ldmatrix, weight units, scales and zero points. The checked loads recompute every index
// and bound per k-tile and are shared with the other kernels; the mma.sync mainloop fixes
// a thread's copies once per tile segment (hm_load_plan) and only adds a stride per k-tile.
#pragma once

#include "gemm_sched.cuh"
#include "hm_chunk_grid.cuh"
#include "hm_cp_async.cuh"

// A rows are bk*2 bytes; 16-byte chunk ch of row r sits at chunk ch ^ (r % 8), so the
// eight rows an ldmatrix phase reads fall in eight different bank groups.
template <class C>
__device__ __forceinline__ int hm_a_offset(int r, int ch) {
  return r * C::bk * 2 + ((ch ^ (r & 7)) << 4);
}

// A stage's copies may be issued in PARTS parts (a thread's copy it in part it % PARTS),
// so that a mainloop can spread them between its wgmmas; `part` is a constant once the
// caller's loop is unrolled. Copies with `on` false zero-fill: a predicate, not a branch.
__device__ __forceinline__ bool hm_in_part(int it, int parts, int part) {
  return it % parts == part;
}

// The 8-row tiles of the mma.sync kernels (hm_skips_missing_rows) do not copy the rows a
// tile lacks (a_row -1: past M, past an expert's count, padding). Nothing reads across
// rows: a row of A makes only its own row of C, and a row without an A row has no C row
// either (hm_tile_row), so the epilogues never store what its stale bytes sum to. Chunks
// past K still zero-fill: the weights there are zeros, which stale bytes could turn into
// NaN. At one token such a tile copied seven zero rows a stage for its one live row; not
// copying them ran the dense decode tile 1.035-1.043x and fp8 masked down at one and two
// rows 1.005-1.012x on an H100 (docs/PERF.md, thirty-third session). The 16-row tile ran
// 0.972-0.979x so, even at M = 16 where it lacks no row, and keeps zero-filling.
template <class C>
constexpr bool hm_skips_missing_rows = C::bm == 8;

// The bm x bk A tile of k-tile kt in 16-byte chunks (cp.async): row r is the gathered row
// a_row[r]; rows of -1 are skipped (hm_skips_missing_rows) or zero-filled, and chunks past
// K are zero-filled. Chunk ch of row r lands at st + offset(r, ch): each kernel brings its
// own swizzle. EB: bytes an element.
template <class C, int THREADS, int EB, class Offset>
__device__ __forceinline__ void hm_load_a_tile(const hm_gemm_params &p, int kt, unsigned char *st, const int *a_row,
                                               Offset offset) {
  constexpr int per_chunk = 16 / EB;
  constexpr int per_row = C::bk / per_chunk;
  constexpr int total = C::bm * per_row;
  const unsigned char *a = (const unsigned char *)p.a;
#pragma unroll
  for (int it = 0; it < (total + THREADS - 1) / THREADS; ++it) {
    const int i = it * THREADS + (int)threadIdx.x;
    if (total % THREADS == 0 || i < total) {
      const int r = i / per_row, ch = i % per_row;
      const int row = a_row[r];
      const int k = kt * C::bk + ch * per_chunk;
      const bool ok = row >= 0 && k < C::k;
      const long long off = ((long long)(ok ? row : 0) * C::k + (ok ? k : 0)) * EB;
      if (!hm_skips_missing_rows<C> || row >= 0) hm_cp_async16(st + offset(r, ch), a + off, ok);
    }
  }
}

template <class C>
__device__ __forceinline__ void hm_load_a(const hm_gemm_params &p, int kt, unsigned char *st, const int *a_row) {
  hm_load_a_tile<C, hm_gemm_traits<C>::threads, 2>(p, kt, st, a_row,
                                                   [](int r, int ch) { return hm_a_offset<C>(r, ch); });
}

// Per-unit data of the tile's columns for k-tile kt, UNIT bytes a unit and k step, laid out
// like the weight units ((E, N/64, K steps) of UNIT bytes; each column is contiguous), into
// dst. T: the kernel's traits (sizes, threads), so that every kernel shares this.
template <class C, class T, int UNIT, int PARTS = 1>
__device__ __forceinline__ void hm_load_unit_data(const unsigned char *src, const hm_tile &tile, int kt,
                                                  unsigned char *dst, int part = 0, bool on = true) {
  constexpr int unit_chunks = UNIT / 16;
  constexpr int col_chunks = T::steps * unit_chunks;
  constexpr int total = T::bn_units * col_chunks;
#pragma unroll
  for (int it = 0; it < (total + T::threads - 1) / T::threads; ++it) {
    const int i = it * T::threads + (int)threadIdx.x;
    if (hm_in_part(it, PARTS, part) && (total % T::threads == 0 || i < total)) {
      const int col = i / col_chunks, rem = i % col_chunks;
      const int unit = tile.n_tile * T::bn_units + col;
      const int k16 = kt * T::steps + rem / unit_chunks;
      const bool ok = on && unit < T::n_units && k16 < T::k16;
      const long long off = (((long long)tile.e * T::n_units + unit) * T::k16 + kt * T::steps) * UNIT + rem * 16;
      hm_cp_async16(dst + col * T::steps * UNIT + rem * 16, src + (ok ? off : 0), ok);
    }
  }
}

// Weight units of the tile's columns for k-tile kt.
template <class C, class T = hm_gemm_traits<C>, int PARTS = 1>
__device__ __forceinline__ void hm_load_b(const hm_gemm_params &p, const hm_tile &tile, int kt, unsigned char *st,
                                          int part = 0, bool on = true) {
  hm_load_unit_data<C, T, T::unit_bytes, PARTS>((const unsigned char *)p.b, tile, kt, st + T::b_off, part, on);
}

// Scales (128 bytes) or zero points (64 bytes) per group and unit column.
template <class C, int BYTES, class T = hm_gemm_traits<C>>
__device__ __forceinline__ void hm_load_group_data(const unsigned char *src, const hm_tile &tile, int kt,
                                                   unsigned char *dst) {
  constexpr int chunks = BYTES / 16;
  constexpr int total = T::stage_groups * T::bn_units * chunks;
  const int g0 = C::group == 0 ? 0 : kt * C::bk / C::group;
#pragma unroll
  for (int it = 0; it < (total + T::threads - 1) / T::threads; ++it) {
    const int i = it * T::threads + (int)threadIdx.x;
    if (total % T::threads == 0 || i < total) {
      const int gi = i / (T::bn_units * chunks), col = (i / chunks) % T::bn_units, ch = i % chunks;
      const int g = g0 + gi, unit = tile.n_tile * T::bn_units + col;
      const bool ok = g < T::groups && unit < T::n_units;
      const long long off = (((long long)tile.e * T::groups + g) * T::n_units + unit) * BYTES + ch * 16;
      hm_cp_async16(dst + (gi * T::bn_units + col) * BYTES + ch * 16, src + (ok ? off : 0), ok);
    }
  }
}

// Which copies of a stage a load issues: all of them, or (a dense decode tile's first stages,
// gemm_pdl.cuh) the weights' before the grid dependency and the activations' after it.
enum { HM_LOAD_ALL = 0, HM_LOAD_WEIGHTS = 1, HM_LOAD_ACTS = 2 };

__device__ __forceinline__ constexpr bool hm_loads_acts(int part) {
  return part != HM_LOAD_WEIGHTS;
}

__device__ __forceinline__ constexpr bool hm_loads_weights(int part) {
  return part != HM_LOAD_ACTS;
}

template <class C, int PART = HM_LOAD_ALL>
__device__ __forceinline__ void hm_load_stage(const hm_gemm_params &p, const hm_tile &tile, int kt, unsigned char *st,
                                              const int *a_row) {
  using T = hm_gemm_traits<C>;
  if constexpr (hm_loads_acts(PART)) hm_load_a<C>(p, kt, st, a_row);
  if constexpr (!hm_loads_weights(PART)) return;
  hm_load_b<C>(p, tile, kt, st);
  if constexpr (T::quant) hm_load_group_data<C, 128>((const unsigned char *)p.scales, tile, kt, st + T::s_off);
  if constexpr (T::z_bytes > 0) hm_load_group_data<C, 64>(p.zeros, tile, kt, st + T::z_off);
}

// Copy it = 0, 1, .. of thread tid over TOTAL 16-byte chunks, PER_ROW a row: chunk
// it * THREADS + tid, or with SETS > 1 (hm_gemm_traits::copy_sets) the chunk of its set's
// k-slice that hm_chunk_grid.cuh assigns it. The rules are plain C there, checked on the CPU.
template <int PER_ROW, int THREADS, int TOTAL, int SETS = 1, bool K_INNER = true>
struct hm_chunk_grid {
  __host__ __device__ static constexpr hm_chunk_shape shape() { return {PER_ROW, THREADS, TOTAL, SETS, K_INNER}; }
  static constexpr int iters = hm_cg_iters(shape());
  static constexpr int slots = iters > 0 ? iters : 1;  // array length, also for an empty grid
  static constexpr bool split = hm_cg_split(shape());

  static_assert(hm_cg_valid(shape()), "a set's k-slice is whole chunks of every row, or whole rows");

  __device__ static __forceinline__ bool has(int it, unsigned tid) { return hm_cg_has(shape(), it, tid); }
  __device__ static __forceinline__ int row(int it, unsigned tid) { return hm_cg_row(shape(), it, tid); }
  __device__ static __forceinline__ int chunk(int it, unsigned tid) { return hm_cg_chunk(shape(), it, tid); }
  // Bytes from copy 0 to copy it in a layout of ROW bytes a row.
  template <int ROW>
  __device__ static __forceinline__ int delta(int it, unsigned tid) {
    return (row(it, tid) - row(0, tid)) * ROW + (chunk(it, tid) - chunk(0, tid)) * 16;
  }
};

// Hides how a value was computed, so that the compiler keeps it in a register instead of
// re-deriving it (and its 64-bit products) inside the k loop.
__device__ __forceinline__ const unsigned char *hm_opaque(const unsigned char *p) {
  asm("" : "+l"(p));
  return p;
}

__device__ __forceinline__ unsigned hm_opaque(unsigned x) {
  asm("" : "+r"(x));
  return x;
}

// A thread's copies of one stream (weights, scales or zero points) over a tile segment:
// copy 0's source at k-tile 0 and its offset in a stage; copy it reads delta[it] bytes
// further and copies (ok) or zero-fills. A zero-filled copy reads as the last unit column
// would, so that its address stays inside the tensor at every k-tile.
template <class G>
struct hm_copy_stream {
  const unsigned char *src;
  unsigned dst;
  int delta[G::slots];
  bool ok[G::slots];
};

// Stream s of grid G from base: copy it reads base + at(row, unit, chunk), with unit the
// tensor's unit column of grid row `row`. ROW: the bytes between grid rows in the source
// when uniform, so that the distances fold to constants; 0 when not.
template <class C, class G, int ROW, class At>
__device__ __forceinline__ void hm_copy_stream_init(hm_copy_stream<G> &s, const unsigned char *base,
                                                    const hm_tile &tile, unsigned tid, unsigned dst, At at) {
  using T = hm_gemm_traits<C>;
  constexpr bool exact = T::n_units % T::bn_units == 0;
  long long first = 0;
#pragma unroll
  for (int it = 0; it < G::iters; ++it) {
    const int row = G::row(it, tid), unit = tile.n_tile * T::bn_units + row % T::bn_units;
    s.ok[it] = exact || unit < T::n_units;
    const long long off = at(row, s.ok[it] ? unit : T::n_units - 1, G::chunk(it, tid));
    if (it == 0) first = off;
    s.delta[it] = (exact && G::split && ROW != 0) ? G::template delta<ROW>(it, tid) : (int)(off - first);
  }
  s.src = hm_opaque(base + first);
  s.dst = hm_opaque(dst);
}

// A thread's copies of the bm x bk A tile over a tile segment: its rows are gathered
// once, so a copy's source is worked out at k-tile 0 and a k-tile only adds kt * bk
// elements. In the wgmma mainloops, which issue these copies between wgmmas, missing rows
// and chunks past K zero-fill by predicate: branching or guarded copies there made ptxas
// serialize every wgmma (C7513). The plan of an 8-row mma.sync tile (SKIP) skips missing
// rows and checks no K: the mma.sync mainloop plans only k-tiles inside K, the last one of
// a K that bk does not divide taking the checked loads (hm_load_plan_stage). EB: bytes an
// element; offset(r, ch): where chunk ch of tile row r lands in a stage; SETS: the k-slices
// of hm_chunk_grid.
template <class C, int THREADS, int EB, bool SKIP = false, int SETS = 1>
struct hm_a_plan {
  static constexpr int per_chunk = 16 / EB;
  using G = hm_chunk_grid<C::bk / per_chunk, THREADS, C::bm * C::bk / per_chunk, SETS>;

  const unsigned char *src[G::slots];  // the chunk at k-tile 0 (row 0 for a missing row)
  unsigned dst[G::slots];
  int k0[G::slots];  // its first k, or past any K for a missing row
  static constexpr int missing = 1 << 30;

  template <class Offset>
  __device__ __forceinline__ void init(const hm_gemm_params &p, const int *a_row, Offset offset) {
    const unsigned tid = threadIdx.x;
#pragma unroll
    for (int it = 0; it < G::iters; ++it) {
      const int r = G::row(it, tid), ch = G::chunk(it, tid);
      const int row = G::has(it, tid) ? a_row[r] : -1;
      k0[it] = row >= 0 ? ch * per_chunk : missing;
      src[it] = hm_opaque((const unsigned char *)p.a + ((long long)(row >= 0 ? row : 0) * C::k + ch * per_chunk) * EB);
      dst[it] = hm_opaque((unsigned)offset(r, ch));
    }
  }

  // Copies it of k-tile kt with it % PARTS == part into the stage at shared address st;
  // with on false, zero-fills them.
  template <int PARTS = 1>
  __device__ __forceinline__ void stage(int kt, unsigned st, int part = 0, bool on = true) const {
    const int k = kt * C::bk;
#pragma unroll
    for (int it = 0; it < G::iters; ++it)
      if (hm_in_part(it, PARTS, part) && G::has(it, threadIdx.x)) {
        if constexpr (SKIP) {
          if (k0[it] != missing) hm_cp_async16(st + dst[it], src[it] + k * EB, on);
        } else {
          const bool ok = on && k0[it] + k < C::k;
          hm_cp_async16(st + dst[it], src[it] + (ok ? k * EB : 0), ok);
        }
      }
  }
};

// A thread's copies of a stage over one tile segment. A rows are gathered, so each A copy
// has its own source (row 0's for a missing row, which zero-fills or is skipped).
template <class C>
struct hm_load_plan {
  using T = hm_gemm_traits<C>;
  static constexpr int sets = T::copy_sets;
  using B = hm_chunk_grid<T::steps * T::unit_bytes / 16, T::threads, T::b_bytes / 16, sets>;
  // rows: (scale group, unit column)
  using S = hm_chunk_grid<8, T::threads, T::s_bytes / 16, sets, false>;
  using Z = hm_chunk_grid<4, T::threads, T::z_bytes / 16, sets, false>;
  // Only the last k-tile of a K that bk does not divide reaches past K (and past the last
  // scale group, K being a multiple of the group): it takes the checked loads.
  static constexpr bool k_tail = C::k % C::bk != 0;

  hm_a_plan<C, T::threads, 2, hm_skips_missing_rows<C>, sets> a;
  hm_copy_stream<B> b;
  hm_copy_stream<S> s;
  hm_copy_stream<Z> z;
};

// The plan of the tile's segment; a_row holds the tile's A rows (hm_tile_rows).
template <class C>
__device__ __forceinline__ hm_load_plan<C> hm_load_plan_init(const hm_gemm_params &p, const hm_tile &tile,
                                                             const int *a_row) {
  using P = hm_load_plan<C>;
  using T = hm_gemm_traits<C>;
  const unsigned tid = threadIdx.x;
  P pl;
  pl.a.init(p, a_row, [](int r, int ch) { return hm_a_offset<C>(r, ch); });
  hm_copy_stream_init<C, typename P::B, T::k16 * T::unit_bytes>(
      pl.b, (const unsigned char *)p.b, tile, tid,
      T::b_off + P::B::row(0, tid) * T::steps * T::unit_bytes + P::B::chunk(0, tid) * 16,
      [&](int, int unit, int ch) {
        return ((long long)tile.e * T::n_units + unit) * T::k16 * T::unit_bytes + ch * 16;
      });
  if constexpr (T::quant)
    hm_copy_stream_init<C, typename P::S, T::stage_groups == 1 ? 128 : 0>(
        pl.s, (const unsigned char *)p.scales, tile, tid,
        T::s_off + P::S::row(0, tid) * 128 + P::S::chunk(0, tid) * 16, [&](int row, int unit, int ch) {
          return (((long long)tile.e * T::groups + row / T::bn_units) * T::n_units + unit) * 128 + ch * 16;
        });
  if constexpr (T::z_bytes > 0)
    hm_copy_stream_init<C, typename P::Z, T::stage_groups == 1 ? 64 : 0>(
        pl.z, p.zeros, tile, tid, T::z_off + P::Z::row(0, tid) * 64 + P::Z::chunk(0, tid) * 16,
        [&](int row, int unit, int ch) {
          return (((long long)tile.e * T::groups + row / T::bn_units) * T::n_units + unit) * 64 + ch * 16;
        });
  return pl;
}

// Bytes from k-tile 0 to k-tile kt in the scales or zero points (BYTES a group and unit):
// a group spans group / bk k-tiles, or a k-tile bk / group groups.
template <class C, int BYTES, class T = hm_gemm_traits<C>>
__device__ __forceinline__ int hm_group_kt_bytes(int kt) {
  if constexpr (C::group == 0)
    return 0;
  else  // discarded for per-channel scales, whose division by 0 nvcc warns of even after a return
    return (int)((unsigned)kt * C::bk / C::group) * (T::n_units * BYTES);
}

// The copies of stream s at k-tile kt_bytes into the stage at shared address st.
template <class G, int DST_ROW>
__device__ __forceinline__ void hm_copy_stream_stage(const hm_copy_stream<G> &s, unsigned st, int kt_bytes,
                                                     unsigned tid) {
  const unsigned char *src = s.src + kt_bytes;
  const unsigned dst = st + s.dst;
#pragma unroll
  for (int it = 0; it < G::iters; ++it)
    if (G::has(it, tid))
      hm_cp_async16(dst + G::template delta<DST_ROW>(it, tid), src + s.delta[it], s.ok[it]);
}

// Fills stage st with k-tile kt (the copies PART names): the plan's copies, or the checked
// loads for a last k-tile that reaches past K.
template <class C, int PART = HM_LOAD_ALL>
__device__ __forceinline__ void hm_load_plan_stage(const hm_load_plan<C> &pl, const hm_gemm_params &p,
                                                   const hm_tile &tile, int kt, unsigned char *st,
                                                   const int *a_row) {
  using P = hm_load_plan<C>;
  using T = hm_gemm_traits<C>;
  if constexpr (P::k_tail) {
    if (kt == T::k_iters - 1) {
      hm_load_stage<C, PART>(p, tile, kt, st, a_row);
      return;
    }
  }
  const unsigned tid = threadIdx.x, sa = hm_smem_addr(st);
  if constexpr (hm_loads_acts(PART)) pl.a.stage(kt, sa);
  if constexpr (!hm_loads_weights(PART)) return;
  hm_copy_stream_stage<typename P::B, T::steps * T::unit_bytes>(pl.b, sa, kt * (T::steps * T::unit_bytes),
                                                                tid);
  if constexpr (T::quant)
    hm_copy_stream_stage<typename P::S, 128>(pl.s, sa, hm_group_kt_bytes<C, 128>(kt), tid);
  if constexpr (T::z_bytes > 0)
    hm_copy_stream_stage<typename P::Z, 64>(pl.z, sa, hm_group_kt_bytes<C, 64>(kt), tid);
}
