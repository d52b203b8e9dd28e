/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The three MoE layouts for one routing: each gives, row for row and bit for bit, the
 * dense product of the row with its expert's weights (and bias); rows a layout does not
 * cover (padding, sentinels, experts of other ranks) are left as they were.
 */
#include "test_ref_gemm_util.h"

#define E 8
#define T 37
#define TOPK 3
#define BLOCK_M 16
#define REMOTE 5 /* an expert of another rank: its blocks carry expert id -1 */
#define NO_ID 99 /* junk past *num_padded that must never be read */

/* Experts 3 and 6 get no tokens at all. */
static const int routable[] = {0, 1, 2, 4, 5, 7};

struct routing {
  int arpt; /* A rows per id: TOPK (gate-up gathers tokens) or 1 (down) */
  int64_t a_rows;
  int64_t rows_of[E];
  int32_t ids[E][T];       /* ids of each expert, ascending */
  float weights[T * TOPK]; /* top-k weight of each id */
  int32_t *sorted_ids, *expert_ids;
  int32_t num_padded;
  int64_t max_padded;
  int32_t offsets[E + 1], counts[E];
  int64_t contig_m, max_m;
};

static int64_t round_up(int64_t x, int64_t to) {
  return (x + to - 1) / to * to;
}

static void route_tokens(hm_rng *rng, struct routing *r) {
  for (int t = 0; t < T; t++) {
    int pool[HM_ARRAY_SIZE(routable)];
    memcpy(pool, routable, sizeof(pool));
    for (int s = 0; s < TOPK; s++) {
      int pick = s + (int)(hm_rng_next(rng) % (HM_ARRAY_SIZE(routable) - (size_t)s));
      int e = pool[pick];
      pool[pick] = pool[s];
      int32_t id = t * TOPK + s;
      r->ids[e][r->rows_of[e]++] = id;
      r->weights[id] = hm_rng_uniform(rng, 0.1f, 1.0f);
    }
  }
}

/* sorted_ids / expert_ids as an aligner makes them, plus a sentinel-only block and junk. */
static void build_indexed(struct routing *r) {
  r->max_padded = 2 * BLOCK_M;
  for (int e = 0; e < E; e++) r->max_padded += round_up(r->rows_of[e], BLOCK_M);
  r->sorted_ids = rg_alloc((size_t)r->max_padded * sizeof(int32_t));
  r->expert_ids = rg_alloc((size_t)(r->max_padded / BLOCK_M) * sizeof(int32_t));
  for (int64_t p = 0; p < r->max_padded; p++) r->sorted_ids[p] = -NO_ID;
  for (int64_t b = 0; b < r->max_padded / BLOCK_M; b++) r->expert_ids[b] = NO_ID;
  int32_t p = 0, sentinel = T * TOPK;
  for (int e = 0; e < E; e++) {
    for (int64_t j = 0; j < r->rows_of[e]; j++) r->sorted_ids[p++] = r->ids[e][j];
    while (p % BLOCK_M != 0) r->sorted_ids[p++] = sentinel;
    for (int32_t b = (p - (int32_t)round_up(r->rows_of[e], BLOCK_M)) / BLOCK_M; b < p / BLOCK_M; b++)
      r->expert_ids[b] = e == REMOTE ? -1 : e;
  }
  /* A block of sentinels (the exact one and larger ones) under a real expert: all skipped. */
  for (int j = 0; j < BLOCK_M; j++) r->sorted_ids[p++] = sentinel + j;
  r->expert_ids[p / BLOCK_M - 1] = 0;
  r->num_padded = p;
}

static void build_grouped(struct routing *r) {
  int32_t off = 0;
  r->max_m = 0;
  for (int e = 0; e < E; e++) {
    r->offsets[e] = off;
    r->counts[e] = e == REMOTE ? 0 : (int32_t)r->rows_of[e];
    off += (int32_t)round_up(r->counts[e], BLOCK_M);
    if (r->counts[e] > r->max_m) r->max_m = r->counts[e];
  }
  r->offsets[E] = off;
  r->contig_m = off + 5; /* rows past the last segment are not written either */
  r->max_m += 3;
}

static void routing_make(hm_rng *rng, int arpt, struct routing *r) {
  memset(r, 0, sizeof(*r));
  r->arpt = arpt;
  r->a_rows = (int64_t)T * TOPK / arpt;
  route_tokens(rng, r);
  build_indexed(r);
  build_grouped(r);
}

struct moe_case {
  const char *name;
  hm_quant_format fmt;
  hm_dtype act;
  hm_act_scale_kind kind;
  hm_dtype out;
  int64_t n, k;
  int arpt;
};

/* Everything one case computes; C buffers are in the output type. */
struct moe_run {
  const struct moe_case *t;
  struct routing r;
  hm_host_weights w;
  rg_acts a;
  void *bias;
  float *bias_f32;
  size_t row_bytes;
  unsigned char *expect[E]; /* dense product of each expert's rows, in ids order */
};

static hm_ref_gemm_problem problem(struct moe_run *run, const rg_acts *a, void *c) {
  hm_ref_gemm_problem p = {
      .w = &run->w, .act = run->t->act, .act_scale = run->t->kind, .out = run->t->out, .bias = run->bias};
  p.args = (hm_gemm_args){.a = a->q, .a_scale = a->scales, .c = c};
  return p;
}

/* The reference of the reference: each expert's rows through the dense layout alone. */
static void expect_dense(hm_rng *rng, struct moe_run *run) {
  const struct moe_case *t = run->t;
  for (int e = 0; e < E; e++) {
    int64_t rows = run->r.rows_of[e];
    rg_acts ae;
    rg_acts_make(rng, t->act, t->kind, rows, t->k, &ae);
    for (int64_t j = 0; j < rows; j++) rg_acts_copy_row(&run->a, run->r.ids[e][j] / t->arpt, &ae, j);
    hm_host_weights view = rg_expert_view(&run->w, e);
    run->expect[e] = rg_alloc((size_t)rows * run->row_bytes);
    hm_ref_gemm_problem p = problem(run, &ae, run->expect[e]);
    p.w = &view;
    p.bias = (char *)run->bias + e * run->row_bytes;
    p.args.type = HM_GEMM_DENSE;
    p.args.m = rows;
    HM_ASSERT_OK(hm_ref_gemm(&p));
    double *ref = rg_alloc((size_t)(rows * t->n) * sizeof(double));
    rg_naive(&run->w, e, ae.f32, rows, run->bias_f32, ref);
    double err = rg_rel_error(t->out, run->expect[e], ref, rows * t->n);
    if (err > rg_tolerance(t->out)) fail_msg("%s: expert %d rel error %.3g", t->name, e, err);
    free(ref);
    rg_acts_free(&ae);
  }
}

static void run_make(hm_rng *rng, const struct moe_case *t, struct moe_run *run) {
  memset(run, 0, sizeof(*run));
  run->t = t;
  routing_make(rng, t->arpt, &run->r);
  rg_weights(rng, &t->fmt, E, t->n, t->k, &run->w);
  rg_acts_make(rng, t->act, t->kind, run->r.a_rows, t->k, &run->a);
  run->bias_f32 = rg_alloc((size_t)(E * t->n) * sizeof(float));
  run->bias = rg_bias_make(rng, t->out, E * t->n, run->bias_f32);
  run->row_bytes = (size_t)t->n * (size_t)hm_dtype_bits(t->out) / 8;
  expect_dense(rng, run);
}

static void run_free(struct moe_run *run) {
  for (int e = 0; e < E; e++) free(run->expect[e]);
  free(run->r.sorted_ids);
  free(run->r.expert_ids);
  free(run->bias);
  free(run->bias_f32);
  rg_acts_free(&run->a);
  hm_host_weights_free(&run->w);
}

/* The expert an id was routed to, or -1. */
static int expert_of(const struct routing *r, int32_t id, int64_t *index) {
  for (int e = 0; e < E; e++)
    for (int64_t j = 0; j < r->rows_of[e]; j++)
      if (r->ids[e][j] == id) {
        *index = j;
        return e;
      }
  return -1;
}

static void check_indexed(struct moe_run *run, bool weighted) {
  const struct moe_case *t = run->t;
  int64_t c_rows = (int64_t)T * TOPK;
  unsigned char *c = rg_alloc((size_t)c_rows * run->row_bytes);
  rg_fill_untouched(c, (size_t)c_rows * run->row_bytes);
  hm_ref_gemm_problem p = problem(run, &run->a, c);
  int32_t num_padded = run->r.num_padded;
  p.args.type = HM_GEMM_INDEXED;
  p.args.m = T;
  p.args.sorted_ids = run->r.sorted_ids;
  p.args.expert_ids = run->r.expert_ids;
  p.args.num_padded = &num_padded;
  p.args.max_padded = run->r.max_padded;
  p.args.block_m = BLOCK_M;
  p.args.top_k = TOPK;
  p.args.a_rows_per_token = t->arpt;
  p.args.topk_weights = weighted ? run->r.weights : NULL;
  HM_ASSERT_OK(hm_ref_gemm(&p));
  for (int32_t id = 0; id < c_rows; id++) {
    int64_t j = 0;
    int e = expert_of(&run->r, id, &j);
    const unsigned char *row = c + (size_t)id * run->row_bytes;
    if (e < 0 || e == REMOTE) {
      if (!rg_untouched(row, run->row_bytes))
        fail_msg("%s: indexed row %d (expert %d) was written", t->name, id, e);
      continue;
    }
    const unsigned char *want = run->expect[e] + (size_t)j * run->row_bytes;
    for (int64_t n = 0; n < t->n && weighted; n++) {
      /* The weight scales the finished f32 value, before rounding to the output type. */
      float scaled = hm_load_f32(t->out, want, n) * run->r.weights[id];
      /* Plus one f16 subnormal step (2^-24): below 2^-14 the spacing is fixed, not relative. */
      double tol = t->out == HM_F32 ? 0
                   : t->out == HM_F16 ? fabs(scaled) * 1e-3 + 0x1p-24
                                      : fabs(scaled) * 8e-3;
      if (fabs(hm_load_f32(t->out, row, n) - scaled) > tol)
        fail_msg("%s: weighted row %d col %lld: %g, want %g", t->name, id, (long long)n,
                 hm_load_f32(t->out, row, n), scaled);
    }
    if (!weighted && memcmp(row, want, run->row_bytes) != 0)
      fail_msg("%s: indexed row %d differs from expert %d's dense row %lld", t->name, id, e, (long long)j);
  }
  free(c);
}

/* Contiguous (masked false) or masked layout; rows with no expert's token stay unwritten. */
static void check_grouped(hm_rng *rng, struct moe_run *run, bool masked) {
  const struct moe_case *t = run->t;
  const struct routing *r = &run->r;
  int64_t rows = masked ? E * r->max_m : r->contig_m;
  rg_acts a; /* random padding rows: whatever they hold must not matter */
  rg_acts_make(rng, t->act, t->kind, rows, t->k, &a);
  unsigned char *c = rg_alloc((size_t)rows * run->row_bytes);
  rg_fill_untouched(c, (size_t)rows * run->row_bytes);
  const unsigned char **want = calloc((size_t)rows, sizeof(*want));
  assert_non_null(want);
  for (int e = 0; e < E; e++)
    for (int64_t j = 0; j < r->counts[e]; j++) {
      int64_t row = (masked ? e * r->max_m : r->offsets[e]) + j;
      rg_acts_copy_row(&run->a, r->ids[e][j] / t->arpt, &a, row);
      want[row] = run->expect[e] + (size_t)j * run->row_bytes;
    }
  hm_ref_gemm_problem p = problem(run, &a, c);
  p.args.type = masked ? HM_GEMM_GROUPED_MASKED : HM_GEMM_GROUPED_CONTIGUOUS;
  p.args.m = masked ? r->max_m : r->contig_m;
  p.args.expert_offsets = masked ? NULL : r->offsets;
  p.args.expert_counts = r->counts;
  HM_ASSERT_OK(hm_ref_gemm(&p));
  for (int64_t row = 0; row < rows; row++) {
    const unsigned char *got = c + (size_t)row * run->row_bytes;
    if (want[row] == NULL && !rg_untouched(got, run->row_bytes))
      fail_msg("%s: padding row %lld was written", t->name, (long long)row);
    if (want[row] != NULL && memcmp(got, want[row], run->row_bytes) != 0)
      fail_msg("%s: %s row %lld differs from its expert's dense row", t->name,
               masked ? "masked" : "contiguous", (long long)row);
  }
  free(want);
  free(c);
  rg_acts_free(&a);
}

static void layouts_agree(const struct moe_case *t) {
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed(t->name));
  struct moe_run run;
  run_make(&rng, t, &run);
  check_indexed(&run, false);
  check_indexed(&run, true);
  check_grouped(&rng, &run, false);
  check_grouped(&rng, &run, true);
  run_free(&run);
}

static void w4a16_gate_up(void **state) {
  (void)state;
  const struct moe_case t = {"moe w4a16 gate_up",
                             rg_format(HM_U4, HM_BF16, HM_SCALE_GROUP, 128, true),
                             HM_BF16,
                             HM_ACT_SCALE_NONE,
                             HM_F32,
                             72,
                             256,
                             TOPK};
  layouts_agree(&t);
}

static void fp8_block_down(void **state) {
  (void)state;
  const struct moe_case t = {"moe w8a8-fp8 down",
                             rg_format(HM_F8E4M3, HM_F32, HM_SCALE_BLOCK, 128, false),
                             HM_F8E4M3,
                             HM_ACT_SCALE_GROUP128,
                             HM_BF16,
                             128,
                             384,
                             1};
  layouts_agree(&t);
}

static void int8_channel_gate_up(void **state) {
  (void)state;
  const struct moe_case t = {"moe w8a8-int8 gate_up",
                             rg_format(HM_I8, HM_F32, HM_SCALE_CHANNEL, 0, false),
                             HM_I8,
                             HM_ACT_SCALE_TOKEN,
                             HM_F16,
                             40,
                             200,
                             TOPK};
  layouts_agree(&t);
}

/* Contiguous segments longer than a wave of rows, one of them across a wave boundary. */
static void long_segments(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe long segments"));
  const int32_t offsets[4] = {0, 1504, 1504, 3008}, counts[3] = {1500, 0, 1497};
  const int64_t m = 3010, n = 24, k = 64;
  hm_quant_format f = rg_format(HM_U8, HM_F16, HM_SCALE_GROUP, 32, true);
  hm_host_weights w = {0};
  rg_weights(&rng, &f, 3, n, k, &w);
  rg_acts a;
  rg_acts_make(&rng, HM_F16, HM_ACT_SCALE_NONE, m, k, &a);
  float *c = rg_alloc((size_t)(m * n) * sizeof(float)), *want = rg_alloc((size_t)(m * n) * sizeof(float));
  rg_fill_untouched(c, (size_t)(m * n) * sizeof(float));
  hm_ref_gemm_problem p = {.w = &w, .act = HM_F16, .out = HM_F32};
  p.args = (hm_gemm_args){.type = HM_GEMM_GROUPED_CONTIGUOUS, .m = m, .a = a.q, .c = c};
  p.args.expert_offsets = offsets;
  p.args.expert_counts = counts;
  HM_ASSERT_OK(hm_ref_gemm(&p));
  for (int e = 0; e < 3; e++) {
    hm_host_weights view = rg_expert_view(&w, e);
    hm_ref_gemm_problem d = {.w = &view, .act = HM_F16, .out = HM_F32};
    d.args = (hm_gemm_args){.type = HM_GEMM_DENSE,
                            .m = counts[e],
                            .a = (const uint16_t *)a.q + offsets[e] * k,
                            .c = want + offsets[e] * n};
    HM_ASSERT_OK(hm_ref_gemm(&d));
    if (memcmp(c + offsets[e] * n, want + offsets[e] * n, (size_t)(counts[e] * n) * sizeof(float)) != 0)
      fail_msg("expert %d's segment differs from its dense product", e);
    int64_t pad_first = offsets[e] + counts[e];
    assert_true(rg_untouched(c + pad_first * n, (size_t)((offsets[e + 1] - pad_first) * n) * sizeof(float)));
  }
  assert_true(rg_untouched(c + offsets[3] * n, (size_t)((m - offsets[3]) * n) * sizeof(float)));
  free(c);
  free(want);
  rg_acts_free(&a);
  hm_host_weights_free(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(w4a16_gate_up),
      cmocka_unit_test(fp8_block_down),
      cmocka_unit_test(int8_channel_gate_up),
      cmocka_unit_test(long_segments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
