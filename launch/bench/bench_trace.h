/* SPDX-License-Identifier: Apache-2.0 */
/* The per-CTA GEMM timeline of HUMMING_TRACE=1 builds, summed up in the kernel report. */
#ifndef HM_BENCH_TRACE_H
#define HM_BENCH_TRACE_H

#include "bench/bench.h"

/* With HUMMING_TRACE=1, a footer line on the last launch of the kernel (named kernel)
 * that a forward with args runs on layer; a warning when it has no trace. */
void hm_bench_trace_report(hm_bench *b, const hm_layer *layer, const hm_gemm_args *args, const char *kernel);

#endif
