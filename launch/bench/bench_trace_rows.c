/* SPDX-License-Identifier: Apache-2.0 */
#include "bench/bench_trace_rows.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct {
  unsigned long long exit;
  int index;
} exit_at;

static int cmp_exit(const void *a, const void *b) {
  const exit_at *x = a, *y = b;
  if (x->exit != y->exit) return x->exit < y->exit ? -1 : 1;
  return (x->index > y->index) - (x->index < y->index);
}

bool hm_trace_order_by_exit(const hm_trace_row *rows, int n, int *order) {
  exit_at *v = malloc(sizeof(*v) * (size_t)(n > 0 ? n : 1));
  if (v == NULL) return false;
  for (int i = 0; i < n; i++) v[i] = (exit_at){rows[i][HM_TRACE_GT_EXIT], i};
  qsort(v, (size_t)n, sizeof(*v), cmp_exit);
  for (int i = 0; i < n; i++) order[i] = v[i].index;
  free(v);
  return true;
}

/* An event slot (SM clocks since entry, plus one) in us; -1 where it did not happen. */
static double event_us(const unsigned long long *row, int slot, double ghz) {
  return row[slot] == 0 ? -1.0 : (double)(row[slot] - 1) / (ghz * 1e3);
}

int hm_trace_cta_line(char *buf, size_t len, const unsigned long long *row, int cta, unsigned long long first,
                      double ghz) {
  return snprintf(buf, len,
                  "cta %d sm %llu: entry +%.2f exit +%.2f us; since entry: waited %.2f first_stage %.2f "
                  "first_loop_end %.2f first_end %.2f exit %.2f; segments %llu summed %llu",
                  cta, row[HM_TRACE_SM], (double)(row[HM_TRACE_GT_ENTRY] - first) * 1e-3,
                  (double)(row[HM_TRACE_GT_EXIT] - first) * 1e-3, event_us(row, HM_TRACE_WAITED, ghz),
                  event_us(row, HM_TRACE_FIRST_STAGE, ghz), event_us(row, HM_TRACE_FIRST_LOOP_END, ghz),
                  event_us(row, HM_TRACE_FIRST_END, ghz), event_us(row, HM_TRACE_EXIT, ghz),
                  row[HM_TRACE_SEGMENTS], row[HM_TRACE_SUMMED]);
}
