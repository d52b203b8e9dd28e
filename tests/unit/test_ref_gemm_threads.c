/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The reference GEMM's result is a fixed function of each row: bit for bit the same on
 * any thread count, from HUMMING_HOST_THREADS, and whatever rows share the call.
 */
#include "params.h"
#include "test_ref_gemm_util.h"

#define E 4
#define T 50
#define TOPK 2
#define BLOCK_M 8

static const int thread_counts[] = {1, 2, 3, 7, 16};

struct indexed_meta {
  int32_t sorted_ids[E * (T + BLOCK_M)];
  int32_t expert_ids[E * (T + BLOCK_M) / BLOCK_M];
  int32_t num_padded;
  float weights[T * TOPK];
};

/* Each token to TOPK distinct random experts, sorted by expert, padded to BLOCK_M. */
static void make_indexed(hm_rng *rng, struct indexed_meta *meta) {
  int32_t expert_of[T * TOPK];
  for (int t = 0; t < T; t++) {
    int first = (int)(hm_rng_next(rng) % E);
    expert_of[t * TOPK] = first;
    expert_of[t * TOPK + 1] = (first + 1 + (int)(hm_rng_next(rng) % (E - 1))) % E;
  }
  int32_t p = 0;
  for (int e = 0; e < E; e++) {
    int32_t start = p;
    for (int32_t id = 0; id < T * TOPK; id++)
      if (expert_of[id] == e) meta->sorted_ids[p++] = id;
    while (p % BLOCK_M != 0) meta->sorted_ids[p++] = T * TOPK;
    for (int32_t b = start / BLOCK_M; b < p / BLOCK_M; b++) meta->expert_ids[b] = e;
  }
  meta->num_padded = p;
  hm_rng_fill_uniform(rng, meta->weights, T * TOPK, 0.1f, 1.0f);
}

/* Runs p on each thread count (0 included) and checks every result equals the first. */
static void same_on_every_thread_count(hm_ref_gemm_problem *p, size_t c_bytes) {
  void *first = rg_alloc(c_bytes), *again = rg_alloc(c_bytes);
  rg_fill_untouched(first, c_bytes);
  p->threads = 1;
  p->args.c = first;
  HM_ASSERT_OK(hm_ref_gemm(p));
  for (size_t i = 0; i <= HM_ARRAY_SIZE(thread_counts); i++) {
    rg_fill_untouched(again, c_bytes);
    p->threads = i < HM_ARRAY_SIZE(thread_counts) ? thread_counts[i] : 0;
    p->args.c = again;
    HM_ASSERT_OK(hm_ref_gemm(p));
    if (memcmp(first, again, c_bytes) != 0) fail_msg("%d threads differ from 1 thread", p->threads);
  }
  free(first);
  free(again);
}

static void dense_bit_exact_across_threads(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("ref_gemm_threads_dense"));
  hm_quant_format f = rg_format(HM_U4, HM_BF16, HM_SCALE_GROUP, 128, true);
  hm_host_weights w = {0};
  rg_weights(&rng, &f, 1, 197, 1024, &w);
  rg_acts a;
  rg_acts_make(&rng, HM_BF16, HM_ACT_SCALE_NONE, 301, 1024, &a);
  hm_ref_gemm_problem p = {.w = &w, .act = HM_BF16, .out = HM_F32};
  p.args = (hm_gemm_args){.type = HM_GEMM_DENSE, .m = 301, .a = a.q};
  same_on_every_thread_count(&p, (size_t)301 * 197 * sizeof(float));
  rg_acts_free(&a);
  hm_host_weights_free(&w);
}

static void indexed_bit_exact_across_threads(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("ref_gemm_threads_indexed"));
  hm_quant_format f = rg_format(HM_F8E4M3, HM_F32, HM_SCALE_BLOCK, 128, false);
  hm_host_weights w = {0};
  rg_weights(&rng, &f, E, 256, 512, &w);
  rg_acts a;
  rg_acts_make(&rng, HM_F8E4M3, HM_ACT_SCALE_GROUP128, T, 512, &a);
  struct indexed_meta meta;
  make_indexed(&rng, &meta);
  hm_ref_gemm_problem p = {.w = &w, .act = HM_F8E4M3, .act_scale = HM_ACT_SCALE_GROUP128, .out = HM_BF16};
  p.args = (hm_gemm_args){.type = HM_GEMM_INDEXED,
                          .m = T,
                          .a = a.q,
                          .a_scale = a.scales,
                          .sorted_ids = meta.sorted_ids,
                          .expert_ids = meta.expert_ids,
                          .num_padded = &meta.num_padded,
                          .max_padded = meta.num_padded,
                          .block_m = BLOCK_M,
                          .top_k = TOPK,
                          .a_rows_per_token = TOPK,
                          .topk_weights = meta.weights};
  same_on_every_thread_count(&p, (size_t)T * TOPK * 256 * 2);
  rg_acts_free(&a);
  hm_host_weights_free(&w);
}

static void default_threads_follow_environment(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("ref_gemm_threads_env"));
  hm_quant_format f = rg_format(HM_I8, HM_F32, HM_SCALE_CHANNEL, 0, false);
  hm_host_weights w = {0};
  rg_weights(&rng, &f, 1, 64, 256, &w);
  rg_acts a;
  rg_acts_make(&rng, HM_I8, HM_ACT_SCALE_TOKEN, 40, 256, &a);
  setenv("HUMMING_HOST_THREADS", "5", 1);
  hm_params_reload();
  hm_ref_gemm_problem p = {.w = &w, .act = HM_I8, .act_scale = HM_ACT_SCALE_TOKEN, .out = HM_F16};
  p.args = (hm_gemm_args){.type = HM_GEMM_DENSE, .m = 40, .a = a.q, .a_scale = a.scales};
  same_on_every_thread_count(&p, (size_t)40 * 64 * 2);
  unsetenv("HUMMING_HOST_THREADS");
  hm_params_reload();
  rg_acts_free(&a);
  hm_host_weights_free(&w);
}

/* A row alone (M = 1) and inside M = 2100 (more than one wave of rows) give the same bits. */
static void rows_do_not_depend_on_batch(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("ref_gemm_batch_invariance"));
  const int64_t m = 2100, n = 100, k = 200;
  hm_quant_format f = rg_format(HM_BF16, HM_BF16, HM_SCALE_NONE, 0, false);
  hm_host_weights w = {0};
  rg_weights(&rng, &f, 1, n, k, &w);
  rg_acts a;
  rg_acts_make(&rng, HM_BF16, HM_ACT_SCALE_NONE, m, k, &a);
  float *all = rg_alloc((size_t)(m * n) * sizeof(float)), one[100];
  hm_ref_gemm_problem p = {.w = &w, .act = HM_BF16, .out = HM_F32};
  p.args = (hm_gemm_args){.type = HM_GEMM_DENSE, .m = m, .a = a.q, .c = all};
  HM_ASSERT_OK(hm_ref_gemm(&p));
  const int64_t rows[] = {0, 1, 127, 128, 129, 2047, 2048, 2099};
  for (size_t i = 0; i < HM_ARRAY_SIZE(rows); i++) {
    p.args.m = 1;
    p.args.a = (const uint16_t *)a.q + rows[i] * k;
    p.args.c = one;
    HM_ASSERT_OK(hm_ref_gemm(&p));
    if (memcmp(one, all + rows[i] * n, sizeof(one)) != 0)
      fail_msg("row %lld alone differs", (long long)rows[i]);
  }
  free(all);
  rg_acts_free(&a);
  hm_host_weights_free(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(dense_bit_exact_across_threads),
      cmocka_unit_test(indexed_bit_exact_across_threads),
      cmocka_unit_test(default_threads_follow_environment),
      cmocka_unit_test(rows_do_not_depend_on_batch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
