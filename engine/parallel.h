/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A small parallel-for for the host backend. Items [0, count) are handed out in
 * chunks of `grain` from a shared counter, so uneven chunks balance themselves; the
 * calling thread works too. Threads live for one call: no pool, no global state.
 */
#ifndef HM_PARALLEL_H
#define HM_PARALLEL_H

#include <stdint.h>

#include "humming.h"

/*
 * Processes items [begin, end) as worker `worker` (0 .. workers-1, stable for the
 * whole call, so it can index per-worker scratch). A failure stops the loop.
 */
typedef hm_status (*hm_parallel_body)(void *ctx, int64_t begin, int64_t end, int worker);

/* Threads of the host backend: HUMMING_HOST_THREADS, or the CPUs this process may use when 0. */
int hm_parallel_threads(void);

/* Workers hm_parallel_for starts for these arguments (threads 0 = hm_parallel_threads()), >= 1. */
int hm_parallel_workers(int64_t count, int64_t grain, int threads);

/*
 * Runs body over [0, count) on up to hm_parallel_workers(count, grain, threads) workers.
 * Returns the first failure; its message is then the caller's hm_last_error().
 */
hm_status hm_parallel_for(int64_t count, int64_t grain, int threads, hm_parallel_body body, void *ctx);

#endif
