/* SPDX-License-Identifier: Apache-2.0 */
/*
 * HUMMING_TRACE=2's per-CTA lines: CTAs ordered by exit on the global timer, and a line
 * that says where a CTA entered and left, what it waited on, and whether it summed split
 * tiles. Rows as a traced launch leaves them (kernels/gemm_trace.cuh), made up here.
 */
#include <string.h>

#include "bench/bench_trace_rows.h"
#include "hm_test.h"

/* A row of CTA work: entry and exit in ns on the global timer, events in SM clocks. */
static void make_row(unsigned long long *row, unsigned long long entry_ns, unsigned long long exit_ns, int sm,
                     int summed) {
  memset(row, 0, sizeof(hm_trace_row));
  row[HM_TRACE_GT_ENTRY] = entry_ns;
  row[HM_TRACE_GT_EXIT] = exit_ns;
  row[HM_TRACE_SM] = (unsigned long long)sm;
  row[HM_TRACE_WAITED] = 2000 + 1; /* 1 us at 2 GHz */
  row[HM_TRACE_FIRST_STAGE] = 5000 + 1;
  row[HM_TRACE_EXIT] = 2 * (exit_ns - entry_ns) + 1;
  row[HM_TRACE_SEGMENTS] = 1;
  row[HM_TRACE_SUMMED] = (unsigned long long)summed;
}

static void ctas_order_by_exit(void **state) {
  (void)state;
  hm_trace_row rows[4];
  make_row(rows[0], 1000, 9000, 3, 0);
  make_row(rows[1], 0, 12000, 7, 1);
  make_row(rows[2], 500, 4000, 1, 0);
  make_row(rows[3], 800, 9000, 2, 0); /* ties with CTA 0: by index */
  int order[4];
  assert_true(hm_trace_order_by_exit(rows, 4, order));
  const int want[] = {2, 0, 3, 1};
  for (int i = 0; i < 4; i++) assert_int_equal(order[i], want[i]);
}

static void a_line_says_where_and_what(void **state) {
  (void)state;
  hm_trace_row row;
  make_row(row, 1000, 12000, 7, 1);
  char line[320];
  const int len = hm_trace_cta_line(line, sizeof(line), row, 17, 0, 2.0);
  assert_true(len > 0 && len < (int)sizeof(line));
  assert_non_null(strstr(line, "cta 17 sm 7: entry +1.00 exit +12.00 us"));
  assert_non_null(strstr(line, "waited 1.00 first_stage 2.50"));
  assert_non_null(strstr(line, "first_loop_end -1.00")); /* did not happen */
  assert_non_null(strstr(line, "exit 11.00"));
  assert_non_null(strstr(line, "segments 1 summed 1"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(ctas_order_by_exit),
      cmocka_unit_test(a_line_says_where_and_what),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
