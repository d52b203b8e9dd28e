/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Benchmark of dispatch and combine with identity experts, checked before it is timed:
 * with every slot of a token carrying the same row, combine must give x * sum(w).
 * Next to it, a plain all-to-all of the same bytes over the same transport.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "numfmt.h"

struct bench_inputs {
  int64_t tokens;
  uint16_t *x; /* host copies for the check */
  float *w;
  void *d_x, *d_ids, *d_w, *d_y;
};

/* xorshift64*: reproducible per rank without touching any global generator. */
static uint64_t next_random(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}

static float uniform(uint64_t *s) {
  return (float)((next_random(s) >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* Each token picks top_k distinct experts uniformly. */
static void random_ids(uint64_t *s, int64_t experts, int top_k, int32_t *ids, int32_t *scratch) {
  for (int64_t e = 0; e < experts; e++) scratch[e] = (int32_t)e;
  for (int j = 0; j < top_k; j++) {
    int64_t pick = j + (int64_t)(next_random(s) % (uint64_t)(experts - j));
    int32_t tmp = scratch[j];
    scratch[j] = scratch[pick];
    scratch[pick] = tmp;
    ids[j] = scratch[j];
  }
}

static hm_status upload_inputs(hm_comm *c, struct bench_inputs *in, const int32_t *ids) {
  hm_engine *e = c->engine;
  size_t n = (size_t)in->tokens, h = (size_t)c->cfg.hidden, k = (size_t)c->cfg.top_k;
  size_t y_bytes = n * h * (c->cfg.combine_dtype == HM_F32 ? 4 : 2);
  HM_CHECK(hm_mem_alloc(e, n * h * 2, &in->d_x));
  HM_CHECK(hm_mem_alloc(e, n * k * 4, &in->d_ids));
  HM_CHECK(hm_mem_alloc(e, n * k * 4, &in->d_w));
  HM_CHECK(hm_mem_alloc(e, y_bytes, &in->d_y));
  HM_CHECK(hm_mem_upload(e, in->d_x, in->x, n * h * 2));
  HM_CHECK(hm_mem_upload(e, in->d_ids, ids, n * k * 4));
  return hm_mem_upload(e, in->d_w, in->w, n * k * 4);
}

static void free_inputs(hm_comm *c, struct bench_inputs *in) {
  free(in->x);
  free(in->w);
  hm_mem_free(c->engine, in->d_x);
  hm_mem_free(c->engine, in->d_ids);
  hm_mem_free(c->engine, in->d_w);
  hm_mem_free(c->engine, in->d_y);
}

static hm_status make_inputs(hm_comm *c, int64_t tokens, struct bench_inputs *in) {
  memset(in, 0, sizeof(*in));
  in->tokens = tokens;
  size_t n = (size_t)tokens, h = (size_t)c->cfg.hidden, k = (size_t)c->cfg.top_k;
  uint64_t seed = 0x9e3779b97f4a7c15ull ^ ((uint64_t)c->plan.rank + 1) * 0xbf58476d1ce4e5b9ull;
  in->x = malloc(n * h * 2);
  in->w = malloc(n * k * 4);
  int32_t *ids = malloc(n * k * 4), *scratch = malloc((size_t)c->cfg.experts * 4);
  hm_status ret = HM_OK;
  if (!in->x || !in->w || !ids || !scratch)
    HM_FAIL_GOTO(HM_OUT_OF_MEMORY, done, "benchmark inputs, %zu tokens", n);
  for (size_t i = 0; i < n * h; i++) in->x[i] = hm_bf16_from_f32(uniform(&seed));
  for (size_t t = 0; t < n; t++) {
    random_ids(&seed, c->cfg.experts, c->cfg.top_k, ids + t * k, scratch);
    for (size_t j = 0; j < k; j++) in->w[t * k + j] = 0.5f + 0.5f * fabsf(uniform(&seed));
  }
  ret = upload_inputs(c, in, ids);
done:
  free(ids);
  free(scratch);
  return ret;
}

/*
 * Every slot of a token carries its row, so combine gives x * sum(w), up to the payload's
 * rounding: relative for normal values, and for fp8 also an absolute half step of the
 * smallest subnormal, scale * 2^-10 with scale = amax / 448 (x is in [-1, 1]).
 */
static bool close_enough(float got, float want, float sum_w, hm_comm_payload p) {
  double rel = p == HM_COMM_PAYLOAD_FP8 ? 0.07 : 0.01;
  double abs_slack = p == HM_COMM_PAYLOAD_FP8 ? sum_w * (1.0 / 448.0) * (1.0 / 1024.0) : 0.0;
  return fabs((double)got - want) <= rel * fabs((double)want) + abs_slack + 1e-7;
}

static hm_status count_wrong(hm_comm *c, const struct bench_inputs *in, int64_t tokens, hm_comm_payload p,
                             int64_t *wrong) {
  size_t h = (size_t)c->cfg.hidden, k = (size_t)c->cfg.top_k, n = (size_t)tokens * h;
  bool f32 = c->cfg.combine_dtype == HM_F32;
  void *y = malloc(n * (f32 ? 4 : 2) + 1);
  if (y == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "benchmark check");
  hm_status ret = hm_mem_download(c->engine, y, in->d_y, n * (f32 ? 4 : 2));
  *wrong = 0;
  for (size_t i = 0; ret == HM_OK && i < n; i++) {
    size_t t = i / h;
    float sum_w = 0;
    for (size_t j = 0; j < k; j++) sum_w += in->w[t * k + j];
    float got = f32 ? ((float *)y)[i] : hm_bf16_to_f32(((uint16_t *)y)[i]);
    if (!close_enough(got, hm_bf16_to_f32(in->x[i]) * sum_w, sum_w, p)) (*wrong)++;
  }
  free(y);
  return ret;
}

/* A tiny all-gather lines the ranks up, so a timing does not include a peer's lateness. */
static hm_status line_up(hm_comm *c) {
  int32_t mine = 0, *all = calloc((size_t)c->plan.world, sizeof(int32_t));
  if (all == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "barrier");
  hm_status ret = hm_comm_allgather_host(c, c->tr, &mine, all, sizeof(mine), NULL, "benchmark barrier");
  free(all);
  return ret;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(*v), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static hm_status time_round(hm_comm *c, hm_comm_batch *b, const hm_comm_tokens *tok, void *y, double *d_us,
                            double *c_us) {
  hm_comm_expert_batch eb;
  HM_CHECK(line_up(c));
  double t0 = hm_comm_now();
  HM_CHECK(hm_comm_dispatch(b, tok, c->stream, &eb));
  HM_CHECK(hm_comm_synchronize(c, c->stream));
  double t1 = hm_comm_now();
  HM_CHECK(hm_comm_loopback(b, c->stream));
  HM_CHECK(hm_comm_synchronize(c, c->stream));
  HM_CHECK(line_up(c));
  double t2 = hm_comm_now();
  HM_CHECK(hm_comm_combine(b, y, c->stream));
  HM_CHECK(hm_comm_synchronize(c, c->stream));
  *d_us = (t1 - t0) * 1e6;
  *c_us = (hm_comm_now() - t2) * 1e6;
  return HM_OK;
}

/* The same bytes as dispatch sent, split evenly over all ranks. */
static hm_status time_alltoall(hm_comm *c, double bytes, void *buf, double *us) {
  int world = c->plan.world;
  size_t per_peer = (size_t)(bytes / world);
  hm_comm_xfer *x = calloc(2 * (size_t)world, sizeof(*x));
  if (x == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "all-to-all transfers");
  for (int p = 0; p < world; p++) {
    x[p] = (hm_comm_xfer){p, (char *)buf + per_peer * (size_t)p, per_peer};
    x[world + p] = (hm_comm_xfer){p, (char *)buf + per_peer * (size_t)(world + p), per_peer};
  }
  hm_status ret = line_up(c);
  double t0 = hm_comm_now();
  if (ret == HM_OK) ret = c->tr->ops->exchange(c->tr, x, world, x + world, world, c->stream, "all-to-all");
  if (ret == HM_OK) ret = hm_comm_synchronize(c, c->stream);
  *us = (hm_comm_now() - t0) * 1e6;
  free(x);
  return ret;
}

static hm_status run_size(hm_comm *c, hm_comm_batch *b, const struct bench_inputs *in, int64_t tokens,
                          int iters, int warmup, double *scratch, hm_comm_bench_row *row) {
  hm_comm_tokens tok = {tokens, in->d_x, in->d_ids, in->d_w};
  hm_comm_payload p = row->payload;
  double d_us, c_us;
  HM_CHECK(time_round(c, b, &tok, in->d_y, &d_us, &c_us));
  HM_CHECK(count_wrong(c, in, tokens, p, &row->wrong));
  double *ds = scratch, *cs = scratch + iters, *as = scratch + 2 * iters;
  for (int i = 0; i < warmup + iters; i++) {
    HM_CHECK(time_round(c, b, &tok, in->d_y, &d_us, &c_us));
    if (i >= warmup) ds[i - warmup] = d_us, cs[i - warmup] = c_us;
  }
  hm_comm_batch_sent_bytes(b, &row->dispatch_bytes, &row->combine_bytes);
  void *buf = NULL;
  size_t a2a_bytes = (size_t)row->dispatch_bytes * 2 + 64;
  HM_CHECK(hm_mem_alloc(c->engine, a2a_bytes, &buf));
  hm_status ret = HM_OK;
  for (int i = 0; ret == HM_OK && i < warmup + iters; i++)
    ret = time_alltoall(c, row->dispatch_bytes, buf, i >= warmup ? &as[i - warmup] : &d_us);
  hm_mem_free(c->engine, buf);
  HM_CHECK(ret);
  row->tokens = tokens;
  row->dispatch_us = median(ds, iters);
  row->combine_us = median(cs, iters);
  row->alltoall_us = median(as, iters);
  row->dispatch_gbps = row->dispatch_bytes / (row->dispatch_us * 1e3);
  row->combine_gbps = row->combine_bytes / (row->combine_us * 1e3);
  row->alltoall_gbps = row->dispatch_bytes / (row->alltoall_us * 1e3);
  return HM_OK;
}

static hm_status run_payload(hm_comm *c, hm_comm_payload p, const struct bench_inputs *in, int64_t lo,
                             int64_t hi, int iters, int warmup, double *scratch, hm_comm_bench_row *rows,
                             int max_rows, int *n_rows) {
  hm_comm_batch *b = NULL;
  HM_CHECK(hm_comm_batch_create_payload(c, p, &b));
  hm_status ret = HM_OK;
  for (int64_t t = lo; ret == HM_OK && t <= hi && *n_rows < max_rows; t *= 2) {
    rows[*n_rows] = (hm_comm_bench_row){.payload = p};
    ret = run_size(c, b, in, t, iters, warmup, scratch, &rows[*n_rows]);
    if (ret == HM_OK) (*n_rows)++;
  }
  hm_comm_batch_destroy(b);
  return ret;
}

static hm_status check_bench_args(const hm_comm *c, int64_t lo, int64_t hi, int iters, int warmup,
                                  const hm_comm_bench_row *rows, const int *n_rows) {
  HM_CHECK(hm_comm_check_usable(c));
  HM_CHECK_NOT_NULL(rows);
  HM_CHECK_NOT_NULL(n_rows);
  if (lo < 1 || hi < lo || hi > c->cfg.max_tokens || iters < 1 || warmup < 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "benchmark tokens %lld..%lld (max_tokens %lld), %d iterations, %d warm-up",
            (long long)lo, (long long)hi, (long long)c->cfg.max_tokens, iters, warmup);
  return HM_OK;
}

hm_status hm_comm_bench(hm_comm *comm, int64_t tokens_lo, int64_t tokens_hi, int iters, int warmup,
                        hm_comm_bench_row *rows, int max_rows, int *n_rows) {
  HM_CHECK(check_bench_args(comm, tokens_lo, tokens_hi, iters, warmup, rows, n_rows));
  *n_rows = 0;
  double *scratch = calloc(3 * (size_t)iters, sizeof(double));
  if (scratch == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "benchmark timings");
  struct bench_inputs in;
  hm_status ret = make_inputs(comm, tokens_hi, &in);
  bool fp8 = comm->engine->kind == HM_BACKEND_HOST || comm->engine->arch >= 89;
  if (ret == HM_OK)
    ret = run_payload(comm, HM_COMM_PAYLOAD_BF16, &in, tokens_lo, tokens_hi, iters, warmup, scratch, rows,
                      max_rows, n_rows);
  if (ret == HM_OK && fp8)
    ret = run_payload(comm, HM_COMM_PAYLOAD_FP8, &in, tokens_lo, tokens_hi, iters, warmup, scratch, rows,
                      max_rows, n_rows);
  free_inputs(comm, &in);
  free(scratch);
  return ret;
}
