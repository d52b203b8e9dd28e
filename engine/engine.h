/* SPDX-License-Identifier: Apache-2.0 */
/* The engine and stream structs, private to the library. */
#ifndef HM_ENGINE_H
#define HM_ENGINE_H

#include "backend.h"

struct hm_engine {
  hm_backend_kind kind;
  const struct hm_backend_ops *ops;
  int device;     /* CUDA ordinal, -1 on the host */
  int rank;       /* for logs, -1 unknown */
  int arch;       /* 10*major+minor, 0 on the host */
  int sm_count;   /* multiprocessors, or host threads */
  char device_name[160];
  char pci_bus_id[32];
  void *backend_state; /* the backend's own (CUcontext on CUDA) */
};

struct hm_stream {
  hm_engine *engine;
  void *native; /* CUstream on CUDA, NULL on the host */
  bool owned;
};

struct hm_event {
  hm_engine *engine;
  void *native;
};

/* The stream's native handle, NULL for a NULL stream (the default stream). */
static inline void *hm_stream_native(const hm_stream *s) { return s ? s->native : NULL; }

/* Copies through the engine's backend; stream NULL means synchronous. */
hm_status hm_engine_copy(hm_engine *engine, void *dst, const void *src, size_t bytes, hm_copy_kind kind,
                         hm_stream *stream);
/* Sets bytes of engine memory to a byte value. */
hm_status hm_engine_memset(hm_engine *engine, void *dst, uint8_t value, size_t bytes, hm_stream *stream);

/* Events for timing and for ordering two streams. */
hm_status hm_event_create(hm_engine *engine, hm_event **out);
void hm_event_destroy(hm_event *event);
hm_status hm_event_record(hm_event *event, hm_stream *stream);
hm_status hm_event_elapsed_ms(hm_event *start, hm_event *end, float *ms);
/* Makes waiter wait for the work queued on signaller so far. */
hm_status hm_stream_wait_stream(hm_stream *waiter, hm_stream *signaller);

#endif
