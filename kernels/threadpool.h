/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A parallel for over [0, count): threads take the next index until none is left.
 * Compiles are long (100 ms to seconds) and uneven, so taking one index at a time
 * balances better than splitting the range up front.
 */
#ifndef HM_THREADPOOL_H
#define HM_THREADPOOL_H

#include "humming.h"

typedef void (*hm_threadpool_fn)(void *ctx, int index);

/* Threads to use for threads_wanted (0: the cores this process may run on). */
int hm_threadpool_size(int threads_wanted);
/*
 * Runs fn(ctx, i) for every i on up to threads threads (the caller's among them) and
 * returns when all are done. A thread that cannot be started is not a failure: the
 * others, the caller's at least, take its share.
 */
hm_status hm_threadpool_for(int threads, int count, hm_threadpool_fn fn, void *ctx);

#endif
