/* SPDX-License-Identifier: Apache-2.0 */
/* Requests, continuous batching with chunked prefill, and the latency percentiles. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_data.h"
#include "bench/bench_e2e_sched.h"
#include "check.h"

static int64_t uniform_int(uint64_t *state, int64_t lo, int64_t hi) {
  return lo + (int64_t)(hm_bench_rng(state) % (uint64_t)(hi - lo + 1));
}

hm_status hm_e2e_requests_make(const hm_bench_opts *o, int64_t count, double rate, uint64_t seed,
                               hm_e2e_request *out) {
  int64_t in_lo, in_hi, out_lo, out_hi;
  char err[128];
  if (!hm_range_parse(o->input_len, 1, 1 << 20, &in_lo, &in_hi, err, sizeof(err)) ||
      !hm_range_parse(o->output_len, 1, 1 << 20, &out_lo, &out_hi, err, sizeof(err)))
    HM_FAIL(HM_INVALID_ARGUMENT, "request lengths: %s", err);
  uint64_t state = seed;
  double clock_us = 0;
  for (int64_t i = 0; i < count; i++) {
    memset(&out[i], 0, sizeof(out[i]));
    out[i].input = uniform_int(&state, in_lo, in_hi);
    out[i].output = uniform_int(&state, out_lo, out_hi);
    if (rate > 0) {
      double u = ((double)(hm_bench_rng(&state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
      clock_us += -log(u) / rate * 1e6;
    }
    out[i].arrival_us = clock_us;
  }
  return HM_OK;
}

/* The state of one serving run. */
struct server {
  hm_e2e_request *reqs;
  int64_t count, next; /* requests not yet admitted start at next */
  int64_t *running, n_running;
  int64_t *chunk; /* prefill tokens of each running request in this step */
  int64_t concurrency, budget;
  bool closed_loop;
  double clock_us;
};

static void admit(struct server *s) {
  while (s->next < s->count && s->n_running < s->concurrency &&
         (s->closed_loop || s->reqs[s->next].arrival_us <= s->clock_us)) {
    if (s->closed_loop) s->reqs[s->next].arrival_us = s->clock_us; /* the client sends when a slot frees */
    s->running[s->n_running++] = s->next++;
  }
}

/* Decode tokens first (one a request), then prefill chunks in admission order. */
static void plan_step(struct server *s, int64_t *tokens, int64_t *sampled) {
  *tokens = *sampled = 0;
  for (int64_t i = 0; i < s->n_running; i++) {
    const hm_e2e_request *r = &s->reqs[s->running[i]];
    s->chunk[i] = 0;
    if (r->prefilled == r->input) (*tokens)++, (*sampled)++;
  }
  for (int64_t i = 0; i < s->n_running && *tokens < s->budget; i++) {
    const hm_e2e_request *r = &s->reqs[s->running[i]];
    if (r->prefilled == r->input) continue;
    int64_t take = r->input - r->prefilled;
    if (take > s->budget - *tokens) take = s->budget - *tokens;
    s->chunk[i] = take;
    *tokens += take;
    if (r->prefilled + take == r->input) (*sampled)++;
  }
}

/* Advances every running request by the step that just ended at clock_us; drops finished ones. */
static void finish_step(struct server *s) {
  int64_t kept = 0;
  for (int64_t i = 0; i < s->n_running; i++) {
    hm_e2e_request *r = &s->reqs[s->running[i]];
    bool decoding = r->prefilled == r->input;
    r->prefilled += s->chunk[i];
    if (decoding) {
      r->generated++;
    } else if (r->prefilled == r->input) {
      r->generated = 1;
      r->first_us = s->clock_us;
    }
    if (r->generated == r->output)
      r->done_us = s->clock_us;
    else
      s->running[kept++] = s->running[i];
  }
  s->n_running = kept;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Nearest-rank percentile of n values (sorted in place); NaN for none. */
static double percentile(double *v, int64_t n, double p) {
  if (n == 0) return NAN;
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  int64_t rank = (int64_t)ceil(p / 100.0 * (double)n);
  return v[rank < 1 ? 0 : rank - 1];
}

static hm_status summarize(const struct server *s, hm_e2e_result *out) {
  double *ttft = malloc((size_t)s->count * sizeof(double)), *tpot = malloc((size_t)s->count * sizeof(double));
  if (ttft == NULL || tpot == NULL) {
    free(ttft), free(tpot);
    HM_FAIL(HM_OUT_OF_MEMORY, "latencies");
  }
  int64_t n_tpot = 0;
  out->requests = s->count;
  out->output_tokens = 0;
  for (int64_t i = 0; i < s->count; i++) {
    const hm_e2e_request *r = &s->reqs[i];
    out->output_tokens += r->output;
    ttft[i] = (r->first_us - r->arrival_us) / 1e3;
    if (r->output > 1) tpot[n_tpot++] = (r->done_us - r->first_us) / (double)(r->output - 1) / 1e3;
  }
  out->duration_s = s->clock_us / 1e6;
  out->tok_per_s = out->duration_s > 0 ? (double)out->output_tokens / out->duration_s : NAN;
  out->ttft_p50_ms = percentile(ttft, s->count, 50);
  out->ttft_p99_ms = percentile(ttft, s->count, 99);
  out->tpot_p50_ms = percentile(tpot, n_tpot, 50);
  out->tpot_p99_ms = percentile(tpot, n_tpot, 99);
  free(ttft);
  free(tpot);
  return HM_OK;
}

static hm_status serve_loop(struct server *s, hm_e2e_step_fn step, void *ctx, hm_e2e_result *out) {
  double step_tokens = 0;
  out->steps = 0;
  while (s->next < s->count || s->n_running > 0) {
    admit(s);
    if (s->n_running == 0) {
      s->clock_us = s->reqs[s->next].arrival_us; /* idle until the next arrival */
      continue;
    }
    int64_t tokens, sampled;
    plan_step(s, &tokens, &sampled);
    double us = 0;
    HM_CHECK(step(ctx, tokens, sampled, &us));
    s->clock_us += us;
    finish_step(s);
    out->steps++;
    step_tokens += (double)tokens;
  }
  out->mean_step_tokens = out->steps ? step_tokens / (double)out->steps : 0;
  out->mean_step_ms = out->steps ? s->clock_us / 1e3 / (double)out->steps : 0;
  return HM_OK;
}

hm_status hm_e2e_serve(hm_e2e_request *reqs, int64_t count, int64_t concurrency, bool closed_loop,
                       int64_t budget, hm_e2e_step_fn step, void *ctx, hm_e2e_result *out) {
  if (concurrency < 1 || budget < concurrency)
    HM_FAIL(HM_INVALID_ARGUMENT,
            "concurrency %lld needs a step budget of at least as many tokens (have %lld)",
            (long long)concurrency, (long long)budget);
  memset(out, 0, sizeof(*out));
  struct server s = {
      .reqs = reqs, .count = count, .concurrency = concurrency, .budget = budget, .closed_loop = closed_loop};
  s.running = malloc((size_t)concurrency * sizeof(int64_t));
  s.chunk = malloc((size_t)concurrency * sizeof(int64_t));
  hm_status ret = HM_OK;
  if (s.running == NULL || s.chunk == NULL) HM_FAIL_GOTO(HM_OUT_OF_MEMORY, done, "server state");
  HM_CHECK_GOTO(serve_loop(&s, step, ctx, out), done);
  HM_CHECK_GOTO(summarize(&s, out), done);
done:
  free(s.running);
  free(s.chunk);
  return ret;
}
