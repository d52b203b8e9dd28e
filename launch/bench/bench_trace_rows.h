/* SPDX-License-Identifier: Apache-2.0 */
/* The rows a traced launch leaves (kernels/gemm_trace.cuh) one CTA at a time: for
 * HUMMING_TRACE=2, which CTA leaves a launch last, and what it did before. */
#ifndef HM_BENCH_TRACE_ROWS_H
#define HM_BENCH_TRACE_ROWS_H

#include <stdbool.h>
#include <stddef.h>

#include "kernels/hm_trace_slots.cuh"

typedef unsigned long long hm_trace_row[HM_TRACE_SLOTS];

/* Fills order[0..n) with the indices of rows[0..n) by exit on the global timer, the
 * earliest first (ties by index); false, order untouched, when out of memory. */
bool hm_trace_order_by_exit(const hm_trace_row *rows, int n, int *order);

/* The line of CTA cta (row): its SM; its entry and exit in us after `first` (the launch's
 * first entry, global timer ns); its events in us after its own entry at ghz SM clocks a
 * ns; its segments and the split tiles it summed. snprintf's return. */
int hm_trace_cta_line(char *buf, size_t len, const unsigned long long *row, int cta, unsigned long long first,
                      double ghz);

#endif
