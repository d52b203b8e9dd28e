/* SPDX-License-Identifier: Apache-2.0 */
/*
 * e2e mode: the model stack serving a request stream with continuous batching, for each
 * concurrency, in bf16 and in the scheme under test (same requests, same seed), one row
 * per (scheme, concurrency): output tokens/s, TTFT and TPOT percentiles, the step sizes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/bench_e2e_model.h"
#include "bench/bench_e2e_sched.h"
#include "bench/bench_moe_dist.h"
#include "check.h"

enum {
  COL_QUANT,
  COL_CONC,
  COL_REQS,
  COL_TOKS,
  COL_TTFT50,
  COL_TTFT99,
  COL_TPOT50,
  COL_TPOT99,
  COL_STEPS,
  COL_STEP_TOK,
  COL_STEP_MS,
  COL_VS_BF16,
  COL_WRONG,
  COL_DURATION,
  COL_OUT_TOKENS,
  COL_LAYERS,
  COL_DISTINCT,
  COL_COUNT
};

static const hm_col e2e_cols[COL_COUNT] = {
    [COL_QUANT] = {"quant", 10, 0, HM_COL_TEXT},
    [COL_CONC] = {"conc", 6, 0, HM_COL_INT},
    [COL_REQS] = {"reqs", 6, 0, HM_COL_INT},
    [COL_TOKS] = {"tok/s", 9, 1, HM_COL_REAL},
    [COL_TTFT50] = {"ttft_p50", 9, 2, HM_COL_REAL},
    [COL_TTFT99] = {"ttft_p99", 9, 2, HM_COL_REAL},
    [COL_TPOT50] = {"tpot_p50", 9, 2, HM_COL_REAL},
    [COL_TPOT99] = {"tpot_p99", 9, 2, HM_COL_REAL},
    [COL_STEPS] = {"steps", 6, 0, HM_COL_INT},
    [COL_STEP_TOK] = {"tok/step", 8, 1, HM_COL_REAL},
    [COL_STEP_MS] = {"step_ms", 8, 2, HM_COL_REAL},
    [COL_VS_BF16] = {"vs_bf16", 7, 2, HM_COL_RATIO},
    [COL_WRONG] = {"#wrong", 7, 0, HM_COL_INT},
    [COL_DURATION] = {"duration_s", 0, 3, HM_COL_REAL},
    [COL_OUT_TOKENS] = {"output_tokens", 0, 0, HM_COL_INT},
    [COL_LAYERS] = {"layers", 0, 0, HM_COL_INT},
    [COL_DISTINCT] = {"distinct_moe_layers", 0, 0, HM_COL_INT},
};

struct e2e_bench {
  hm_bench *b;
  hm_e2e_model model;
  int64_t budget;
  double *bf16_tok_per_s; /* per concurrency, from the bf16 pass */
  int64_t wrong;
};

/* One batch step between events; the max over ranks keeps every rank's schedule identical. */
static hm_status step_fn(void *ctx, int64_t tokens, int64_t sampled, double *step_us) {
  struct e2e_bench *eb = ctx;
  hm_bench *b = eb->b;
  HM_CHECK(hm_event_record(b->ev_start, b->stream));
  HM_CHECK(hm_e2e_model_step(&eb->model, tokens, sampled, b->stream));
  HM_CHECK(hm_event_record(b->ev_end, b->stream));
  float ms = 0;
  HM_CHECK(hm_event_elapsed_ms(b->ev_start, b->ev_end, &ms));
  *step_us = hm_bench_reduce_max(b, ms * 1e3);
  return HM_OK;
}

/* Each step size the run will use, once, so no first-use cost lands in a timed step. */
static hm_status warm_up(struct e2e_bench *eb) {
  for (int64_t t = 1;; t *= 2) {
    int64_t tokens = t < eb->budget ? t : eb->budget;
    HM_CHECK(hm_e2e_model_step(&eb->model, tokens, tokens, eb->b->stream));
    if (tokens == eb->budget) break;
  }
  return hm_stream_synchronize(eb->b->stream);
}

static int64_t request_count(const hm_bench_opts *o, int64_t concurrency) {
  if (o->requests > 0) return o->requests;
  return concurrency < 2 ? 4 : 2 * concurrency;
}

static void emit_row(struct e2e_bench *eb, const char *quant, int ci, int64_t conc, const hm_e2e_result *r,
                     bool bf16) {
  double base = eb->bf16_tok_per_s ? eb->bf16_tok_per_s[ci] : NAN;
  hm_cell c[COL_COUNT] = {
      [COL_QUANT] = HM_TEXT(quant),
      [COL_CONC] = HM_NUM(conc),
      [COL_REQS] = HM_NUM(r->requests),
      [COL_TOKS] = HM_NUM(r->tok_per_s),
      [COL_TTFT50] = HM_NUM(r->ttft_p50_ms),
      [COL_TTFT99] = HM_NUM(r->ttft_p99_ms),
      [COL_TPOT50] = HM_NUM(r->tpot_p50_ms),
      [COL_TPOT99] = HM_NUM(r->tpot_p99_ms),
      [COL_STEPS] = HM_NUM(r->steps),
      [COL_STEP_TOK] = HM_NUM(r->mean_step_tokens),
      [COL_STEP_MS] = HM_NUM(r->mean_step_ms),
      [COL_VS_BF16] = bf16 ? HM_NUM(1.0) : HM_NUM(r->tok_per_s / base),
      [COL_WRONG] = eb->model.wrong >= 0 ? HM_NUM(eb->model.wrong) : HM_NONE,
      [COL_DURATION] = HM_NUM(r->duration_s),
      [COL_OUT_TOKENS] = HM_NUM(r->output_tokens),
      [COL_LAYERS] = HM_NUM(eb->model.layers),
      [COL_DISTINCT] = HM_NUM(eb->model.moe_count),
  };
  hm_report_row(eb->b->report, c);
}

static hm_status serve_all(struct e2e_bench *eb, const char *quant, bool bf16) {
  hm_bench *b = eb->b;
  for (int ci = 0; ci < b->o.concurrency.count; ci++) {
    int64_t conc = b->o.concurrency.v[ci], count = request_count(&b->o, conc);
    hm_e2e_request *reqs = malloc((size_t)count * sizeof(*reqs));
    if (reqs == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "%lld requests", (long long)count);
    hm_e2e_result r;
    hm_status st =
        hm_e2e_requests_make(&b->o, count, b->o.rate, (uint64_t)b->o.seed + 1000 * (uint64_t)ci, reqs);
    if (st == HM_OK) st = hm_e2e_serve(reqs, count, conc, b->o.rate <= 0, eb->budget, step_fn, eb, &r);
    free(reqs);
    HM_CHECK(st);
    if (bf16 && eb->bf16_tok_per_s) eb->bf16_tok_per_s[ci] = r.tok_per_s;
    emit_row(eb, quant, ci, conc, &r, bf16);
  }
  return HM_OK;
}

static hm_status run_scheme(struct e2e_bench *eb, const char *quant) {
  hm_bench *b = eb->b;
  hm_quant_scheme scheme;
  HM_CHECK(hm_quant_scheme_parse(quant, &scheme));
  HM_CHECK(hm_e2e_model_build(b, &scheme, eb->budget, (int)b->o.distinct_layers, &eb->model));
  hm_report_header(b->report, "%s: %d layers, %d with MoE cycling over %d distinct weight sets of %.1f MB",
                   quant, eb->model.layers, eb->model.layers - eb->model.dense_layers, eb->model.moe_count,
                   hm_e2e_moe_block_bytes(&eb->model) / 1e6);
  if (eb->model.comm) hm_bench_dist_header(b, eb->model.comm, &eb->model.moe, eb->model.wrong >= 0);
  hm_status st = warm_up(eb);
  if (st == HM_OK) st = serve_all(eb, quant, strcmp(quant, "bf16") == 0);
  if (eb->model.wrong > 0) eb->wrong += eb->model.wrong;
  hm_e2e_model_destroy(&eb->model);
  return st;
}

static void e2e_header(struct e2e_bench *eb) {
  hm_bench *b = eb->b;
  const hm_model_preset *p = &b->o.model;
  char arrivals[64];
  if (b->o.rate > 0)
    snprintf(arrivals, sizeof(arrivals), "Poisson %.3g req/s", b->o.rate);
  else
    snprintf(arrivals, sizeof(arrivals), "closed loop");
  hm_report_header(
      b->report,
      "e2e: requests input=%s output=%s, %s, %s requests, step budget %lld tokens (chunked prefill)",
      b->o.input_len, b->o.output_len, arrivals, b->o.requests ? "--requests" : "2 x conc",
      (long long)eb->budget);
  hm_report_header(b->report,
                   "e2e: MoE layers in the scheme; attention projections (%s), router, dense MLP and LM head "
                   "(vocab %lld) in bf16; attention core not modelled; ms for ttft/tpot/step",
                   p->attn == HM_MODEL_ATTN_MLA ? "MLA" : "GQA", (long long)p->vocab);
}

int hm_bench_e2e(hm_bench *b) {
  struct e2e_bench eb = {.b = b};
  eb.budget = b->o.max_step_tokens;
  for (int i = 0; i < b->o.concurrency.count; i++)
    if (b->o.concurrency.v[i] > eb.budget) eb.budget = b->o.concurrency.v[i];
  hm_status st = hm_bench_open_report(b, "e2e", e2e_cols, COL_COUNT);
  if (st != HM_OK) return hm_bench_fail(b, "report", st);
  e2e_header(&eb);
  hm_report_columns(b->report);
  bool self = strcmp(b->o.quant_name, "bf16") == 0;
  bool baseline = !self && strcmp(b->o.baseline_name, "none") != 0;
  if (baseline) eb.bf16_tok_per_s = calloc((size_t)b->o.concurrency.count, sizeof(double));
  if (baseline || self) st = run_scheme(&eb, "bf16");
  if (st == HM_OK && !self) st = run_scheme(&eb, b->o.quant_name);
  free(eb.bf16_tok_per_s);
  if (st != HM_OK) return hm_bench_fail(b, "e2e", st);
  b->wrong += eb.wrong;
  hm_report_footer(b->report, "%s: %d concurrencies, #wrong %lld%s", eb.wrong ? "FAILED" : "OK",
                   b->o.concurrency.count, (long long)eb.wrong, eb.wrong ? " (exit 1)" : "");
  return eb.wrong ? HM_BENCH_EXIT_FAIL : 0;
}
