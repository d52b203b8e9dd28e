/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The timing loop every mode uses: warm-up, optional CUDA-graph capture, then one event
 * pair per run with the L2 flushed before it (outside the events), the median and
 * spread over runs, and the max over ranks.
 */
#include <math.h>
#include <stdlib.h>

#include <mpi.h>

#include "bench/bench.h"
#include "bench/bench_graph.h"
#include "check.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Quantile of sorted values by linear interpolation. */
static double quantile(const double *v, int n, double q) {
  double pos = q * (n - 1);
  int lo = (int)floor(pos);
  int hi = lo + 1 < n ? lo + 1 : lo;
  return v[lo] + (v[hi] - v[lo]) * (pos - lo);
}

double hm_bench_reduce_max(const hm_bench *b, double x) {
  if (b->world <= 1) return x;
  double out = x;
  MPI_Allreduce(&x, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

double hm_bench_reduce_sum(const hm_bench *b, double x) {
  if (b->world <= 1) return x;
  double out = x;
  MPI_Allreduce(&x, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return out;
}

bool hm_bench_want_graph(const hm_bench *b, int64_t m) {
  if (!b->cuda || b->o.graph == 0) return false;
  return b->o.graph == 1 || m <= 256;
}

static hm_status run_once(hm_bench_graph *graph, hm_bench_body body, void *ctx, hm_stream *s) {
  return graph ? hm_bench_graph_launch(graph, s) : body(ctx, s);
}

static hm_status timed_runs(hm_bench *b, hm_bench_graph *graph, hm_bench_body body, void *ctx, double *us) {
  for (int64_t i = 0; i < b->o.iters; i++) {
    if (b->flush_buf)
      HM_CHECK(hm_engine_memset(b->engine, b->flush_buf, (uint8_t)i, b->flush_bytes, b->stream));
    HM_CHECK(hm_event_record(b->ev_start, b->stream));
    HM_CHECK(run_once(graph, body, ctx, b->stream));
    HM_CHECK(hm_event_record(b->ev_end, b->stream));
    float ms = 0;
    HM_CHECK(hm_event_elapsed_ms(b->ev_start, b->ev_end, &ms));
    us[i] = ms * 1e3;
  }
  return HM_OK;
}

static void summarize(const hm_bench *b, double *us, int n, hm_timing *out) {
  qsort(us, (size_t)n, sizeof(double), cmp_double);
  double median = quantile(us, n, 0.5);
  double spread = median > 0 ? (quantile(us, n, 0.9) - quantile(us, n, 0.1)) / median * 100 : 0;
  out->samples = n;
  out->median_us = hm_bench_reduce_max(b, median);
  out->min_us = hm_bench_reduce_max(b, us[0]);
  out->max_us = hm_bench_reduce_max(b, us[n - 1]);
  out->spread_pct = hm_bench_reduce_max(b, spread);
}

hm_status hm_bench_time(hm_bench *b, hm_bench_body body, void *ctx, bool try_graph, hm_timing *out) {
  hm_status ret = HM_OK;
  hm_bench_graph *graph = NULL;
  double *us = calloc((size_t)b->o.iters, sizeof(double));
  if (us == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "timing samples");
  for (int64_t i = 0; i < b->o.warmup; i++) HM_CHECK_GOTO(body(ctx, b->stream), done);
  HM_CHECK_GOTO(hm_stream_synchronize(b->stream), done);
  if (try_graph) HM_CHECK_GOTO(hm_bench_graph_capture(b->stream, body, ctx, &graph), done);
  if (graph) HM_CHECK_GOTO(hm_bench_graph_launch(graph, b->stream), done); /* the first replay uploads */
  if (b->world > 1) MPI_Barrier(MPI_COMM_WORLD);
  HM_CHECK_GOTO(timed_runs(b, graph, body, ctx, us), done);
  summarize(b, us, (int)b->o.iters, out);
  out->graph = graph != NULL;
done:
  hm_bench_graph_destroy(graph);
  free(us);
  return ret;
}

double hm_bench_roof_pct(const hm_bench *b, double bytes, double flops, bool act8, double time_us) {
  const hm_roof *r = &b->roof;
  double rate = act8 ? r->flops_per_us_8 : r->flops_per_us_16;
  if (r->bw_bytes_per_us <= 0 || rate <= 0 || !(time_us > 0)) return NAN;
  double ideal_us = fmax(bytes / r->bw_bytes_per_us, flops / rate);
  return ideal_us / time_us * 100.0;
}
