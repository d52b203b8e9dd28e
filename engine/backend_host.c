/* SPDX-License-Identifier: Apache-2.0 */
/* The host backend: plain memory, synchronous copies, wall-clock events. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "engine.h"
#include "params.h"

/* Room for the widest vector access of the reference kernels. */
#define HOST_ALIGN 64

static hm_status host_init(hm_engine *e) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int64_t threads = hm_param_host_threads();
  e->sm_count = threads > 0 ? (int)threads : (int)(cores > 0 ? cores : 1);
  e->arch = 0;
  e->device = -1;
  snprintf(e->device_name, sizeof(e->device_name), "host (%d threads)", e->sm_count);
  snprintf(e->pci_bus_id, sizeof(e->pci_bus_id), "none");
  return HM_OK;
}

static void host_fini(hm_engine *e) { (void)e; }

static hm_status host_alloc(hm_engine *e, size_t bytes, void **out) {
  (void)e;
  size_t rounded = (bytes + HOST_ALIGN - 1) / HOST_ALIGN * HOST_ALIGN;
  void *p = aligned_alloc(HOST_ALIGN, rounded);
  if (p == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "host allocation of %zu bytes", bytes);
  *out = p;
  return HM_OK;
}

static void host_free(hm_engine *e, void *ptr) {
  (void)e;
  free(ptr);
}

static hm_status host_copy(hm_engine *e, void *dst, const void *src, size_t bytes, hm_copy_kind kind,
                           hm_stream *s) {
  (void)e, (void)kind, (void)s;
  memmove(dst, src, bytes);
  return HM_OK;
}

static hm_status host_memset(hm_engine *e, void *dst, uint8_t value, size_t bytes, hm_stream *s) {
  (void)e, (void)s;
  memset(dst, value, bytes);
  return HM_OK;
}

static hm_status host_stream_create(hm_engine *e, void **native) {
  (void)e;
  *native = NULL;
  return HM_OK;
}

static void host_stream_destroy(hm_engine *e, void *native) { (void)e, (void)native; }

static hm_status host_stream_sync(hm_engine *e, void *native) {
  (void)e, (void)native;
  return HM_OK;
}

static hm_status host_stream_wait(hm_engine *e, void *waiter, void *signaller) {
  (void)e, (void)waiter, (void)signaller;
  return HM_OK;
}

/* An event is the time it was recorded: host work is done when its call returns. */
static hm_status host_event_create(hm_engine *e, void **native) {
  (void)e;
  double *t = calloc(1, sizeof(double));
  if (t == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "event");
  *native = t;
  return HM_OK;
}

static void host_event_destroy(hm_engine *e, void *native) {
  (void)e;
  free(native);
}

static hm_status host_event_record(hm_engine *e, void *event, void *stream) {
  (void)e, (void)stream;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  *(double *)event = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
  return HM_OK;
}

static hm_status host_event_elapsed(hm_engine *e, void *start, void *end, float *ms) {
  (void)e;
  *ms = (float)(*(double *)end - *(double *)start);
  return HM_OK;
}

const struct hm_backend_ops hm_backend_host_ops = {
    .name = "host",
    .init = host_init,
    .fini = host_fini,
    .alloc = host_alloc,
    .free = host_free,
    .copy = host_copy,
    .memset = host_memset,
    .stream_create = host_stream_create,
    .stream_destroy = host_stream_destroy,
    .stream_sync = host_stream_sync,
    .stream_wait = host_stream_wait,
    .event_create = host_event_create,
    .event_destroy = host_event_destroy,
    .event_record = host_event_record,
    .event_elapsed_ms = host_event_elapsed,
};
