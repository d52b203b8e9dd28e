/* SPDX-License-Identifier: Apache-2.0 */
/* Engine lifetime, backend choice, streams, events and memory entry points. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda_driver.h"
#include "engine.h"
#include "log.h"
#include "params.h"
#include "registry.h"

static hm_status parse_backend_param(hm_backend_kind *out) {
  const char *v = hm_param_backend();
  if (strcmp(v, "auto") == 0) *out = HM_BACKEND_AUTO;
  else if (strcmp(v, "host") == 0) *out = HM_BACKEND_HOST;
  else if (strcmp(v, "cuda") == 0) *out = HM_BACKEND_CUDA;
  else HM_FAIL(HM_INVALID_ARGUMENT, "HUMMING_BACKEND=%s: expected auto, host or cuda", v);
  return HM_OK;
}

static hm_status check_config(const hm_engine_config *c) {
  HM_CHECK_NOT_NULL(c);
  if (c->magic != HM_ENGINE_CONFIG_MAGIC || c->size < sizeof(hm_engine_config))
    HM_FAIL(HM_INVALID_ARGUMENT, "engine config not initialized with HM_ENGINE_CONFIG_INIT");
  if (c->backend < HM_BACKEND_AUTO || c->backend > HM_BACKEND_CUDA)
    HM_FAIL(HM_INVALID_ARGUMENT, "unknown backend kind %d", (int)c->backend);
  return HM_OK;
}

/* Explicit field > HUMMING_BACKEND > CUDA if a device answers > host. */
static hm_status open_backend(hm_engine *e, hm_backend_kind requested) {
  if (requested == HM_BACKEND_AUTO) HM_CHECK(parse_backend_param(&requested));
  if (requested == HM_BACKEND_HOST) {
    e->kind = HM_BACKEND_HOST;
    e->ops = &hm_backend_host_ops;
    return e->ops->init(e);
  }
  e->kind = HM_BACKEND_CUDA;
  e->ops = &hm_backend_cuda_ops;
  hm_status st = e->ops->init(e);
  if (st == HM_OK || requested == HM_BACKEND_CUDA) return st;
  HM_INFO(INIT, "no usable CUDA device (%s); using the host backend", hm_last_error());
  e->kind = HM_BACKEND_HOST;
  e->ops = &hm_backend_host_ops;
  return e->ops->init(e);
}

hm_status hm_engine_create(const hm_engine_config *config, hm_engine **out) {
  HM_CHECK_NOT_NULL(out);
  *out = NULL;
  HM_CHECK(check_config(config));
  hm_engine *e = calloc(1, sizeof(*e));
  if (e == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "engine");
  e->rank = config->rank;
  e->device = config->device >= 0 ? config->device : (int)hm_param_device();
  if (e->device < 0) e->device = config->local_rank;
  hm_status ret = open_backend(e, config->backend);
  if (ret != HM_OK) {
    free(e);
    return ret;
  }
  hm_log_set_rank(e->rank, e->kind == HM_BACKEND_CUDA ? e->device : -1);
  hm_registry_acquire();
  HM_INFO(INIT, "engine on %s backend: %s", e->ops->name, e->device_name);
  *out = e;
  return HM_OK;
}

void hm_engine_destroy(hm_engine *engine) {
  if (engine == NULL) return;
  if (engine->ops) engine->ops->fini(engine);
  free(engine);
  hm_registry_release();
}

hm_backend_kind hm_engine_backend(const hm_engine *engine) {
  return engine ? engine->kind : HM_BACKEND_HOST;
}

const char *hm_engine_device_name(const hm_engine *engine) {
  return engine ? engine->device_name : "";
}

int hm_engine_arch(const hm_engine *engine) { return engine ? engine->arch : 0; }

int hm_engine_device(const hm_engine *engine) {
  return engine && engine->kind == HM_BACKEND_CUDA ? engine->device : -1;
}

hm_status hm_stream_create(hm_engine *engine, hm_stream **out) {
  HM_CHECK_NOT_NULL(engine);
  HM_CHECK_NOT_NULL(out);
  hm_stream *s = calloc(1, sizeof(*s));
  if (s == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "stream");
  s->engine = engine;
  s->owned = true;
  hm_status st = engine->ops->stream_create(engine, &s->native);
  if (st != HM_OK) {
    free(s);
    return st;
  }
  *out = s;
  return HM_OK;
}

hm_status hm_stream_wrap(hm_engine *engine, void *native_stream, hm_stream **out) {
  HM_CHECK_NOT_NULL(engine);
  HM_CHECK_NOT_NULL(out);
  hm_stream *s = calloc(1, sizeof(*s));
  if (s == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "stream");
  s->engine = engine;
  s->native = native_stream;
  s->owned = false;
  *out = s;
  return HM_OK;
}

hm_status hm_stream_synchronize(hm_stream *stream) {
  HM_CHECK_NOT_NULL(stream);
  return stream->engine->ops->stream_sync(stream->engine, stream->native);
}

void hm_stream_destroy(hm_stream *stream) {
  if (stream == NULL) return;
  if (stream->owned) stream->engine->ops->stream_destroy(stream->engine, stream->native);
  free(stream);
}

hm_status hm_stream_wait_stream(hm_stream *waiter, hm_stream *signaller) {
  HM_CHECK_NOT_NULL(waiter);
  HM_CHECK_NOT_NULL(signaller);
  return waiter->engine->ops->stream_wait(waiter->engine, waiter->native, signaller->native);
}

hm_status hm_event_create(hm_engine *engine, hm_event **out) {
  HM_CHECK_NOT_NULL(engine);
  HM_CHECK_NOT_NULL(out);
  hm_event *ev = calloc(1, sizeof(*ev));
  if (ev == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "event");
  ev->engine = engine;
  hm_status st = engine->ops->event_create(engine, &ev->native);
  if (st != HM_OK) {
    free(ev);
    return st;
  }
  *out = ev;
  return HM_OK;
}

void hm_event_destroy(hm_event *event) {
  if (event == NULL) return;
  event->engine->ops->event_destroy(event->engine, event->native);
  free(event);
}

hm_status hm_event_record(hm_event *event, hm_stream *stream) {
  HM_CHECK_NOT_NULL(event);
  return event->engine->ops->event_record(event->engine, event->native, hm_stream_native(stream));
}

hm_status hm_event_elapsed_ms(hm_event *start, hm_event *end, float *ms) {
  HM_CHECK_NOT_NULL(start);
  HM_CHECK_NOT_NULL(end);
  HM_CHECK_NOT_NULL(ms);
  return start->engine->ops->event_elapsed_ms(start->engine, start->native, end->native, ms);
}

hm_status hm_mem_alloc(hm_engine *engine, size_t bytes, void **out) {
  HM_CHECK_NOT_NULL(engine);
  HM_CHECK_NOT_NULL(out);
  *out = NULL;
  if (bytes == 0) return HM_OK;
  return engine->ops->alloc(engine, bytes, out);
}

void hm_mem_free(hm_engine *engine, void *ptr) {
  if (engine == NULL || ptr == NULL) return;
  engine->ops->free(engine, ptr);
}

hm_status hm_engine_copy(hm_engine *engine, void *dst, const void *src, size_t bytes, hm_copy_kind kind,
                         hm_stream *stream) {
  HM_CHECK_NOT_NULL(engine);
  if (bytes == 0) return HM_OK;
  HM_CHECK_NOT_NULL(dst);
  HM_CHECK_NOT_NULL(src);
  return engine->ops->copy(engine, dst, src, bytes, kind, stream);
}

hm_status hm_engine_memset(hm_engine *engine, void *dst, uint8_t value, size_t bytes, hm_stream *stream) {
  HM_CHECK_NOT_NULL(engine);
  if (bytes == 0) return HM_OK;
  HM_CHECK_NOT_NULL(dst);
  return engine->ops->memset(engine, dst, value, bytes, stream);
}

hm_status hm_mem_upload(hm_engine *engine, void *dst, const void *src, size_t bytes) {
  return hm_engine_copy(engine, dst, src, bytes, HM_COPY_H2D, NULL);
}

hm_status hm_mem_download(hm_engine *engine, void *dst, const void *src, size_t bytes) {
  return hm_engine_copy(engine, dst, src, bytes, HM_COPY_D2H, NULL);
}
