/* SPDX-License-Identifier: Apache-2.0 */
/* Many kernels at once on the thread pool; the first failure is reported once all end. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/jit_internal.h"
#include "kernels/threadpool.h"
#include "log.h"
#include "params.h"

/*
 * Two passes. The first skips kernels whose cache lock another process holds, so the
 * ranks of a node asking for the same list spread over it instead of queueing on its
 * first entry; the second waits for what the first skipped (by then mostly written).
 */
struct batch_run {
  const hm_kernel_source *srcs;
  const hm_cubin **outs;
  hm_status *status;
  char **errors;
  int *order; /* the items of this pass */
  int count;
  bool wait;
  const hm_jit_batch *batch;
  pthread_mutex_t progress_lock;
  int done;
};

static void compile_one(void *ctx, int n) {
  struct batch_run *run = ctx;
  int i = run->order[n];
  bool busy = false;
  run->status[i] = hm_jit_find_cubin(&run->srcs[i], run->wait, &run->outs[i], &busy);
  if (run->status[i] != HM_OK) run->errors[i] = strdup(hm_last_error());
  if (busy || run->batch->progress == NULL) return;
  pthread_mutex_lock(&run->progress_lock);
  run->batch->progress(++run->done, run->count, run->batch->user);
  pthread_mutex_unlock(&run->progress_lock);
}

/* Strips the "<status>: " that hm_last_error() puts before a message. */
static const char *message_of(const char *error, hm_status status) {
  if (error == NULL) return "(no message)";
  size_t n = strlen(hm_status_str(status));
  if (strncmp(error, hm_status_str(status), n) == 0 && strncmp(error + n, ": ", 2) == 0) return error + n + 2;
  return error;
}

static hm_status report(const struct batch_run *run, int count) {
  int failed = 0, first = -1;
  for (int i = 0; i < count; i++) {
    if (run->status[i] == HM_OK) continue;
    if (first < 0) first = i;
    failed++;
    if (failed > 1) HM_WARN(JIT, "%s", run->errors[i] ? run->errors[i] : hm_status_str(run->status[i]));
  }
  if (first < 0) return HM_OK;
  HM_FAIL(run->status[first], "%s (%d of %d kernels failed)",
          message_of(run->errors[first], run->status[first]), failed, count);
}

hm_status hm_jit_get_cubins_ex(const hm_kernel_source *srcs, int count, const hm_jit_batch *batch,
                               const hm_cubin **outs) {
  HM_CHECK_NOT_NULL(outs);
  if (count < 0) HM_FAIL(HM_INVALID_ARGUMENT, "kernel count %d is negative", count);
  if (count > 0) HM_CHECK_NOT_NULL(srcs);
  hm_jit_batch defaults = {0};
  if (batch == NULL) batch = &defaults;
  int threads = batch->threads > 0 ? batch->threads : (int)hm_param_jit_threads();
  struct batch_run run = {srcs,
                          outs,
                          calloc((size_t)count + 1, sizeof(hm_status)),
                          calloc((size_t)count + 1, sizeof(char *)),
                          calloc((size_t)count + 1, sizeof(int)),
                          count,
                          false,
                          batch,
                          PTHREAD_MUTEX_INITIALIZER,
                          0};
  hm_status ret = HM_OK;
  if (!run.status || !run.errors || !run.order)
    HM_FAIL_GOTO(HM_OUT_OF_MEMORY, done, "batch of %d kernels", count);
  for (int i = 0; i < count; i++) {
    outs[i] = NULL;
    run.order[i] = i;
  }
  HM_CHECK_GOTO(hm_threadpool_for(threads, count, compile_one, &run), done);
  run.count = 0;
  for (int i = 0; i < count; i++)
    if (run.status[i] == HM_OK && outs[i] == NULL) run.order[run.count++] = i;
  run.wait = true;
  HM_CHECK_GOTO(hm_threadpool_for(threads, run.count, compile_one, &run), done);
  ret = report(&run, count);
done:
  for (int i = 0; run.errors && i < count; i++) free(run.errors[i]);
  free(run.errors);
  free(run.status);
  free(run.order);
  return ret;
}

hm_status hm_jit_get_cubins(const hm_kernel_source *srcs, int count, const hm_cubin **outs) {
  return hm_jit_get_cubins_ex(srcs, count, NULL, outs);
}
