/* SPDX-License-Identifier: Apache-2.0 */
/*
 * comm mode: expert-parallel dispatch and combine of M tokens per rank, with identity
 * (loopback) experts so that combine must return x * sum(w): checked, then timed as
 * dispatch alone and as the round trip, on every rank (max over ranks reported).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/bench_align.h"
#include "bench/bench_check.h"
#include "bench/bench_data.h"
#include "check.h"
#include "numfmt.h"

enum {
  COL_M,
  COL_PAYLOAD,
  COL_DISPATCH,
  COL_COMBINE,
  COL_TOTAL,
  COL_SPREAD,
  COL_DISP_GBS,
  COL_COMB_GBS,
  COL_BUSBW,
  COL_A2A,
  COL_VS_A2A,
  COL_WRONG,
  COL_DISP_BYTES,
  COL_COMB_BYTES,
  COL_COUNT
};

static const hm_col comm_cols[COL_COUNT] = {
    [COL_M] = {"M", 8, 0, HM_COL_INT},
    [COL_PAYLOAD] = {"payload", 7, 0, HM_COL_TEXT},
    [COL_DISPATCH] = {"disp_us", 10, 2, HM_COL_REAL},
    [COL_COMBINE] = {"comb_us", 10, 2, HM_COL_REAL},
    [COL_TOTAL] = {"total_us", 10, 2, HM_COL_REAL},
    [COL_SPREAD] = {"spread%", 7, 1, HM_COL_REAL},
    [COL_DISP_GBS] = {"disp_GB/s", 9, 2, HM_COL_REAL},
    [COL_COMB_GBS] = {"comb_GB/s", 9, 2, HM_COL_REAL},
    [COL_BUSBW] = {"busbw", 8, 2, HM_COL_REAL},
    [COL_A2A] = {"a2a_us", 10, 2, HM_COL_REAL},
    [COL_VS_A2A] = {"vs_a2a", 7, 2, HM_COL_REAL},
    [COL_WRONG] = {"#wrong", 7, 0, HM_COL_INT},
    [COL_DISP_BYTES] = {"dispatch_bytes", 0, 0, HM_COL_INT},
    [COL_COMB_BYTES] = {"combine_bytes", 0, 0, HM_COL_INT},
};

struct comm_run {
  hm_comm *comm;
  hm_comm_batch *batch;
  hm_comm_tokens tokens;
  void *x, *y;
  int32_t *ids;
  float *weights;
  uint16_t *x_host;
  float *w_host;
};

static hm_status dispatch_body(void *ctx, hm_stream *stream) {
  struct comm_run *r = ctx;
  hm_comm_expert_batch out;
  return hm_comm_dispatch(r->batch, &r->tokens, stream, &out);
}

static hm_status round_trip_body(void *ctx, hm_stream *stream) {
  struct comm_run *r = ctx;
  HM_CHECK(dispatch_body(ctx, stream));
  HM_CHECK(hm_comm_loopback(r->batch, stream));
  return hm_comm_combine(r->batch, r->y, stream);
}

/* A fresh allocation holding a copy of src. */
static hm_status upload_new(hm_engine *e, const void *src, size_t bytes, void **dst) {
  HM_CHECK(hm_mem_alloc(e, bytes, dst));
  return hm_mem_upload(e, *dst, src, bytes);
}

static hm_status inputs_make(hm_bench *b, int64_t tokens, uint64_t seed, struct comm_run *r) {
  const hm_model_preset *m = &b->o.model;
  size_t slots = (size_t)(tokens * m->top_k), x_bytes = (size_t)(tokens * m->hidden) * 2;
  int32_t *ids = malloc(slots * sizeof(int32_t));
  r->w_host = malloc(slots * sizeof(float));
  r->x_host = malloc(x_bytes);
  hm_status ret = HM_OK;
  void *dev = NULL;
  if (ids == NULL || r->w_host == NULL || r->x_host == NULL)
    HM_FAIL_GOTO(HM_OUT_OF_MEMORY, done, "comm inputs");
  HM_CHECK_GOTO(hm_bench_random_topk(tokens, m->top_k, m->experts, 0, seed, ids, r->w_host), done);
  HM_CHECK_GOTO(hm_bench_random_bf16(r->x_host, tokens * m->hidden, 1.0f, seed + 1), done);
  HM_CHECK_GOTO(upload_new(b->engine, r->x_host, x_bytes, &r->x), done);
  HM_CHECK_GOTO(upload_new(b->engine, ids, slots * sizeof(int32_t), &dev), done);
  r->ids = dev;
  HM_CHECK_GOTO(upload_new(b->engine, r->w_host, slots * sizeof(float), &dev), done);
  r->weights = dev;
  HM_CHECK_GOTO(hm_mem_alloc(b->engine, x_bytes, &r->y), done);
  r->tokens = (hm_comm_tokens){tokens, r->x, r->ids, r->weights};
done:
  free(ids);
  return ret;
}

static void inputs_free(hm_bench *b, struct comm_run *r) {
  hm_mem_free(b->engine, r->x), hm_mem_free(b->engine, r->y), hm_mem_free(b->engine, r->ids);
  hm_mem_free(b->engine, r->weights);
  free(r->x_host), free(r->w_host);
  r->x = r->y = NULL, r->ids = NULL, r->weights = NULL, r->x_host = NULL, r->w_host = NULL;
}

/* One round trip; combine must give x * sum(w) for every token. */
static hm_status check_round_trip(hm_bench *b, struct comm_run *r, hm_comm_payload payload, int64_t *wrong) {
  const hm_model_preset *m = &b->o.model;
  int64_t t = r->tokens.count, h = m->hidden;
  HM_CHECK(round_trip_body(r, b->stream));
  HM_CHECK(hm_comm_synchronize(r->comm, b->stream));
  uint16_t *y = malloc((size_t)(t * h) * 2);
  float *got = malloc((size_t)(t * h) * sizeof(float)), *want = malloc((size_t)(t * h) * sizeof(float));
  hm_status ret = HM_OK;
  if (y == NULL || got == NULL || want == NULL) HM_FAIL_GOTO(HM_OUT_OF_MEMORY, done, "comm check");
  HM_CHECK_GOTO(hm_mem_download(b->engine, y, r->y, (size_t)(t * h) * 2), done);
  HM_CHECK_GOTO(hm_convert_to_f32(HM_BF16, y, got, t * h), done);
  for (int64_t i = 0; i < t; i++) {
    float sum_w = 0;
    for (int j = 0; j < m->top_k; j++) sum_w += r->w_host[i * m->top_k + j];
    for (int64_t c = 0; c < h; c++) want[i * h + c] = hm_bf16_to_f32(r->x_host[i * h + c]) * sum_w;
  }
  *wrong = hm_bench_count_wrong(got, want, t, h, payload == HM_COMM_PAYLOAD_FP8 ? 1.0 / 16 : 1.0 / 64);
done:
  free(y), free(got), free(want);
  return ret;
}

/* Bytes this rank sends in a dispatch: a row of H per (token, slot) per TP rank of the target group. */
static double dispatch_bytes(const hm_bench *b, int64_t tokens, hm_comm_payload payload) {
  double h = (double)b->o.model.hidden;
  double row = payload == HM_COMM_PAYLOAD_FP8 ? h + 4.0 * h / 128 : 2 * h;
  return (double)tokens * b->o.model.top_k * (double)b->o.tp * row;
}

/*
 * The dispatch's bytes through one plain all-to-all (what nccl-tests would time): the
 * floor our grouped, layout-aware dispatch is judged against. Slowest rank's median.
 */
static hm_status plain_alltoall_us(hm_bench *b, struct comm_run *r, int64_t tokens, hm_comm_payload payload,
                                   double *us) {
  hm_comm_bench_row rows[2];
  int n = 0;
  HM_CHECK(hm_comm_bench(r->comm, tokens, tokens, (int)b->o.iters, (int)b->o.warmup, rows, 2, &n));
  double mine = 0;
  for (int i = 0; i < n; i++)
    if (rows[i].payload == payload) mine = rows[i].alltoall_us;
  *us = hm_bench_reduce_max(b, mine);
  return HM_OK;
}

static hm_status comm_one_m(hm_bench *b, struct comm_run *r, int mi, hm_comm_payload payload,
                            int64_t *wrong) {
  int64_t tokens = b->o.m.v[mi];
  HM_CHECK(inputs_make(b, tokens, (uint64_t)b->o.seed + 977 * (uint64_t)mi + (uint64_t)b->rank, r));
  hm_status ret = HM_OK;
  hm_timing disp, trip;
  int64_t w = 0;
  if (b->o.check) HM_CHECK_GOTO(check_round_trip(b, r, payload, &w), done);
  HM_CHECK_GOTO(hm_bench_time(b, dispatch_body, r, false, &disp), done);
  HM_CHECK_GOTO(hm_bench_time(b, round_trip_body, r, false, &trip), done);
  double a2a_us = 0;
  HM_CHECK_GOTO(plain_alltoall_us(b, r, tokens, payload, &a2a_us), done);
  w = (int64_t)hm_bench_reduce_sum(b, (double)w);
  *wrong += w;
  double d_bytes = hm_bench_reduce_sum(b, dispatch_bytes(b, tokens, payload)) / b->world;
  double c_bytes = (double)tokens * b->o.model.top_k * (double)b->o.model.hidden * 2;
  double comb_us = fmax(trip.median_us - disp.median_us, 0);
  double n = (double)b->world, bus = n > 1 ? (n - 1) / n : 1;
  hm_cell c[COL_COUNT] = {
      [COL_M] = HM_NUM(tokens),
      [COL_PAYLOAD] = HM_TEXT(payload == HM_COMM_PAYLOAD_FP8 ? "fp8" : "bf16"),
      [COL_DISPATCH] = HM_NUM(disp.median_us),
      [COL_COMBINE] = HM_NUM(comb_us),
      [COL_TOTAL] = HM_NUM(trip.median_us),
      [COL_SPREAD] = HM_NUM(trip.spread_pct),
      [COL_DISP_GBS] = HM_NUM(d_bytes / disp.median_us / 1e3),
      [COL_COMB_GBS] = comb_us > 0 ? HM_NUM(c_bytes / comb_us / 1e3) : HM_NONE,
      [COL_BUSBW] = HM_NUM((d_bytes + c_bytes) / trip.median_us / 1e3 * bus),
      [COL_A2A] = a2a_us > 0 ? HM_NUM(a2a_us) : HM_NONE,
      [COL_VS_A2A] = a2a_us > 0 ? HM_NUM(a2a_us / disp.median_us) : HM_NONE,
      [COL_WRONG] = HM_NUM(w),
      [COL_DISP_BYTES] = HM_NUM(d_bytes),
      [COL_COMB_BYTES] = HM_NUM(c_bytes),
  };
  hm_report_row(b->report, c);
done:
  inputs_free(b, r);
  return ret;
}

static hm_status comm_setup(hm_bench *b, hm_comm_payload payload, struct comm_run *r) {
  const hm_model_preset *m = &b->o.model;
  hm_comm_config cfg = HM_COMM_CONFIG_INIT;
  cfg.ep = (int)b->o.ep;
  cfg.tp = (int)b->o.tp;
  cfg.experts = m->experts;
  cfg.hidden = m->hidden;
  cfg.intermediate = m->moe_intermediate;
  cfg.top_k = m->top_k;
  for (int i = 0; i < b->o.m.count; i++)
    if (b->o.m.v[i] > cfg.max_tokens) cfg.max_tokens = b->o.m.v[i];
  cfg.payload = payload;
  cfg.layout = strcmp(b->o.layout_name, "masked") == 0 ? HM_COMM_LAYOUT_MASKED : HM_COMM_LAYOUT_CONTIGUOUS;
  HM_CHECK(hm_comm_create_mpi(b->engine, &cfg, &r->comm));
  HM_CHECK(hm_comm_batch_create(r->comm, &r->batch));
  hm_report_header(b->report, "comm: %s", hm_comm_binding(r->comm));
  return HM_OK;
}

int hm_bench_comm(hm_bench *b) {
  hm_status st = hm_bench_open_report(b, "comm", comm_cols, COL_COUNT);
  if (st != HM_OK) return hm_bench_fail(b, "report", st);
  hm_comm_payload payload = b->o.scheme.act == HM_F8E4M3 ? HM_COMM_PAYLOAD_FP8 : HM_COMM_PAYLOAD_BF16;
  hm_report_header(b->report,
                   "comm: %d ranks, ep=%lld tp=%lld, E=%lld H=%lld top_k=%d, %s rows; M = tokens/rank; "
                   "identity experts; combine = round trip - dispatch",
                   b->world, (long long)b->o.ep, (long long)b->o.tp, (long long)b->o.model.experts,
                   (long long)b->o.model.hidden, b->o.model.top_k,
                   payload == HM_COMM_PAYLOAD_FP8 ? "fp8" : "bf16");
  struct comm_run r;
  memset(&r, 0, sizeof(r));
  st = comm_setup(b, payload, &r);
  hm_report_columns(b->report);
  int64_t wrong = 0;
  for (int mi = 0; st == HM_OK && mi < b->o.m.count; mi++) st = comm_one_m(b, &r, mi, payload, &wrong);
  hm_comm_batch_destroy(r.batch);
  hm_comm_destroy(r.comm);
  if (st != HM_OK) return hm_bench_fail(b, "comm", st);
  b->wrong += wrong;
  hm_report_footer(b->report, "%s: %d sizes, #wrong %lld%s", wrong ? "FAILED" : "OK", b->o.m.count,
                   (long long)wrong, wrong ? " (exit 1)" : "");
  return wrong ? HM_BENCH_EXIT_FAIL : 0;
}
