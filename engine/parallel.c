/* SPDX-License-Identifier: Apache-2.0 */
/* The host parallel-for: short-lived pthreads pulling chunks from one atomic counter. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "parallel.h"
#include "params.h"

struct parallel_state {
  int64_t count;
  int64_t grain;
  hm_parallel_body body;
  void *ctx;
  _Atomic int64_t next; /* first item not handed out yet */
  atomic_bool failed;
  pthread_mutex_t lock; /* guards the first failure below */
  hm_status status;
  int failed_worker;
  char message[1024];
};

struct parallel_worker {
  struct parallel_state *state;
  int index;
  pthread_t thread;
};

int hm_parallel_threads(void) {
  int64_t threads = hm_param_host_threads();
  if (threads > 0) return (int)threads;
  /* The affinity mask, not the machine: ranks bound to a few cores must not oversubscribe. */
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores > 0 ? (int)cores : 1;
}

int hm_parallel_workers(int64_t count, int64_t grain, int threads) {
  if (threads <= 0) threads = hm_parallel_threads();
  if (count <= 0 || grain <= 0) return 1;
  int64_t chunks = count / grain + (count % grain != 0);
  return chunks < threads ? (int)chunks : threads;
}

/* Claims the next chunk; false once every item is handed out. */
static bool claim_chunk(struct parallel_state *s, int64_t *begin, int64_t *end) {
  int64_t first = atomic_load(&s->next);
  int64_t last;
  do {
    if (first >= s->count) return false;
    last = s->count - first < s->grain ? s->count : first + s->grain;
  } while (!atomic_compare_exchange_weak(&s->next, &first, last));
  *begin = first;
  *end = last;
  return true;
}

static void record_failure(struct parallel_state *s, hm_status status, int worker) {
  pthread_mutex_lock(&s->lock);
  if (s->status == HM_OK) {
    s->status = status;
    s->failed_worker = worker;
    snprintf(s->message, sizeof(s->message), "%s", hm_last_error());
  }
  pthread_mutex_unlock(&s->lock);
  atomic_store(&s->failed, true);
}

static void run_chunks(struct parallel_state *s, int worker) {
  int64_t begin, end;
  while (!atomic_load(&s->failed) && claim_chunk(s, &begin, &end)) {
    hm_status status = s->body(s->ctx, begin, end, worker);
    if (status != HM_OK) record_failure(s, status, worker);
  }
}

static void *worker_main(void *arg) {
  struct parallel_worker *w = arg;
  run_chunks(w->state, w->index);
  return NULL;
}

hm_status hm_parallel_for(int64_t count, int64_t grain, int threads, hm_parallel_body body, void *ctx) {
  HM_CHECK_NOT_NULL(body);
  if (count < 0) HM_FAIL(HM_INVALID_ARGUMENT, "parallel-for count %lld is negative", (long long)count);
  if (grain < 1) HM_FAIL(HM_INVALID_ARGUMENT, "parallel-for grain %lld must be >= 1", (long long)grain);
  if (threads < 0) HM_FAIL(HM_INVALID_ARGUMENT, "parallel-for threads %d is negative", threads);
  if (count == 0) return HM_OK;

  struct parallel_state s = {.count = count, .grain = grain, .body = body, .ctx = ctx, .status = HM_OK};
  atomic_init(&s.next, 0);
  atomic_init(&s.failed, false);
  pthread_mutex_init(&s.lock, NULL);
  int workers = hm_parallel_workers(count, grain, threads);
  struct parallel_worker *pool = NULL;
  int started = 0;
  if (workers > 1) pool = calloc((size_t)workers - 1, sizeof(*pool));
  /* Workers that cannot be started (no memory, thread limit) only make the loop slower. */
  for (int i = 1; pool != NULL && i < workers; i++) {
    pool[started] = (struct parallel_worker){.state = &s, .index = i};
    if (pthread_create(&pool[started].thread, NULL, worker_main, &pool[started]) != 0) break;
    started++;
  }
  run_chunks(&s, 0);
  for (int i = 0; i < started; i++) pthread_join(pool[i].thread, NULL);
  free(pool);
  pthread_mutex_destroy(&s.lock);
  if (s.status == HM_OK || s.failed_worker == 0) return s.status;
  /* The message was recorded on the worker's thread; the caller reads its own. */
  HM_FAIL(s.status, "in worker %d: %s", s.failed_worker, s.message);
}
