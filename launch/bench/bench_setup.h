/* SPDX-License-Identifier: Apache-2.0 */
/* Start and end of a bench process, for main.c. */
#ifndef HM_BENCH_SETUP_H
#define HM_BENCH_SETUP_H

#include "bench/bench.h"

/* MPI if needed, engine, stream, events, flush buffer, roofline. 0 or an exit code. */
int hm_bench_start(hm_bench *b);
/* Writes --json/--csv, agrees on the worst exit code over ranks, frees everything. */
int hm_bench_finish(hm_bench *b, int rc);

#endif
