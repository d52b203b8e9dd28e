/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A backend is a table of memory, stream and event operations. The host backend is
 * the reference (plain memory, synchronous); the CUDA backend drives one device through
 * the driver API. Compute operations live in their modules (kernels/, moe/, comm/),
 * each with a host and a CUDA implementation chosen by hm_engine_backend().
 */
#ifndef HM_BACKEND_H
#define HM_BACKEND_H

#include "humming.h"

typedef enum hm_copy_kind { HM_COPY_H2D, HM_COPY_D2H, HM_COPY_D2D } hm_copy_kind;

typedef struct hm_event hm_event;

struct hm_backend_ops {
  const char *name;
  /* Opens the device; fills engine->device_name, arch, sm_count. */
  hm_status (*init)(hm_engine *engine);
  void (*fini)(hm_engine *engine);
  hm_status (*alloc)(hm_engine *engine, size_t bytes, void **out);
  void (*free)(hm_engine *engine, void *ptr);
  /* stream NULL: synchronous. */
  hm_status (*copy)(hm_engine *engine, void *dst, const void *src, size_t bytes, hm_copy_kind kind,
                    hm_stream *stream);
  hm_status (*memset)(hm_engine *engine, void *dst, uint8_t value, size_t bytes, hm_stream *stream);
  hm_status (*stream_create)(hm_engine *engine, void **native);
  void (*stream_destroy)(hm_engine *engine, void *native);
  hm_status (*stream_sync)(hm_engine *engine, void *native);
  /* Makes native_waiter wait for all work queued so far on native_signaller. */
  hm_status (*stream_wait)(hm_engine *engine, void *native_waiter, void *native_signaller);
  hm_status (*event_create)(hm_engine *engine, void **native);
  void (*event_destroy)(hm_engine *engine, void *native);
  hm_status (*event_record)(hm_engine *engine, void *native_event, void *native_stream);
  /* Milliseconds between two recorded events; waits for the second. */
  hm_status (*event_elapsed_ms)(hm_engine *engine, void *start, void *end, float *ms);
};

extern const struct hm_backend_ops hm_backend_host_ops;
extern const struct hm_backend_ops hm_backend_cuda_ops;

#endif
