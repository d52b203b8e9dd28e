/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Bad inputs to the reference GEMM: each is refused with HM_INVALID_ARGUMENT, a message
 * naming the bad value, and no write to C.
 */
#include "test_ref_gemm_util.h"

#define E 4
#define N 16
#define K 64
#define M 6
#define TOPK 2
#define BLOCK_M 4

struct fixture {
  hm_host_weights w;
  rg_acts a;
  float c[E * M * N];
  int32_t offsets[E + 1], counts[E];
  int32_t sorted_ids[4 * BLOCK_M], expert_ids[4], num_padded;
};

static struct fixture fx;

static int setup(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("ref_gemm_invalid"));
  hm_quant_format f = rg_format(HM_I8, HM_F32, HM_SCALE_CHANNEL, 0, false);
  rg_weights(&rng, &f, E, N, K, &fx.w);
  rg_acts_make(&rng, HM_I8, HM_ACT_SCALE_TOKEN, E * M, K, &fx.a);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  rg_acts_free(&fx.a);
  hm_host_weights_free(&fx.w);
  return 0;
}

/* A valid problem of each layout over the fixture; tests break one thing at a time. */
static hm_ref_gemm_problem valid(hm_gemm_type type) {
  static const int32_t offsets[E + 1] = {0, 2, 2, 4, 6}, counts[E] = {2, 0, 1, 2};
  /* Ids 0..11 over four blocks: expert 0, sentinels (12) under expert 3, expert -1, expert 2. */
  static const int32_t sorted[4 * BLOCK_M] = {0, 5, 9, 12, 12, 12, 12, 12, 1, 2, 3, 4, 7, 11, 100, 12};
  static const int32_t experts[4] = {0, 3, -1, 2};
  memcpy(fx.offsets, offsets, sizeof(offsets));
  memcpy(fx.counts, counts, sizeof(counts));
  memcpy(fx.sorted_ids, sorted, sizeof(sorted));
  memcpy(fx.expert_ids, experts, sizeof(experts));
  fx.num_padded = 4 * BLOCK_M;
  rg_fill_untouched(fx.c, sizeof(fx.c));
  hm_ref_gemm_problem p = {.w = &fx.w, .act = HM_I8, .act_scale = HM_ACT_SCALE_TOKEN, .out = HM_F32};
  p.args = (hm_gemm_args){.type = type, .m = M, .a = fx.a.q, .a_scale = fx.a.scales, .c = fx.c};
  p.args.expert_offsets = fx.offsets;
  p.args.expert_counts = fx.counts;
  p.args.sorted_ids = fx.sorted_ids;
  p.args.expert_ids = fx.expert_ids;
  p.args.num_padded = &fx.num_padded;
  p.args.max_padded = 4 * BLOCK_M;
  p.args.block_m = BLOCK_M;
  p.args.top_k = TOPK;
  p.args.a_rows_per_token = TOPK;
  return p;
}

static void expect_refused(const hm_ref_gemm_problem *p, const char *message, int line) {
  hm_status st = hm_ref_gemm(p);
  if (st != HM_INVALID_ARGUMENT)
    fail_msg("line %d: got %s, want invalid argument (%s)", line, hm_status_str(st), hm_last_error());
  if (strstr(hm_last_error(), message) == NULL)
    fail_msg("line %d: message '%s' does not name '%s'", line, hm_last_error(), message);
  if (!rg_untouched(fx.c, sizeof(fx.c))) fail_msg("line %d: C was written", line);
}

#define REFUSED(p, message) expect_refused(&(p), message, __LINE__)

static void valid_problems_pass(void **state) {
  (void)state;
  const hm_gemm_type types[] = {HM_GEMM_DENSE, HM_GEMM_INDEXED, HM_GEMM_GROUPED_CONTIGUOUS,
                                HM_GEMM_GROUPED_MASKED};
  for (size_t i = 0; i < HM_ARRAY_SIZE(types); i++) {
    hm_ref_gemm_problem p = valid(types[i]);
    HM_ASSERT_OK(hm_ref_gemm(&p));
  }
}

static void bad_problem(void **state) {
  (void)state;
  assert_int_equal(hm_ref_gemm(NULL), HM_INVALID_ARGUMENT);
  hm_ref_gemm_problem p = valid(HM_GEMM_DENSE);
  p.w = NULL;
  REFUSED(p, "w must not be NULL");
  hm_host_weights w = fx.w;
  p = valid(HM_GEMM_DENSE);
  p.w = &w;
  w.qweight = NULL;
  REFUSED(p, "qweight");
  w = fx.w;
  w.scales = NULL;
  REFUSED(p, "scales");
  w = fx.w;
  w.fmt.scale = HM_E8M0;
  REFUSED(p, "e8m0");
  w = fx.w;
  w.experts = 0;
  REFUSED(p, "0 experts");
  p = valid(HM_GEMM_DENSE);
  p.act = HM_U4;
  REFUSED(p, "activation type u4");
  p = valid(HM_GEMM_DENSE);
  p.act = HM_F16;
  REFUSED(p, "f16 takes no scales");
  p = valid(HM_GEMM_DENSE);
  p.act_scale = HM_ACT_SCALE_NONE;
  REFUSED(p, "i8 needs TOKEN or GROUP128");
  p = valid(HM_GEMM_DENSE);
  p.args.a_scale = NULL;
  REFUSED(p, "a_scale");
  p = valid(HM_GEMM_DENSE);
  p.out = HM_I8;
  REFUSED(p, "output type i8");
  p = valid(HM_GEMM_DENSE);
  p.args.a = NULL;
  REFUSED(p, "args.a must not be NULL");
  p = valid(HM_GEMM_DENSE);
  p.args.c = NULL;
  REFUSED(p, "args.c must not be NULL");
  p = valid(HM_GEMM_DENSE);
  p.threads = -1;
  REFUSED(p, "threads = -1");
  p = valid(HM_GEMM_DENSE);
  p.args.m = -1;
  REFUSED(p, "m = -1");
  p = valid(HM_GEMM_DENSE);
  p.args.type = (hm_gemm_type)9;
  REFUSED(p, "GEMM type 9");
}

static void bad_grouped_metadata(void **state) {
  (void)state;
  hm_ref_gemm_problem p = valid(HM_GEMM_GROUPED_CONTIGUOUS);
  p.args.expert_offsets = NULL;
  REFUSED(p, "expert_offsets");
  p = valid(HM_GEMM_GROUPED_CONTIGUOUS);
  fx.offsets[0] = -1;
  REFUSED(p, "expert_offsets[0] = -1");
  p = valid(HM_GEMM_GROUPED_CONTIGUOUS);
  fx.offsets[2] = 1;
  REFUSED(p, "expert_offsets[2] = 1");
  p = valid(HM_GEMM_GROUPED_CONTIGUOUS);
  fx.counts[2] = 3;
  REFUSED(p, "expert_counts[2] = 3");
  p = valid(HM_GEMM_GROUPED_CONTIGUOUS);
  fx.counts[1] = -1;
  REFUSED(p, "expert_counts[1] = -1");
  p = valid(HM_GEMM_GROUPED_CONTIGUOUS);
  fx.offsets[E] = M + 1;
  REFUSED(p, "expert_offsets[4] = 7");
  p = valid(HM_GEMM_GROUPED_MASKED);
  p.args.expert_counts = NULL;
  REFUSED(p, "expert_counts");
  p = valid(HM_GEMM_GROUPED_MASKED);
  fx.counts[3] = M + 1;
  REFUSED(p, "expert_counts[3] = 7");
  p = valid(HM_GEMM_GROUPED_MASKED);
  fx.counts[0] = -2;
  REFUSED(p, "expert_counts[0] = -2");
}

static void bad_indexed_metadata(void **state) {
  (void)state;
  hm_ref_gemm_problem p = valid(HM_GEMM_INDEXED);
  p.args.sorted_ids = NULL;
  REFUSED(p, "sorted_ids");
  p = valid(HM_GEMM_INDEXED);
  p.args.expert_ids = NULL;
  REFUSED(p, "expert_ids");
  p = valid(HM_GEMM_INDEXED);
  p.args.num_padded = NULL;
  REFUSED(p, "num_padded");
  p = valid(HM_GEMM_INDEXED);
  p.args.block_m = 0;
  REFUSED(p, "block_m = 0");
  p = valid(HM_GEMM_INDEXED);
  p.args.top_k = 0;
  REFUSED(p, "top_k = 0");
  p = valid(HM_GEMM_INDEXED);
  p.args.a_rows_per_token = 3;
  REFUSED(p, "a_rows_per_token = 3");
  p = valid(HM_GEMM_INDEXED);
  fx.num_padded = 4 * BLOCK_M + 1;
  REFUSED(p, "*num_padded = 17");
  p = valid(HM_GEMM_INDEXED);
  fx.num_padded = -1;
  REFUSED(p, "*num_padded = -1");
  p = valid(HM_GEMM_INDEXED);
  fx.expert_ids[1] = E;
  REFUSED(p, "expert_ids[1] = 4");
  p = valid(HM_GEMM_INDEXED);
  fx.expert_ids[2] = -2;
  REFUSED(p, "expert_ids[2] = -2");
  p = valid(HM_GEMM_INDEXED);
  fx.sorted_ids[5] = -1;
  REFUSED(p, "sorted_ids[5] = -1");
  p = valid(HM_GEMM_INDEXED);
  fx.sorted_ids[13] = 5;
  REFUSED(p, "sorted_ids[13] = 5 repeats");
  p = valid(HM_GEMM_INDEXED);
  p.args.m = INT32_MAX;
  REFUSED(p, "m * top_k");
}

/* Only the padded range in use is read: junk past *num_padded is never looked at. */
static void junk_past_num_padded_is_ignored(void **state) {
  (void)state;
  hm_ref_gemm_problem p = valid(HM_GEMM_INDEXED);
  fx.num_padded = 2 * BLOCK_M;
  fx.sorted_ids[2 * BLOCK_M] = -5;
  fx.expert_ids[2] = 77;
  HM_ASSERT_OK(hm_ref_gemm(&p));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(valid_problems_pass),
      cmocka_unit_test(bad_problem),
      cmocka_unit_test(bad_grouped_metadata),
      cmocka_unit_test(bad_indexed_metadata),
      cmocka_unit_test(junk_past_num_padded_is_ignored),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
