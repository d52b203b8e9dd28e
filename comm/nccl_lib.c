/* SPDX-License-Identifier: Apache-2.0 */
/* dlopen of libnccl.so.2 and the entry-point table. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "nccl_lib.h"
#include "params.h"
#include "registry.h"

struct hm_nccl_table hm_nccl;

/* Process-wide like the library it holds; hm_shutdown closes it (hm_nccl_unload). */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static void *nccl_handle;
static hm_status load_status = HM_STATUS_COUNT; /* not tried yet */
static char load_error[512];

static hm_status fill_table(const char *lib) {
#define HM_NCCL_GET_(name)                                                                          \
  do {                                                                                              \
    void *fn_ = dlsym(nccl_handle, #name);                                                          \
    if (fn_ == NULL) {                                                                              \
      snprintf(load_error, sizeof(load_error), "%s has no %s (NCCL older than 2.18?)", lib, #name); \
      return HM_UNSUPPORTED;                                                                        \
    }                                                                                               \
    memcpy(&hm_nccl.name, &fn_, sizeof(fn_));                                                       \
  } while (0);
  HM_NCCL_FUNCTIONS(HM_NCCL_GET_)
#undef HM_NCCL_GET_
  return HM_OK;
}

static hm_status load_locked(void) {
  const char *lib = hm_param_libnccl();
  nccl_handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (nccl_handle == NULL) {
    snprintf(load_error, sizeof(load_error), "cannot open %s: %s", lib, dlerror());
    return HM_UNSUPPORTED;
  }
  hm_status st = fill_table(lib);
  if (st != HM_OK) return st;
  int version = 0;
  if (hm_nccl.ncclGetVersion(&version) != ncclSuccess || version < HM_NCCL_MIN_VERSION) {
    snprintf(load_error, sizeof(load_error), "%s is NCCL %d, need %d or newer", lib, version,
             HM_NCCL_MIN_VERSION);
    return HM_UNSUPPORTED;
  }
  HM_INFO(COMM, "loaded %s, NCCL %d", lib, version);
  return HM_OK;
}

hm_status hm_nccl_load(void) {
  pthread_mutex_lock(&load_lock);
  if (load_status == HM_STATUS_COUNT) {
    load_status = load_locked();
    if (load_status != HM_OK) {
      if (nccl_handle) dlclose(nccl_handle);
      nccl_handle = NULL;
      memset(&hm_nccl, 0, sizeof(hm_nccl));
    }
  }
  hm_status st = load_status;
  pthread_mutex_unlock(&load_lock);
  if (st != HM_OK) HM_FAIL(st, "NCCL unavailable: %s", load_error);
  return hm_registry_on_shutdown(hm_nccl_unload);
}

void hm_nccl_unload(void) {
  pthread_mutex_lock(&load_lock);
  if (nccl_handle) dlclose(nccl_handle);
  nccl_handle = NULL;
  memset(&hm_nccl, 0, sizeof(hm_nccl));
  load_status = HM_STATUS_COUNT;
  pthread_mutex_unlock(&load_lock);
}

hm_status hm_nccl_fail(ncclResult_t result, ncclComm_t comm, const char *call, const char *file, int line) {
  const char *text = hm_nccl.ncclGetErrorString ? hm_nccl.ncclGetErrorString(result) : "no description";
  const char *last = comm && hm_nccl.ncclGetLastError ? hm_nccl.ncclGetLastError(comm) : "";
  hm_status st = result == ncclRemoteError ? HM_REMOTE : HM_NCCL;
  return hm_error_set(st, file, line, "%s failed: %s (%d)%s%s", call, text, (int)result,
                      last && last[0] ? ": " : "", last ? last : "");
}
