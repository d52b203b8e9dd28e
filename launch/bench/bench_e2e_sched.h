/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The serving loop of the e2e mode: a request stream (fixed or random lengths; closed
 * loop at a concurrency, or Poisson arrivals at a rate) and continuous batching with
 * chunked prefill. Each step's time is measured on the device and advances a simulated
 * clock, from which TTFT, TPOT and output throughput are read.
 */
#ifndef HM_BENCH_E2E_SCHED_H
#define HM_BENCH_E2E_SCHED_H

#include "bench/bench.h"

typedef struct hm_e2e_request {
  double arrival_us, first_us, done_us;
  int64_t input, output;
  int64_t prefilled, generated;
} hm_e2e_request;

typedef struct hm_e2e_result {
  int64_t requests, output_tokens, steps;
  double duration_s, tok_per_s;
  double ttft_p50_ms, ttft_p99_ms, tpot_p50_ms, tpot_p99_ms;
  double mean_step_tokens, mean_step_ms;
} hm_e2e_result;

/* Runs one step of tokens (sampled of them produce a token) and returns its time. */
typedef hm_status (*hm_e2e_step_fn)(void *ctx, int64_t tokens, int64_t sampled, double *step_us);

/* count requests with lengths from --input-len/--output-len and arrivals at rate (0: closed loop). */
hm_status hm_e2e_requests_make(const hm_bench_opts *o, int64_t count, double rate, uint64_t seed,
                               hm_e2e_request *out);
/*
 * Serves the requests with at most concurrency in flight and budget tokens a step
 * (decode tokens first, then prefill chunks in arrival order).
 */
hm_status hm_e2e_serve(hm_e2e_request *reqs, int64_t count, int64_t concurrency, bool closed_loop,
                       int64_t budget, hm_e2e_step_fn step, void *ctx, hm_e2e_result *out);

#endif
