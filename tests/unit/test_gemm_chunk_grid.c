/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Which thread copies which 16-byte chunk of a pipeline stage (kernels/hm_chunk_grid.cuh),
 * the rules the mma.sync kernels' copies follow. A decode tile whose warps split K copies in
 * sets of warps, and a set waits on its own barrier, so a chunk copied by a thread of
 * another set would be read before it lands: every chunk of every stream must be copied
 * exactly once, by a thread of the set whose warps read it. The streams are those of
 * hm_load_plan (kernels/gemm_load.cuh) for bf16 activations; their sizes follow
 * hm_wo_stage (kernels/gemm_traits.cuh), as gemm_config.c's do.
 */
#include <stdlib.h>

#include "check.h"
#include "hm_test.h"
#include "kernels/hm_chunk_grid.cuh"

/* A decode tile: one warp over M and N, warps_k over K. group 0: per channel; bits 16:
 * bf16 weights, no scales. */
typedef struct {
  const char *name;
  int bm, bn, bk, bits, group, zero_point, warps_k, k;
} tile;

static const tile decode_tiles[] = {
    {"8 rows, bk 512, eight k-warps (dense decode)", 8, 64, 512, 4, 128, 1, 8, 8192},
    {"8 rows, bk 256, eight k-warps", 8, 64, 256, 4, 128, 1, 8, 8192},
    {"8 rows, bk 1024, eight k-warps", 8, 64, 1024, 4, 128, 1, 8, 8192},
    {"8 rows, bk 512, four k-warps, int4 symmetric", 8, 64, 512, 4, 128, 0, 4, 7168},
    {"16 rows, bk 1024, eight k-warps", 16, 64, 1024, 4, 128, 1, 8, 8192},
    {"16 rows, bk 512, eight k-warps", 16, 64, 512, 4, 128, 1, 8, 2048},
    {"8 rows, uint3 g32, two unit columns", 8, 128, 512, 3, 32, 1, 8, 4096},
    {"8 rows, int8 g64, four k-warps", 8, 64, 512, 8, 64, 0, 4, 2048},
    {"16 rows, uint2 g64, two unit columns", 16, 128, 256, 2, 64, 1, 4, 2048},
    {"16 rows, bf16 weights", 16, 64, 256, 16, 0, 0, 4, 2048},
    {"8 rows, per channel (one set)", 8, 64, 512, 4, 0, 0, 8, 4096},
};

enum { STREAM_A, STREAM_B, STREAM_S, STREAM_Z, STREAMS };
static const char *const stream_names[STREAMS] = {"token rows", "weight units", "scales", "zero points"};

static int steps(const tile *t) {
  return t->bk / 16;
}
static int bn_units(const tile *t) {
  return t->bn / 64;
}
static int unit_bytes(const tile *t) {
  return 128 * t->bits;
}
static int quant(const tile *t) {
  return t->bits < 16;
}
static int stage_groups(const tile *t) {
  return (t->group == 0 || t->group >= t->bk) ? 1 : t->bk / t->group;
}

static int tile_sets(const tile *t) {
  return hm_copy_sets(1, t->bm, 1, t->warps_k, t->k, t->bk, quant(t), stage_groups(t));
}

/* Stream s of tile t, copied in `sets` sets; total 0 where the tile has no such stream. */
static hm_chunk_shape stream_shape(const tile *t, int s, int sets) {
  const int threads = 32 * t->warps_k, groups = stage_groups(t);
  switch (s) {
    case STREAM_A: return (hm_chunk_shape){t->bk / 8, threads, t->bm * t->bk / 8, sets, 1};
    case STREAM_B:
      return (hm_chunk_shape){steps(t) * unit_bytes(t) / 16, threads,
                              bn_units(t) * steps(t) * unit_bytes(t) / 16, sets, 1};
    case STREAM_S: return (hm_chunk_shape){8, threads, quant(t) ? groups * bn_units(t) * 8 : 0, sets, 0};
    default:
      return (hm_chunk_shape){4, threads, quant(t) && t->zero_point ? groups * bn_units(t) * 4 : 0, sets, 0};
  }
}

/* The k16 steps of the stage that chunk `chunk` of row `row` of stream s holds: [*first,
 * *last]. A token row's chunk is eight elements, half a step; a unit column's chunk lies in
 * one step; a scale or zero-point row is one group of one unit column. */
static void chunk_steps(const tile *t, int s, int row, int chunk, int *first, int *last) {
  if (s == STREAM_A) {
    *first = *last = chunk / 2;
  } else if (s == STREAM_B) {
    *first = *last = chunk / (unit_bytes(t) / 16);
  } else {
    const int group_steps = stage_groups(t) == 1 ? steps(t) : t->group / 16;
    *first = row / bn_units(t) * group_steps;
    *last = *first + group_steps - 1;
  }
}

/* The set of the warps that read k16 step `step`: warp w reads steps [w, w + 1) *
 * steps / warps_k (hm_lane_addr_init), and sets are runs of consecutive warps. */
static int reading_set(const tile *t, int step, int sets) {
  const int warp = step / (steps(t) / t->warps_k);
  return warp / (t->warps_k / sets);
}

/* Every chunk of stream s copied once, each by a thread of the set that reads it. */
static void check_stream(const tile *t, int s, int sets) {
  const hm_chunk_shape g = stream_shape(t, s, sets);
  if (g.total == 0) return;
  if (!hm_cg_valid(g)) fail_msg("%s, %s: %d sets do not cut whole chunks", t->name, stream_names[s], sets);
  int *copies = calloc((size_t)g.total, sizeof(int));
  assert_non_null(copies);
  for (unsigned tid = 0; tid < (unsigned)g.threads; tid++)
    for (int it = 0; it < hm_cg_iters(g); it++) {
      if (!hm_cg_has(g, it, tid)) continue;
      const int row = hm_cg_row(g, it, tid), chunk = hm_cg_chunk(g, it, tid);
      if (row < 0 || chunk < 0 || chunk >= g.per_row || row * g.per_row + chunk >= g.total)
        fail_msg("%s, %s: thread %u copy %d at row %d chunk %d, outside the stage", t->name, stream_names[s],
                 tid, it, row, chunk);
      copies[row * g.per_row + chunk]++;
      int first, last;
      chunk_steps(t, s, row, chunk, &first, &last);
      for (int step = first; step <= last; step++)
        if (reading_set(t, step, sets) != (int)(tid / (unsigned)(g.threads / sets)))
          fail_msg("%s, %s: thread %u copies row %d chunk %d, which set %d reads", t->name, stream_names[s],
                   tid, row, chunk, reading_set(t, step, sets));
    }
  for (int i = 0; i < g.total; i++)
    if (copies[i] != 1)
      fail_msg("%s, %s: chunk %d of %d copied %d times", t->name, stream_names[s], i, g.total, copies[i]);
  free(copies);
}

static void every_chunk_once_by_its_readers(void **state) {
  (void)state;
  for (size_t i = 0; i < HM_ARRAY_SIZE(decode_tiles); i++)
    for (int s = 0; s < STREAMS; s++) {
      check_stream(&decode_tiles[i], s, tile_sets(&decode_tiles[i]));
      check_stream(&decode_tiles[i], s, 1);
    }
}

/* One set is the grid the kernels had before the sets, and still have with them off:
 * copy it of thread tid is chunk it * threads + tid. */
static void one_set_is_the_plain_grid(void **state) {
  (void)state;
  for (size_t i = 0; i < HM_ARRAY_SIZE(decode_tiles); i++)
    for (int s = 0; s < STREAMS; s++) {
      const hm_chunk_shape g = stream_shape(&decode_tiles[i], s, 1);
      for (unsigned tid = 0; tid < (unsigned)g.threads; tid++)
        for (int it = 0; it < hm_cg_iters(g); it++) {
          const int chunk = it * g.threads + (int)tid;
          assert_int_equal(hm_cg_has(g, it, tid), chunk < g.total);
          if (chunk >= g.total) continue;
          assert_int_equal(hm_cg_row(g, it, tid), chunk / g.per_row);
          assert_int_equal(hm_cg_chunk(g, it, tid), chunk % g.per_row);
        }
    }
}

/* Where a grid splits, a thread's copy it lies at the same distance from its copy 0 for
 * every thread, so that the kernels fold the distances to constants (hm_copy_stream). */
static void split_grids_keep_constant_distances(void **state) {
  (void)state;
  int split = 0;
  for (size_t i = 0; i < HM_ARRAY_SIZE(decode_tiles); i++)
    for (int s = 0; s < STREAMS; s++) {
      const hm_chunk_shape g = stream_shape(&decode_tiles[i], s, tile_sets(&decode_tiles[i]));
      if (g.total == 0 || !hm_cg_split(g)) continue;
      split++;
      for (int it = 0; it < hm_cg_iters(g); it++)
        for (unsigned tid = 1; tid < (unsigned)g.threads; tid++) {
          if (!hm_cg_has(g, it, tid)) continue;
          assert_int_equal(hm_cg_row(g, it, tid) - hm_cg_row(g, 0, tid),
                           hm_cg_row(g, it, 0) - hm_cg_row(g, 0, 0));
          assert_int_equal(hm_cg_chunk(g, it, tid) - hm_cg_chunk(g, 0, tid),
                           hm_cg_chunk(g, it, 0) - hm_cg_chunk(g, 0, 0));
        }
    }
  assert_true(split > 0);
}

/* Which tiles copy in sets, and how many: as many as the warps that share a scale group
 * allow, one where anything but K is split, K has a partial k-tile, or the switch is off. */
static void which_tiles_take_sets(void **state) {
  (void)state;
  /* enabled, bm, warps_mn, warps_k, k, bk, quant, stage_groups */
  assert_int_equal(hm_copy_sets(1, 8, 1, 8, 8192, 512, 1, 4), 4);   /* dense decode: pairs of warps */
  assert_int_equal(hm_copy_sets(1, 16, 1, 8, 8192, 1024, 1, 8), 8); /* a warp a set */
  assert_int_equal(hm_copy_sets(1, 8, 1, 8, 8192, 256, 1, 2), 2);
  assert_int_equal(hm_copy_sets(1, 8, 1, 4, 2048, 512, 1, 8), 4);  /* more groups than warps */
  assert_int_equal(hm_copy_sets(1, 16, 1, 4, 2048, 256, 0, 1), 4); /* no scales: a warp a set */
  assert_int_equal(hm_copy_sets(1, 8, 1, 8, 4096, 512, 1, 1), 1);  /* per channel: one group */
  assert_int_equal(hm_copy_sets(1, 8, 1, 2, 4096, 128, 1, 1), 1);
  assert_int_equal(hm_copy_sets(0, 8, 1, 8, 8192, 512, 1, 4), 1);  /* switched off */
  assert_int_equal(hm_copy_sets(1, 32, 1, 2, 8192, 128, 1, 1), 1); /* not a decode tile */
  assert_int_equal(hm_copy_sets(1, 16, 2, 4, 8192, 512, 1, 4), 1); /* warps split N too */
  assert_int_equal(hm_copy_sets(1, 8, 1, 8, 7000, 512, 1, 4), 1);  /* the last k-tile is partial */
  assert_int_equal(hm_copy_sets(1, 8, 1, 1, 8192, 512, 1, 4), 1);  /* one warp */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_chunk_once_by_its_readers),
      cmocka_unit_test(one_set_is_the_plain_grid),
      cmocka_unit_test(split_grids_keep_constant_distances),
      cmocka_unit_test(which_tiles_take_sets),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
