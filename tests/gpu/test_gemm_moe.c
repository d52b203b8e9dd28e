/* SPDX-License-Identifier: Apache-2.0 */
/*
 * MoE weight-only GEMMs on the device against the host reference: indexed (gate-up
 * gather with top_k, down with a_rows_per_token = 1, top-k weights, a block with
 * expert -1), grouped-contiguous (padded segments) and grouped-masked, with experts
 * that get no tokens, at M = 1, 7, 64, 333 tokens.
 */
#include "gemm_test_util.h"

static hm_engine *engine;

static const gt_case cases[] = {
    {"moe w4a16 u4z g128 bf16", {HM_U4, HM_BF16, HM_SCALE_GROUP, 128, 0, true, false}, HM_BF16, HM_BF16, false, 704, 1024, 16, false},
    {"moe i4 g64 f16 bias", {HM_I4, HM_F16, HM_SCALE_GROUP, 64, 0, false, false}, HM_F16, HM_F16, true, 576, 832, 8, false},
    {"moe u8 channel bf16", {HM_U8, HM_BF16, HM_SCALE_CHANNEL, 0, 0, false, false}, HM_BF16, HM_BF16, false, 640, 768, 8, false},
    {"moe bf16 unquantized", {HM_BF16, HM_BF16, HM_SCALE_NONE, 0, 0, false, false}, HM_BF16, HM_BF16, false, 512, 640, 4, false},
};

static const int64_t m_list[] = {1, 7, 64, 333};
#define TOP_K 2

/* Two distinct experts per token; expert 1 never chosen (an expert with 0 tokens). */
static void route(hm_rng *rng, int64_t m, int64_t experts, int32_t *ids) {
  for (int64_t t = 0; t < m; t++) {
    int32_t a, b;
    do a = (int32_t)(hm_rng_next(rng) % (uint64_t)experts); while (a == 1);
    do b = (int32_t)(hm_rng_next(rng) % (uint64_t)experts); while (b == 1 || b == a);
    ids[t * TOP_K] = a;
    ids[t * TOP_K + 1] = b;
  }
}

typedef struct indexed_meta {
  int32_t *sorted_ids, *expert_ids, num_padded;
  int64_t max_padded;
} indexed_meta;

/* sorted_ids per expert padded to block_m with the sentinel; the last block goes to expert -1. */
static void build_indexed(const int32_t *ids, int64_t m, int64_t experts, int block_m, indexed_meta *x) {
  const int64_t slots = m * TOP_K;
  x->max_padded = slots + (experts + 1) * block_m;
  x->sorted_ids = gt_alloc((size_t)x->max_padded * 4);
  x->expert_ids = gt_alloc((size_t)(x->max_padded / block_m + 1) * 4);
  int64_t p = 0;
  for (int32_t e = 0; e < experts; e++) {
    const int64_t start = p;
    for (int64_t s = 0; s < slots; s++)
      if (ids[s] == e) x->sorted_ids[p++] = (int32_t)s;
    while (p % block_m) x->sorted_ids[p++] = (int32_t)slots;
    for (int64_t b = start / block_m; b < p / block_m; b++) x->expert_ids[b] = e;
  }
  for (int i = 0; i < block_m; i++) x->sorted_ids[p++] = (int32_t)slots;
  x->expert_ids[p / block_m - 1] = -1;
  x->num_padded = (int32_t)p;
}

static bool check(const gt_case *c, const char *layout, int64_t m, const void *out, const void *ref, int64_t rows) {
  char what[160];
  snprintf(what, sizeof(what), "%s %s", c->name, layout);
  const double err = gt_compare(out, ref, rows * c->n, c->out, c->n, what);
  const bool ok = err <= gt_tolerance(c);
  printf("%-48s M=%-4lld rel_err %.2e %s\n", what, (long long)m, err, ok ? "ok" : "FAIL");
  return ok;
}

static bool run_indexed(hm_rng *rng, const gt_case *c, const gt_layer_data *d, hm_layer *l, int64_t m, bool down) {
  int32_t *ids = gt_alloc((size_t)(m * TOP_K) * 4);
  route(rng, m, c->experts, ids);
  indexed_meta x;
  const int block_m = hm_layer_block_m(l, m * TOP_K);
  build_indexed(ids, m, c->experts, block_m, &x);
  const int64_t a_rows = down ? m * TOP_K : m, c_rows = m * TOP_K;
  void *a = gt_random(rng, c->act, a_rows * c->k, 1.0f);
  float *topk_w = NULL;
  if (down) {
    topk_w = gt_alloc((size_t)c_rows * 4);
    hm_rng_fill_uniform(rng, topk_w, (size_t)c_rows, 0.0f, 1.0f);
  }
  hm_gemm_args args = {.type = HM_GEMM_INDEXED, .m = m, .a = a, .sorted_ids = x.sorted_ids,
                       .expert_ids = x.expert_ids, .num_padded = &x.num_padded, .max_padded = x.max_padded,
                       .block_m = block_m, .top_k = TOP_K, .a_rows_per_token = down ? 1 : TOP_K,
                       .topk_weights = topk_w};
  void *out = gt_alloc((size_t)(c_rows * c->n) * 2), *ref = gt_alloc((size_t)(c_rows * c->n) * 2);
  gt_reference(c, d, &args, c_rows, ref);
  gt_device_run(engine, l, &args, a_rows, c->k, c_rows, c->n, c->experts, out);
  const bool ok = check(c, down ? "indexed-down+topk_w" : "indexed-gate_up", m, out, ref, c_rows);
  free(ids), free(x.sorted_ids), free(x.expert_ids), free(a), free(topk_w), free(out), free(ref);
  return ok;
}

/* Segments in expert order, each padded by 0..5 unused rows. */
static bool run_contiguous(hm_rng *rng, const gt_case *c, const gt_layer_data *d, hm_layer *l, int64_t m) {
  int32_t *ids = gt_alloc((size_t)(m * TOP_K) * 4);
  route(rng, m, c->experts, ids);
  int32_t *off = gt_alloc((size_t)(c->experts + 1) * 4), *cnt = gt_alloc((size_t)c->experts * 4);
  int64_t rows = 0;
  for (int64_t e = 0; e < c->experts; e++) {
    for (int64_t s = 0; s < m * TOP_K; s++) cnt[e] += ids[s] == e;
    off[e] = (int32_t)rows;
    rows += cnt[e] + (int64_t)(hm_rng_next(rng) % 6);
  }
  off[c->experts] = (int32_t)rows;
  void *a = gt_random(rng, c->act, rows * c->k, 1.0f);
  hm_gemm_args args = {.type = HM_GEMM_GROUPED_CONTIGUOUS, .m = rows, .a = a, .expert_offsets = off,
                       .expert_counts = cnt};
  void *out = gt_alloc((size_t)(rows * c->n) * 2), *ref = gt_alloc((size_t)(rows * c->n) * 2);
  gt_reference(c, d, &args, rows, ref);
  gt_device_run(engine, l, &args, rows, c->k, rows, c->n, c->experts, out);
  const bool ok = check(c, "grouped-contiguous", m, out, ref, rows);
  free(ids), free(off), free(cnt), free(a), free(out), free(ref);
  return ok;
}

static bool run_masked(hm_rng *rng, const gt_case *c, const gt_layer_data *d, hm_layer *l, int64_t m) {
  int32_t *ids = gt_alloc((size_t)(m * TOP_K) * 4);
  route(rng, m, c->experts, ids);
  int32_t *cnt = gt_alloc((size_t)c->experts * 4);
  int64_t max_m = 1;
  for (int64_t e = 0; e < c->experts; e++) {
    for (int64_t s = 0; s < m * TOP_K; s++) cnt[e] += ids[s] == e;
    if (cnt[e] > max_m) max_m = cnt[e];
  }
  max_m += 3; /* rows past a count stay unwritten */
  const int64_t rows = c->experts * max_m;
  void *a = gt_random(rng, c->act, rows * c->k, 1.0f);
  hm_gemm_args args = {.type = HM_GEMM_GROUPED_MASKED, .m = max_m, .a = a, .expert_counts = cnt};
  void *out = gt_alloc((size_t)(rows * c->n) * 2), *ref = gt_alloc((size_t)(rows * c->n) * 2);
  gt_reference(c, d, &args, rows, ref);
  gt_device_run(engine, l, &args, rows, c->k, rows, c->n, c->experts, out);
  const bool ok = check(c, "grouped-masked", m, out, ref, rows);
  free(ids), free(cnt), free(a), free(out), free(ref);
  return ok;
}

static void moe_layouts_match_reference(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_layouts_match_reference"));
  int failed = 0;
  for (size_t i = 0; i < HM_ARRAY_SIZE(cases); i++) {
    const gt_case *c = &cases[i];
    gt_layer_data d;
    gt_layer_data_make(&rng, c, &d);
    hm_layer *l = gt_layer_make(engine, c, &d);
    for (size_t j = 0; j < HM_ARRAY_SIZE(m_list); j++) {
      failed += !run_indexed(&rng, c, &d, l, m_list[j], false);
      failed += !run_indexed(&rng, c, &d, l, m_list[j], true);
      failed += !run_contiguous(&rng, c, &d, l, m_list[j]);
      failed += !run_masked(&rng, c, &d, l, m_list[j]);
    }
    hm_layer_destroy(l);
    gt_layer_data_free(&d);
  }
  if (failed) fail_msg("%d MoE cases out of bound", failed);
}

int main(void) {
  engine = hm_test_cuda_engine_or_skip();
  if (engine == NULL) return HM_TEST_SKIP;
  const struct CMUnitTest tests[] = {cmocka_unit_test(moe_layouts_match_reference)};
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_engine_destroy(engine);
  hm_shutdown();
  return rc;
}
