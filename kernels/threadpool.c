/* SPDX-License-Identifier: Apache-2.0 */
/* The parallel for of threadpool.h on pthreads. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "check.h"
#include "kernels/threadpool.h"
#include "log.h"

struct pool_run {
  hm_threadpool_fn fn;
  void *ctx;
  int count;
  atomic_int next;
};

int hm_threadpool_size(int threads_wanted) {
  if (threads_wanted > 0) return threads_wanted;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return 1;
}

static void *worker(void *arg) {
  struct pool_run *run = arg;
  int i;
  while ((i = atomic_fetch_add(&run->next, 1)) < run->count) run->fn(run->ctx, i);
  return NULL;
}

hm_status hm_threadpool_for(int threads, int count, hm_threadpool_fn fn, void *ctx) {
  HM_CHECK_NOT_NULL(fn);
  if (count < 0) HM_FAIL(HM_INVALID_ARGUMENT, "count %d is negative", count);
  struct pool_run run = {fn, ctx, count, 0};
  int helpers = hm_threadpool_size(threads) - 1;
  if (helpers > count - 1) helpers = count - 1;
  pthread_t *ids = helpers > 0 ? calloc((size_t)helpers, sizeof(*ids)) : NULL;
  int started = 0;
  while (ids && started < helpers && pthread_create(&ids[started], NULL, worker, &run) == 0) started++;
  if (started < helpers) HM_DEBUG(JIT, "started %d of %d compile threads", started, helpers);
  worker(&run);
  for (int t = 0; t < started; t++) pthread_join(ids[t], NULL);
  free(ids);
  return HM_OK;
}
