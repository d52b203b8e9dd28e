/* SPDX-License-Identifier: Apache-2.0 */
/*
 * HUMMING_TRACE=1: after each timed kernel-mode run, the per-CTA timeline of the last
 * launch (kernels/gemm_trace.cuh), summed up over CTAs as a footer line: when the CTAs
 * got past the previous grid, counted their tiles, loaded row maps and saw their first
 * stage, and how their time splits into pipeline fills, mainloops and tails (k-warp
 * reduction, store, Stream-K fix-up). Clocks become time through each CTA's own
 * global-timer span. HUMMING_TRACE=2 adds a line per busy CTA, the last to leave last.
 */
#include "bench/bench_trace.h"

#include <stdlib.h>
#include <string.h>

#include "bench/bench_trace_rows.h"
#include "layer_internal.h"
#include "log.h"
#include "params.h"

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median and maximum of v[0..n) (sorted in place). */
static void median_max(double *v, int n, double *med, double *max) {
  qsort(v, (size_t)n, sizeof(*v), cmp_double);
  *med = v[n / 2];
  *max = v[n - 1];
}

/* What a slot holds (kernels/hm_trace_slots.cuh). */
typedef enum { EVENT, SUM, COUNT } slot_kind;

/* Slot s of every CTA: an event's clocks since entry (stored plus one) or a sum of clocks
 * in microseconds at ghz, or a plain count. */
static void column(const hm_trace_row *rows, int n, int s, double ghz, slot_kind kind, double *out) {
  for (int i = 0; i < n; i++) {
    const double raw = (double)rows[i][s];
    if (kind == COUNT)
      out[i] = raw;
    else
      out[i] = (kind == EVENT && raw > 0 ? raw - 1 : raw) / (ghz * 1e3);
  }
}

/* Clock rate from the CTAs' own spans (the median, robust to a coarse global timer). */
static double clock_ghz(const hm_trace_row *rows, int n, double *scratch) {
  int m = 0;
  for (int i = 0; i < n; i++) {
    const double ns = (double)(rows[i][HM_TRACE_GT_EXIT] - rows[i][HM_TRACE_GT_ENTRY]);
    if (ns > 0) scratch[m++] = (double)(rows[i][HM_TRACE_EXIT] - 1) / ns;
  }
  if (m == 0) return 0;
  double med, max;
  median_max(scratch, m, &med, &max);
  return med;
}

/* The most busy CTAs of rows[0..n) that ran on one SM, and how many SMs ran more than one:
 * a persistent grid sized for one CTA an SM expects 1 and 0. */
static void sm_sharing(const hm_trace_row *rows, int n, int *most, int *shared) {
  enum { MAX_SMS = 1024 };
  int on_sm[MAX_SMS] = {0};
  *most = *shared = 0;
  for (int i = 0; i < n; i++) {
    const int c = ++on_sm[rows[i][HM_TRACE_SM] % MAX_SMS];
    if (c == 2) ++*shared;
    if (c > *most) *most = c;
  }
}

/* The launch's clock rate, first entry and last exit on the global timer, worked out once
 * for the summary and the per-CTA lines. */
typedef struct {
  double ghz;
  unsigned long long first, last;
} launch_clock;

/* False, with a warning, where the global timer did not advance in any CTA. */
static bool launch_clock_of(const hm_trace_row *rows, int n, const char *kernel, launch_clock *out) {
  double *v = malloc(sizeof(double) * (size_t)n);
  if (v == NULL) return false;
  out->ghz = clock_ghz(rows, n, v);
  free(v);
  if (!(out->ghz > 0)) {
    HM_WARN(BENCH, "trace of %s: the global timer did not advance in any CTA", kernel);
    return false;
  }
  out->first = rows[0][HM_TRACE_GT_ENTRY], out->last = rows[0][HM_TRACE_GT_EXIT];
  for (int i = 1; i < n; i++) {
    if (rows[i][HM_TRACE_GT_ENTRY] < out->first) out->first = rows[i][HM_TRACE_GT_ENTRY];
    if (rows[i][HM_TRACE_GT_EXIT] > out->last) out->last = rows[i][HM_TRACE_GT_EXIT];
  }
  return true;
}

/* A footer line per CTA of rows[0..n) that ran a segment, by exit, the last to leave last:
 * which CTA ends the launch, where it entered and what it waited on. */
static void cta_lines(hm_bench *b, const hm_trace_row *rows, int n, const launch_clock *lc) {
  int *order = malloc(sizeof(int) * (size_t)n);
  if (order == NULL || !hm_trace_order_by_exit(rows, n, order)) {
    HM_WARN(BENCH, "no per-CTA trace lines: out of memory for %d rows", n);
    free(order);
    return;
  }
  char line[320];
  for (int i = 0; i < n; i++) {
    if (rows[order[i]][HM_TRACE_SEGMENTS] == 0) continue;
    hm_trace_cta_line(line, sizeof(line), rows[order[i]], order[i], lc->first, lc->ghz);
    hm_report_footer(b->report, "%s", line);
  }
  free(order);
}

/* rows[0..n) are every CTA of the launch; the columns describe those that ran a segment,
 * which it moves to the front. */
static void summarize(hm_bench *b, const char *kernel, hm_trace_row *rows, int n, const launch_clock *lc) {
  double *v = malloc(sizeof(double) * (size_t)n);
  if (v == NULL) return;
  const double ghz = lc->ghz;
  const int launched = n;
  n = 0;
  for (int i = 0; i < launched; i++)
    if (rows[i][HM_TRACE_SEGMENTS] > 0) memmove(rows[n++], rows[i], sizeof(hm_trace_row));
  if (n == 0) {
    free(v);
    return;
  }
  for (int i = 0; i < n; i++) v[i] = (double)(rows[i][HM_TRACE_GT_ENTRY] - lc->first) * 1e-3;
  double entry_med, entry_max;
  median_max(v, n, &entry_med, &entry_max);
  static const struct {
    const char *name;
    int slot;
    slot_kind kind;
  } cols[] = {
      {"waited", HM_TRACE_WAITED, EVENT},
      {"counted", HM_TRACE_COUNTED, EVENT},
      {"maps", HM_TRACE_MAPS, EVENT},
      {"first_stage", HM_TRACE_FIRST_STAGE, EVENT},
      {"first_loop_end", HM_TRACE_FIRST_LOOP_END, EVENT},
      {"reduced", HM_TRACE_REDUCED, EVENT},
      {"first_end", HM_TRACE_FIRST_END, EVENT},
      {"exit", HM_TRACE_EXIT, EVENT},
      {"segments", HM_TRACE_SEGMENTS, COUNT},
      {"iters", HM_TRACE_ITERS, COUNT},
      {"fill", HM_TRACE_FILL, SUM},
      {"loop", HM_TRACE_LOOP, SUM},
      {"stalled", HM_TRACE_STALL, SUM},
      {"tail", HM_TRACE_TAIL, SUM},
  };
  int most, shared;
  sm_sharing(rows, n, &most, &shared);
  char text[1024];
  int len = snprintf(text, sizeof(text),
                     "trace %s: %d of %d CTAs busy, %d SMs running more than one (at most %d), span %.2f us, "
                     "%.2f GHz, entry +%.2f/%.2f us; median/max:",
                     kernel, n, launched, shared, most, (double)(lc->last - lc->first) * 1e-3, ghz, entry_med,
                     entry_max);
  for (size_t c = 0; c < sizeof(cols) / sizeof(cols[0]) && len < (int)sizeof(text); c++) {
    double med, max;
    column(rows, n, cols[c].slot, ghz, cols[c].kind, v);
    median_max(v, n, &med, &max);
    len += snprintf(text + len, sizeof(text) - (size_t)len,
                    cols[c].kind == COUNT ? " %s %.0f/%.0f" : " %s %.2f/%.2f", cols[c].name, med, max);
  }
  hm_report_footer(b->report, "%s", text);
  free(v);
}

void hm_bench_trace_report(hm_bench *b, const hm_layer *layer, const hm_gemm_args *args, const char *kernel) {
  if (!hm_param_trace() || layer->engine->kind != HM_BACKEND_CUDA) return;
  hm_kernel *k;
  hm_trace_row *rows = malloc(sizeof(hm_trace_row) * HM_TRACE_CTAS);
  if (rows == NULL) return;
  if (hm_layer_kernel_of(layer, args, &k) != HM_OK ||
      hm_kernel_read_global(k, "hm_trace", rows, sizeof(hm_trace_row) * HM_TRACE_CTAS) != HM_OK) {
    HM_WARN(BENCH, "no trace of %s: %s", kernel, hm_last_error());
    free(rows);
    return;
  }
  int n = 0;
  while (n < HM_TRACE_CTAS && rows[n][HM_TRACE_GT_ENTRY] != 0) n++;
  if (n == 0)
    HM_WARN(BENCH, "kernel %s wrote no trace (the plain wgmma GEMMs are not traced)", kernel);
  else {
    launch_clock lc;
    if (launch_clock_of(rows, n, kernel, &lc)) {
      if (hm_param_trace() >= 2) cta_lines(b, rows, n, &lc);
      summarize(b, kernel, rows, n, &lc);
    }
  }
  free(rows);
}
