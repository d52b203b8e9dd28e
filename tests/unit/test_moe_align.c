/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Alignment metadata invariants on the host backend, for each layout and block size:
 * every routed (token, slot) placed exactly once in its expert's rows, in increasing
 * order; padding holds the sentinel; offsets are multiples of block_m; expert ids per
 * block; -1 skipped; empty experts; an appended expert (the layer's fused shared one) the
 * same as an explicit last column; and the refused inputs.
 */
#include <stdlib.h>
#include <string.h>

#include "hm_test.h"
#include "moe/moe_internal.h"

typedef struct align_buffers {
  hm_moe_align_sizes sizes;
  hm_moe_alignment out;
  void *workspace;
} align_buffers;

#define GARBAGE 0x5a5a5a5a

static int32_t *garbage_array(int64_t n) {
  int32_t *a = malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
  for (int64_t i = 0; i < n; i++) a[i] = GARBAGE;
  return a;
}

static void alloc_buffers(const hm_moe_align_config *c, align_buffers *b) {
  HM_ASSERT_OK(hm_moe_align_get_sizes(c, &b->sizes));
  int64_t n = c->tokens * c->top_k;
  b->out = (hm_moe_alignment){
      .row_of = garbage_array(n),
      .expert_counts = garbage_array(c->experts),
      .expert_offsets = garbage_array(c->experts + 1),
      .num_padded = garbage_array(1),
      .sorted_ids = garbage_array(b->sizes.max_padded),
      .expert_ids = garbage_array(b->sizes.max_blocks),
  };
  b->workspace = malloc(b->sizes.workspace_bytes);
}

static void free_buffers(align_buffers *b) {
  free(b->out.row_of), free(b->out.expert_counts), free(b->out.expert_offsets), free(b->out.num_padded);
  free(b->out.sorted_ids), free(b->out.expert_ids), free(b->workspace);
}

/* Counts and offsets of padded segments; shared by indexed and contiguous. */
static void check_segments(const hm_moe_align_config *c, const align_buffers *b, const int32_t *counts) {
  const int32_t *off = b->out.expert_offsets;
  assert_int_equal(off[0], 0);
  for (int64_t e = 0; e < c->experts; e++) {
    assert_int_equal(b->out.expert_counts[e], counts[e]);
    int32_t size = off[e + 1] - off[e];
    assert_int_equal(size % c->block_m, 0);
    assert_true(size >= counts[e] && size < counts[e] + c->block_m);
  }
  assert_int_equal(*b->out.num_padded, off[c->experts]);
}

static void check_indexed(const hm_moe_align_config *c, const align_buffers *b, const int32_t *ids,
                          const int32_t *counts) {
  int64_t n = c->tokens * c->top_k;
  const int32_t *off = b->out.expert_offsets, *sorted = b->out.sorted_ids;
  check_segments(c, b, counts);
  assert_true(*b->out.num_padded <= b->sizes.max_padded);
  assert_int_equal(b->sizes.max_padded, b->sizes.max_blocks * c->block_m);
  char *seen = calloc((size_t)n + 1, 1);
  for (int64_t e = 0; e < c->experts; e++) {
    for (int32_t q = off[e]; q < off[e + 1]; q++) {
      assert_int_equal(b->out.expert_ids[q / c->block_m], e);
      if (q - off[e] >= counts[e]) {
        assert_int_equal(sorted[q], n); /* padding: the sentinel T*top_k */
        continue;
      }
      int32_t id = sorted[q];
      assert_true(id >= 0 && id < n);
      assert_int_equal(ids[id], e);
      assert_false(seen[id]);
      seen[id] = 1;
      if (q > off[e]) assert_true(sorted[q - 1] < id); /* the order of t*top_k+j */
    }
  }
  for (int64_t q = off[c->experts]; q < b->sizes.max_padded; q++) assert_int_equal(sorted[q], n);
  for (int64_t blk = off[c->experts] / c->block_m; blk < b->sizes.max_blocks; blk++)
    assert_int_equal(b->out.expert_ids[blk], -1);
  for (int64_t i = 0; i < n; i++) {
    assert_int_equal(seen[i], ids[i] >= 0);
    assert_int_equal(b->out.row_of[i], ids[i] >= 0 ? i : -1);
  }
  free(seen);
}

/* Contiguous and masked: row_of places each id inside its expert's rows, ranked by id. */
static void check_rows(const hm_moe_align_config *c, const align_buffers *b, const int32_t *ids,
                       const int32_t *counts) {
  int64_t n = c->tokens * c->top_k;
  bool masked = c->layout == HM_MOE_LAYOUT_MASKED;
  int64_t max_m = c->max_m > 0 ? c->max_m : c->tokens;
  if (masked) {
    assert_int_equal(b->sizes.rows, c->experts * max_m);
    for (int64_t e = 0; e < c->experts; e++) assert_int_equal(b->out.expert_counts[e], counts[e]);
  } else {
    check_segments(c, b, counts);
    assert_true(b->out.expert_offsets[c->experts] <= b->sizes.rows);
  }
  int32_t *next = calloc((size_t)c->experts, sizeof(int32_t));
  for (int64_t i = 0; i < n; i++) {
    int32_t e = ids[i];
    if (e < 0) {
      assert_int_equal(b->out.row_of[i], -1);
      continue;
    }
    int64_t start = masked ? e * max_m : b->out.expert_offsets[e];
    assert_int_equal(b->out.row_of[i], start + next[e]++);
  }
  free(next);
}

static void align_and_check(hm_moe_layout layout, int64_t T, int64_t E, int top_k, int block_m,
                            const int32_t *ids) {
  hm_moe_align_config c = {layout, T, E, top_k, block_m, 0};
  align_buffers b;
  alloc_buffers(&c, &b);
  hm_engine *eng = hm_test_host_engine();
  HM_ASSERT_OK(hm_moe_align(eng, &c, ids, &b.out, b.workspace, NULL));
  int32_t *counts = calloc((size_t)E, sizeof(int32_t));
  for (int64_t i = 0; i < T * top_k; i++)
    if (ids[i] >= 0) counts[ids[i]]++;
  if (layout == HM_MOE_LAYOUT_INDEXED)
    check_indexed(&c, &b, ids, counts);
  else
    check_rows(&c, &b, ids, counts);
  free(counts);
  free_buffers(&b);
  hm_engine_destroy(eng);
}

/* Distinct experts per token, a fraction masked with -1; skewed puts most on few experts. */
static int32_t *make_ids(hm_rng *rng, int64_t T, int64_t E, int top_k, bool skewed, float masked) {
  int32_t *ids = malloc((size_t)(T * top_k) * sizeof(int32_t));
  for (int64_t t = 0; t < T; t++) {
    for (int k = 0; k < top_k; k++) {
      int32_t e;
      bool repeat;
      do {
        float u = hm_rng_uniform(rng, 0.0f, 1.0f);
        e = skewed && u < 0.7f ? (int32_t)(hm_rng_next(rng) % (uint64_t)(top_k + 1))
                               : (int32_t)(hm_rng_next(rng) % (uint64_t)E);
        repeat = false;
        for (int j = 0; j < k; j++) repeat |= ids[t * top_k + j] == e;
      } while (repeat);
      ids[t * top_k + k] = e;
    }
    for (int k = 0; k < top_k; k++)
      if (hm_rng_uniform(rng, 0.0f, 1.0f) < masked) ids[t * top_k + k] = -1;
  }
  return ids;
}

static void every_layout_and_block_size(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_align"));
  const hm_moe_layout layouts[] = {HM_MOE_LAYOUT_INDEXED, HM_MOE_LAYOUT_CONTIGUOUS, HM_MOE_LAYOUT_MASKED};
  const int64_t tokens[] = {1, 3, 64, 1100};
  const int block_ms[] = {1, 16, 64};
  for (size_t l = 0; l < 3; l++)
    for (size_t t = 0; t < 4; t++)
      for (size_t b = 0; b < 3; b++)
        for (int skew = 0; skew < 2; skew++) {
          int32_t *ids = make_ids(&rng, tokens[t], 16, 4, skew, 0.1f);
          align_and_check(layouts[l], tokens[t], 16, 4, block_ms[b], ids);
          free(ids);
        }
}

static void empty_experts_and_all_masked(void **state) {
  (void)state;
  int32_t one_expert[12] = {5, -1, 5, 5, -1, 5, 5, 5, 5, 5, -1, 5};
  int32_t all_masked[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
  for (int l = HM_MOE_LAYOUT_INDEXED; l <= HM_MOE_LAYOUT_MASKED; l++) {
    align_and_check((hm_moe_layout)l, 12, 8, 1, 16, one_expert);
    align_and_check((hm_moe_layout)l, 4, 8, 2, 16, all_masked);
    align_and_check((hm_moe_layout)l, 0, 8, 2, 16, all_masked);
  }
}

static void deepseek_shape(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_align_deepseek"));
  int32_t *ids = make_ids(&rng, 700, 256, 8, false, 0.0f);
  align_and_check(HM_MOE_LAYOUT_INDEXED, 700, 256, 8, 64, ids);
  align_and_check(HM_MOE_LAYOUT_CONTIGUOUS, 700, 256, 8, 128, ids);
  align_and_check(HM_MOE_LAYOUT_MASKED, 700, 256, 8, 1, ids);
  free(ids);
}

static void bad_inputs_are_refused(void **state) {
  (void)state;
  hm_engine *eng = hm_test_host_engine();
  hm_moe_align_config c = {HM_MOE_LAYOUT_INDEXED, 2, 4, 2, 16, 0};
  align_buffers b;
  alloc_buffers(&c, &b);
  int32_t out_of_range[4] = {0, 1, 4, 2}, below[4] = {0, -2, 1, 2}, repeated[4] = {3, 3, 3, 1};
  assert_int_equal(hm_moe_align(eng, &c, out_of_range, &b.out, b.workspace, NULL), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "topk_ids[2] = 4"));
  assert_int_equal(hm_moe_align(eng, &c, below, &b.out, b.workspace, NULL), HM_INVALID_ARGUMENT);
  c.layout = HM_MOE_LAYOUT_MASKED; /* expert 3 gets 3 rows, max_m is T = 2 */
  assert_int_equal(hm_moe_align(eng, &c, repeated, &b.out, b.workspace, NULL), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "max_m"));
  hm_moe_align_sizes sizes;
  hm_moe_align_config bad[] = {
      {HM_MOE_LAYOUT_AUTO, 2, 4, 2, 16, 0},    {HM_MOE_LAYOUT_INDEXED, -1, 4, 2, 16, 0},
      {HM_MOE_LAYOUT_INDEXED, 2, 0, 2, 16, 0}, {HM_MOE_LAYOUT_INDEXED, 2, 4, 0, 16, 0},
      {HM_MOE_LAYOUT_INDEXED, 2, 4, 2, 0, 0},  {HM_MOE_LAYOUT_CONTIGUOUS, 2, 4, 2, 4096, 0},
      {HM_MOE_LAYOUT_MASKED, 2, 4, 2, 16, -1}, {HM_MOE_LAYOUT_INDEXED, 1LL << 30, 4, 8, 16, 0},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    assert_int_equal(hm_moe_align_get_sizes(&bad[i], &sizes), HM_INVALID_ARGUMENT);
  c.layout = HM_MOE_LAYOUT_INDEXED;
  assert_int_equal(hm_moe_align(eng, &c, NULL, &b.out, b.workspace, NULL), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_moe_align(eng, &c, below, NULL, b.workspace, NULL), HM_INVALID_ARGUMENT);
  free_buffers(&b);
  hm_engine_destroy(eng);
}

/* Every output array of two alignments, element by element. */
static void assert_same_alignment(const align_buffers *a, const align_buffers *b,
                                  const hm_moe_align_config *c) {
  int64_t n = c->tokens * c->top_k;
  assert_memory_equal(a->out.row_of, b->out.row_of, (size_t)n * 4);
  assert_memory_equal(a->out.expert_counts, b->out.expert_counts, (size_t)c->experts * 4);
  if (c->layout == HM_MOE_LAYOUT_MASKED) return;
  assert_memory_equal(a->out.expert_offsets, b->out.expert_offsets, (size_t)(c->experts + 1) * 4);
  assert_int_equal(*a->out.num_padded, *b->out.num_padded);
  if (c->layout != HM_MOE_LAYOUT_INDEXED) return;
  assert_memory_equal(a->out.sorted_ids, b->out.sorted_ids, (size_t)a->sizes.max_padded * 4);
  assert_memory_equal(a->out.expert_ids, b->out.expert_ids, (size_t)a->sizes.max_blocks * 4);
}

/* ids [T, k] with an appended expert E align as ids [T, k + 1] whose last column is E. */
static void appended_expert_is_an_explicit_last_column(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_align_appended"));
  const int64_t E = 16, tokens[] = {1, 5, 64, 700};
  const int K = 4;
  hm_engine *eng = hm_test_host_engine();
  hm_moe_exec x = {.engine = eng};
  for (int layout = HM_MOE_LAYOUT_INDEXED; layout <= HM_MOE_LAYOUT_MASKED; layout++)
    for (size_t t = 0; t < 4; t++) {
      int64_t T = tokens[t];
      int32_t *ids = make_ids(&rng, T, E, K, t % 2 == 1, 0.1f);
      int32_t *wide = malloc((size_t)(T * (K + 1)) * sizeof(int32_t));
      for (int64_t i = 0; i < T; i++) {
        memcpy(wide + i * (K + 1), ids + i * K, (size_t)K * sizeof(int32_t));
        wide[i * (K + 1) + K] = (int32_t)E;
      }
      hm_moe_align_config c = {(hm_moe_layout)layout, T, E + 1, K + 1, 16, 0};
      align_buffers got, want;
      alloc_buffers(&c, &got);
      alloc_buffers(&c, &want);
      HM_ASSERT_OK(hm_moe_align_run(&x, NULL, &c, true, ids, &got.out, NULL));
      align_and_check(c.layout, T, E + 1, K + 1, 16, wide);
      HM_ASSERT_OK(hm_moe_align(eng, &c, wide, &want.out, want.workspace, NULL));
      assert_same_alignment(&got, &want, &c);
      /* Every token reaches the appended expert, as the last of its rows there. */
      assert_int_equal(got.out.expert_counts[E], T);
      free_buffers(&got), free_buffers(&want);
      free(ids), free(wide);
    }
  assert_int_equal(x.launches, 12);
  /* A caller's id naming the appended expert is refused; so is an appended expert alone. */
  hm_moe_align_config c = {HM_MOE_LAYOUT_MASKED, 2, 5, 3, 1, 0};
  align_buffers b;
  alloc_buffers(&c, &b);
  int32_t names_it[4] = {0, 1, 4, 2};
  assert_int_equal(hm_moe_align_run(&x, NULL, &c, true, names_it, &b.out, NULL), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "topk_ids[2] = 4 is outside [-1, experts = 4)"));
  c.top_k = 1;
  assert_int_equal(hm_moe_align_run(&x, NULL, &c, true, names_it, &b.out, NULL), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "top_k = 1"));
  free_buffers(&b);
  hm_engine_destroy(eng);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_layout_and_block_size),
      cmocka_unit_test(appended_expert_is_an_explicit_last_column),
      cmocka_unit_test(empty_experts_and_all_masked),
      cmocka_unit_test(deepseek_shape),
      cmocka_unit_test(bad_inputs_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
