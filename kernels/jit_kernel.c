/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Kernels loaded into a device context: one module per (context, cache key), kept
 * until hm_shutdown. The primary context is retained while it holds our modules, so
 * an engine destroyed and made again on the same device finds them still valid.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda_driver.h"
#include "engine.h"
#include "kernels/jit_kernel.h"
#include "log.h"
#include "registry.h"

#define HM_KERNEL_BUCKETS 256
#define HM_DEFAULT_SHARED_LIMIT (48 * 1024)

struct retained_ctx {
  struct retained_ctx *next;
  CUcontext ctx;
  CUdevice device;
};

static struct {
  pthread_mutex_t lock;
  struct hm_kernel *buckets[HM_KERNEL_BUCKETS];
  struct retained_ctx *contexts;
} loaded = {.lock = PTHREAD_MUTEX_INITIALIZER};

static unsigned bucket_of(CUcontext ctx, const char *key) {
  uint64_t h = (uint64_t)(uintptr_t)ctx * 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 16; i++) h = (h ^ (unsigned char)key[i]) * 0x100000001b3ull;
  return (unsigned)(h % HM_KERNEL_BUCKETS);
}

static struct hm_kernel *find_locked(CUcontext ctx, const char *key) {
  struct hm_kernel *k = loaded.buckets[bucket_of(ctx, key)];
  while (k && (k->ctx != ctx || strcmp(k->key, key) != 0)) k = k->next;
  return k;
}

static void unload_all(void) {
  pthread_mutex_lock(&loaded.lock);
  for (int b = 0; b < HM_KERNEL_BUCKETS; b++) {
    while (loaded.buckets[b]) {
      struct hm_kernel *k = loaded.buckets[b];
      loaded.buckets[b] = k->next;
      if (hm_cu.cuCtxSetCurrent && hm_cu.cuCtxSetCurrent(k->ctx) == CUDA_SUCCESS)
        hm_cu.cuModuleUnload(k->module);
      pthread_mutex_destroy(&k->limit_lock);
      free(k);
    }
  }
  while (loaded.contexts) {
    struct retained_ctx *r = loaded.contexts;
    loaded.contexts = r->next;
    if (hm_cu.cuDevicePrimaryCtxRelease) hm_cu.cuDevicePrimaryCtxRelease(r->device);
    free(r);
  }
  pthread_mutex_unlock(&loaded.lock);
}

/* Retains the engine's primary context once, for as long as our modules live in it. */
static hm_status retain_context(hm_engine *engine, CUcontext ctx) {
  pthread_mutex_lock(&loaded.lock);
  struct retained_ctx *r = loaded.contexts;
  while (r && r->ctx != ctx) r = r->next;
  pthread_mutex_unlock(&loaded.lock);
  if (r) return HM_OK;
  CUdevice device;
  CUcontext primary;
  HM_CU_CHECK(cuDeviceGet(&device, engine->device));
  HM_CU_CHECK(cuDevicePrimaryCtxRetain(&primary, device));
  r = calloc(1, sizeof(*r));
  if (r == NULL) {
    hm_cu.cuDevicePrimaryCtxRelease(device);
    HM_FAIL(HM_OUT_OF_MEMORY, "context record");
  }
  *r = (struct retained_ctx){NULL, ctx, device};
  pthread_mutex_lock(&loaded.lock);
  r->next = loaded.contexts;
  loaded.contexts = r;
  pthread_mutex_unlock(&loaded.lock);
  return HM_OK;
}

hm_status hm_kernel_set_shared_limit(hm_kernel *k, size_t bytes) {
  HM_CU_CHECK(cuFuncSetAttribute(k->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)bytes));
  k->shared_limit = bytes;
  return HM_OK;
}

static hm_status read_attributes(struct hm_kernel *k) {
  HM_CU_CHECK(cuFuncGetAttribute(&k->regs, CU_FUNC_ATTRIBUTE_NUM_REGS, k->function));
  HM_CU_CHECK(cuFuncGetAttribute(&k->static_shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, k->function));
  HM_CU_CHECK(cuFuncGetAttribute(&k->max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k->function));
  k->shared_limit = HM_DEFAULT_SHARED_LIMIT;
  if (k->meta.shared_bytes > HM_DEFAULT_SHARED_LIMIT)
    HM_CHECK(hm_kernel_set_shared_limit(k, k->meta.shared_bytes));
  return HM_OK;
}

/* A kernel whose registers spill still runs, slower than its tiling should: said once, at
 * load, so that a slow run can be traced to it. The record is read by our own parser of an
 * undocumented section (jit_elf.c); a cubin it cannot read is still loaded. */
static void say_spills(const hm_cubin *cubin, const char *name) {
  hm_kernel_resources r;
  if (hm_cubin_kernel_resources(cubin, name, &r) != HM_OK)
    HM_DEBUG(JIT, "no resource record for %s: %s", name, hm_last_error());
  else if (r.local_bytes > 0)
    HM_WARN(JIT,
            "kernel %s keeps %u bytes a thread in local memory at %u registers (register spills or "
            "a local array): it runs slower than its tiling should",
            name, r.local_bytes, r.registers);
}

static hm_status load_module(CUcontext ctx, const hm_cubin *cubin, const char *name, struct hm_kernel **out) {
  struct hm_kernel *k = calloc(1, sizeof(*k));
  if (k == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "kernel record for %s", name);
  k->ctx = ctx;
  pthread_mutex_init(&k->limit_lock, NULL);
  memcpy(k->key, cubin->key, sizeof(k->key));
  snprintf(k->name, sizeof(k->name), "%s", name);
  hm_status ret = HM_OK;
  HM_CHECK_GOTO(hm_cubin_kernel_meta(cubin, name, &k->meta), fail);
  say_spills(cubin, name);
  HM_CU_CHECK_GOTO(cuModuleLoadData(&k->module, cubin->data), fail);
  HM_CU_CHECK_GOTO(cuModuleGetFunction(&k->function, k->module, name), fail);
  HM_CHECK_GOTO(read_attributes(k), fail);
  *out = k;
  return HM_OK;
fail:
  if (k->module) hm_cu.cuModuleUnload(k->module);
  pthread_mutex_destroy(&k->limit_lock);
  free(k);
  return ret;
}

/* Publishes k unless another thread loaded the same kernel first; *out is the winner. */
static void publish(struct hm_kernel *k, hm_kernel **out) {
  pthread_mutex_lock(&loaded.lock);
  struct hm_kernel *first = find_locked(k->ctx, k->key);
  if (first == NULL) {
    unsigned b = bucket_of(k->ctx, k->key);
    k->next = loaded.buckets[b];
    loaded.buckets[b] = k;
  }
  pthread_mutex_unlock(&loaded.lock);
  if (first) {
    hm_cu.cuModuleUnload(k->module);
    pthread_mutex_destroy(&k->limit_lock);
    free(k);
  }
  *out = first ? first : k;
}

hm_status hm_kernel_get(hm_engine *engine, const hm_kernel_source *src, hm_kernel **out) {
  HM_CHECK_NOT_NULL(engine);
  HM_CHECK_NOT_NULL(src);
  HM_CHECK_NOT_NULL(out);
  *out = NULL;
  if (engine->kind != HM_BACKEND_CUDA)
    HM_FAIL(HM_UNSUPPORTED, "kernel %s needs the CUDA backend; this engine runs on %s",
            src->name ? src->name : "?", engine->device_name[0] ? engine->device_name : "the host");
  hm_kernel_source for_device = *src;
  if (for_device.arch == 0) for_device.arch = engine->arch;
  const hm_cubin *cubin;
  HM_CHECK(hm_jit_get_cubin(&for_device, &cubin));
  CUcontext ctx = (CUcontext)engine->backend_state;
  pthread_mutex_lock(&loaded.lock);
  struct hm_kernel *k = find_locked(ctx, cubin->key);
  pthread_mutex_unlock(&loaded.lock);
  if (k) {
    *out = k;
    return HM_OK;
  }
  HM_CHECK(hm_registry_on_shutdown(unload_all));
  HM_CU_CHECK(cuCtxSetCurrent(ctx));
  HM_CHECK(retain_context(engine, ctx));
  HM_CHECK(load_module(ctx, cubin, src->name, &k));
  publish(k, out);
  /* *out, not k: a thread that lost the race to publish has had its k freed. */
  HM_DEBUG(JIT, "loaded %s (%d regs, %d B static shared) on %s", (*out)->name, (*out)->regs,
           (*out)->static_shared, engine->device_name);
  return HM_OK;
}
