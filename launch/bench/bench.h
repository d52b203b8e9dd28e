/* SPDX-License-Identifier: Apache-2.0 */
/*
 * humming-moe-bench: what every mode shares. One hm_bench per process holds the parsed
 * options, the engine and stream, the MPI world, the report and the timing helpers'
 * state; each mode (bench_kernel.c, bench_layer.c, bench_comm.c, bench_e2e.c) fills the
 * report with one row per size.
 */
#ifndef HM_BENCH_H
#define HM_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "common/options.h"
#include "common/report.h"
#include "engine.h"
#include "humming.h"
#include "model_presets.h"

/* Exit codes: 1 a run failed or a check found wrong values, 2 bad usage. */
enum { HM_BENCH_EXIT_FAIL = 1, HM_BENCH_EXIT_USAGE = 2 };

typedef enum hm_bench_mode { HM_MODE_KERNEL, HM_MODE_LAYER, HM_MODE_COMM, HM_MODE_E2E } hm_bench_mode;

/* Most forwards one kernel-mode sample chains (--chain); bench_chain.h builds the chain. */
#define HM_BENCH_CHAIN_MAX 64

typedef struct hm_bench_opts {
  hm_bench_mode mode;
  char model_name[HM_OPT_STR_LEN];
  int64_t hidden, intermediate, experts, top_k, layers; /* 0: the preset's */
  int64_t shared_experts;                               /* the preset's unless seen_shared */
  char quant_name[HM_OPT_STR_LEN];
  char layout_name[HM_OPT_STR_LEN];
  char gemm_name[HM_OPT_STR_LEN]; /* kernel mode: gate_up | down */
  char plan_name[HM_OPT_STR_LEN]; /* kernel mode: auto|heuristic|tuned|default|all; "" = HUMMING_GEMM_PLAN's */
  char backend_name[HM_OPT_STR_LEN];
  char baseline_name[HM_OPT_STR_LEN]; /* ours | torch | none */
  char acc_name[HM_OPT_STR_LEN];      /* kernel mode: f32 | f16 (hm_layer_config.fp16_accumulate) */
  char json_path[HM_OPT_STR_LEN], csv_path[HM_OPT_STR_LEN];
  hm_int_list m;
  int64_t ep, tp, iters, warmup, check, graph, flush, seed;
  int64_t chain;     /* kernel mode: forwards back to back per timed sample */
  int64_t warm_next; /* kernel-mode chains: each forward names the next member's layer */
  double roof_bw_tbs, roof_tflops;
  /* e2e */
  hm_int_list concurrency;
  char input_len[HM_OPT_STR_LEN], output_len[HM_OPT_STR_LEN];
  int64_t requests, max_step_tokens, distinct_layers;
  double rate;
  bool help, list_models;
  bool seen_m, seen_iters, seen_warmup, seen_concurrency, seen_requests, seen_input, seen_output, seen_step;
  bool seen_quant, seen_shared;
  bool seen_ep; /* --ep or --tp given: layer and e2e shard even at one rank */
  /* resolved from the names above */
  hm_model_preset model;
  hm_quant_scheme scheme;
  hm_gemm_type layout;
  bool fp16_accumulate; /* --acc f16 */
} hm_bench_opts;

/* The roofline a row is compared with; zero rates when there is none (host). */
typedef struct hm_roof {
  double bw_bytes_per_us;
  double flops_per_us_16; /* f16/bf16 tensor rate */
  double flops_per_us_8;  /* fp8/int8 tensor rate */
  char source[64];        /* "measured", "--roof-bw", "profile h100" */
} hm_roof;

typedef struct hm_bench {
  hm_bench_opts o;
  hm_engine *engine;
  hm_engine *host; /* the reference backend (engine itself on the host) */
  hm_stream *stream;
  hm_stream *host_stream; /* on host (stream itself on the host) */
  int rank, world, local_rank;
  bool mpi; /* MPI is up: launched by mpirun, or asked to shard */
  hm_report *report;
  hm_roof roof;
  void *flush_buf; /* written between timed runs to evict L2; NULL on the host */
  size_t flush_bytes;
  hm_event *ev_start, *ev_end;
  int64_t wrong; /* #wrong over every row of the run */
  bool cuda;
} hm_bench;

/* Parses argv into o (defaults first). Returns 0, or 2 after printing the error. */
int hm_bench_parse(int argc, char **argv, hm_bench_opts *o);
/* Usage text of every option. */
void hm_bench_usage(FILE *out);
/* Sets the defaults that depend on the backend (sizes, iterations) where not given. */
void hm_bench_backend_defaults(hm_bench_opts *o, bool cuda);

/* Time of one measured region, after the reduction over ranks (max). */
typedef struct hm_timing {
  double median_us, min_us, max_us, spread_pct; /* spread: (p90 - p10) / median */
  int samples;
  bool graph; /* replayed from a CUDA graph */
} hm_timing;

/* The timed work: enqueues one run on stream. */
typedef hm_status (*hm_bench_body)(void *ctx, hm_stream *stream);

/*
 * Warm-up, then o.iters timed runs between CUDA events with the L2 flushed before each
 * (outside the timed region); replays a CUDA graph when try_graph and capture works.
 */
hm_status hm_bench_time(hm_bench *b, hm_bench_body body, void *ctx, bool try_graph, hm_timing *out);
/* Max over ranks of x (identity with one process). */
double hm_bench_reduce_max(const hm_bench *b, double x);
/* Sum over ranks of x. */
double hm_bench_reduce_sum(const hm_bench *b, double x);
/* Whether CUDA graphs are wanted for m rows (decode sizes unless --graph says). */
bool hm_bench_want_graph(const hm_bench *b, int64_t m);

/* %roof of a run that moved bytes and did flops in time_us; NaN without a roofline. */
double hm_bench_roof_pct(const hm_bench *b, double bytes, double flops, bool act8, double time_us);

/*
 * Creates b->report with cols and writes the header every mode shares: tool, mode,
 * model, scheme, device, driver and NVRTC versions, roofline, timing, one line per rank.
 */
hm_status hm_bench_open_report(hm_bench *b, const char *mode_name, const hm_col *cols, int count);

int hm_bench_kernel(hm_bench *b);
int hm_bench_layer(hm_bench *b);
int hm_bench_comm(hm_bench *b);
int hm_bench_e2e(hm_bench *b);

/* Reports a failed library call: rank, what was being done and hm_last_error(). */
int hm_bench_fail(const hm_bench *b, const char *what, hm_status st);

#endif
