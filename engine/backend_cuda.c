/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA backend: the device's primary context, made current on the calling thread
 * by every operation (ranks may call from worker threads), through the driver table.
 */
#include <stdio.h>
#include <string.h>

#include "cuda_driver.h"
#include "engine.h"
#include "log.h"

static CUcontext ctx_of(hm_engine *e) { return (CUcontext)e->backend_state; }

static hm_status make_current(hm_engine *e) {
  HM_CU_CHECK(cuCtxSetCurrent(ctx_of(e)));
  return HM_OK;
}

static hm_status describe_device(hm_engine *e, CUdevice dev) {
  char name[128];
  int major = 0, minor = 0, sms = 0;
  HM_CU_CHECK(cuDeviceGetName(name, (int)sizeof(name), dev));
  HM_CU_CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  HM_CU_CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  HM_CU_CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  HM_CU_CHECK(cuDeviceGetPCIBusId(e->pci_bus_id, (int)sizeof(e->pci_bus_id), dev));
  e->arch = major * 10 + minor;
  e->sm_count = sms;
  snprintf(e->device_name, sizeof(e->device_name), "%s (%d SMs, sm_%d)", name, sms, e->arch);
  return HM_OK;
}

static hm_status cuda_init(hm_engine *e) {
  HM_CHECK(hm_cu_load());
  int count = 0;
  HM_CU_CHECK(cuDeviceGetCount(&count));
  if (count == 0) HM_FAIL(HM_NO_DEVICE, "the driver sees no CUDA device");
  if (e->device < 0 || e->device >= count)
    HM_FAIL(HM_NO_DEVICE, "device %d requested, %d visible (check HUMMING_DEVICE, local rank)",
            e->device, count);
  CUdevice dev;
  HM_CU_CHECK(cuDeviceGet(&dev, e->device));
  HM_CHECK(describe_device(e, dev));
  if (e->arch < 75) HM_FAIL(HM_UNSUPPORTED, "%s: compute capability below 7.5", e->device_name);
  CUcontext ctx;
  HM_CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  e->backend_state = ctx;
  return make_current(e);
}

static void cuda_fini(hm_engine *e) {
  if (e->backend_state == NULL) return;
  CUdevice dev;
  if (hm_cu.cuDeviceGet(&dev, e->device) == CUDA_SUCCESS) hm_cu.cuDevicePrimaryCtxRelease(dev);
  e->backend_state = NULL;
}

static hm_status cuda_alloc(hm_engine *e, size_t bytes, void **out) {
  HM_CHECK(make_current(e));
  CUdeviceptr p;
  HM_CU_CHECK(cuMemAlloc(&p, bytes));
  *out = (void *)(uintptr_t)p;
  return HM_OK;
}

static void cuda_free(hm_engine *e, void *ptr) {
  if (make_current(e) != HM_OK) return;
  CUresult r = hm_cu.cuMemFree((CUdeviceptr)(uintptr_t)ptr);
  if (r != CUDA_SUCCESS) HM_WARN(INIT, "cuMemFree failed (%d); memory may be lost", (int)r);
}

static hm_status cuda_copy(hm_engine *e, void *dst, const void *src, size_t bytes, hm_copy_kind kind,
                           hm_stream *s) {
  HM_CHECK(make_current(e));
  CUstream st = (CUstream)hm_stream_native(s);
  CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst, sd = (CUdeviceptr)(uintptr_t)src;
  switch (kind) {
  case HM_COPY_H2D: HM_CU_CHECK(cuMemcpyHtoDAsync(d, src, bytes, st)); break;
  case HM_COPY_D2H: HM_CU_CHECK(cuMemcpyDtoHAsync(dst, sd, bytes, st)); break;
  case HM_COPY_D2D: HM_CU_CHECK(cuMemcpyDtoDAsync(d, sd, bytes, st)); break;
  }
  if (s == NULL) HM_CU_CHECK(cuStreamSynchronize(st));
  return HM_OK;
}

static hm_status cuda_memset(hm_engine *e, void *dst, uint8_t value, size_t bytes, hm_stream *s) {
  HM_CHECK(make_current(e));
  CUstream st = (CUstream)hm_stream_native(s);
  HM_CU_CHECK(cuMemsetD8Async((CUdeviceptr)(uintptr_t)dst, value, bytes, st));
  if (s == NULL) HM_CU_CHECK(cuStreamSynchronize(st));
  return HM_OK;
}

static hm_status cuda_stream_create(hm_engine *e, void **native) {
  HM_CHECK(make_current(e));
  CUstream st;
  HM_CU_CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  *native = st;
  return HM_OK;
}

static void cuda_stream_destroy(hm_engine *e, void *native) {
  if (make_current(e) == HM_OK) hm_cu.cuStreamDestroy((CUstream)native);
}

static hm_status cuda_stream_sync(hm_engine *e, void *native) {
  HM_CHECK(make_current(e));
  HM_CU_CHECK(cuStreamSynchronize((CUstream)native));
  return HM_OK;
}

static hm_status cuda_stream_wait(hm_engine *e, void *waiter, void *signaller) {
  HM_CHECK(make_current(e));
  CUevent ev;
  HM_CU_CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  hm_status ret = HM_OK;
  HM_CU_CHECK_GOTO(cuEventRecord(ev, (CUstream)signaller), done);
  HM_CU_CHECK_GOTO(cuStreamWaitEvent((CUstream)waiter, ev, 0), done);
done:
  hm_cu.cuEventDestroy(ev);
  return ret;
}

static hm_status cuda_event_create(hm_engine *e, void **native) {
  HM_CHECK(make_current(e));
  CUevent ev;
  HM_CU_CHECK(cuEventCreate(&ev, CU_EVENT_DEFAULT));
  *native = ev;
  return HM_OK;
}

static void cuda_event_destroy(hm_engine *e, void *native) {
  if (make_current(e) == HM_OK) hm_cu.cuEventDestroy((CUevent)native);
}

static hm_status cuda_event_record(hm_engine *e, void *event, void *stream) {
  HM_CHECK(make_current(e));
  HM_CU_CHECK(cuEventRecord((CUevent)event, (CUstream)stream));
  return HM_OK;
}

static hm_status cuda_event_elapsed(hm_engine *e, void *start, void *end, float *ms) {
  HM_CHECK(make_current(e));
  HM_CU_CHECK(cuEventSynchronize((CUevent)end));
  HM_CU_CHECK(cuEventElapsedTime(ms, (CUevent)start, (CUevent)end));
  return HM_OK;
}

const struct hm_backend_ops hm_backend_cuda_ops = {
    .name = "cuda",
    .init = cuda_init,
    .fini = cuda_fini,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy = cuda_copy,
    .memset = cuda_memset,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_sync = cuda_stream_sync,
    .stream_wait = cuda_stream_wait,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_elapsed_ms = cuda_event_elapsed,
};
