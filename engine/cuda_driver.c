/* SPDX-License-Identifier: Apache-2.0 */
/* dlopen of libcuda.so.1 and the entry-point table. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda_driver.h"
#include "log.h"
#include "params.h"

struct hm_cu_table hm_cu;

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static void *driver_handle;
static hm_status load_status = HM_STATUS_COUNT; /* not tried yet */
static char load_error[512];

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static hm_status fill_table(get_proc_fn get_proc) {
#define HM_CU_GET_(name)                                                                \
  do {                                                                                  \
    CUdriverProcAddressQueryResult found_;                                              \
    void *fn_ = NULL;                                                                   \
    if (get_proc(#name, &fn_, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found_) != CUDA_SUCCESS || \
        fn_ == NULL) {                                                                  \
      snprintf(load_error, sizeof(load_error), "the driver has no %s (driver too old?)", #name); \
      return HM_NO_DEVICE;                                                              \
    }                                                                                   \
    memcpy(&hm_cu.name, &fn_, sizeof(fn_));                                             \
  } while (0);
  HM_CU_FUNCTIONS(HM_CU_GET_)
#undef HM_CU_GET_
  return HM_OK;
}

static hm_status load_locked(void) {
  const char *lib = hm_param_libcuda();
  driver_handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (driver_handle == NULL) {
    snprintf(load_error, sizeof(load_error), "cannot open %s: %s", lib, dlerror());
    return HM_NO_DEVICE;
  }
  void *sym = dlsym(driver_handle, "cuGetProcAddress_v2");
  if (sym == NULL) {
    snprintf(load_error, sizeof(load_error), "%s has no cuGetProcAddress_v2 (driver older than CUDA 12.5)", lib);
    return HM_NO_DEVICE;
  }
  get_proc_fn get_proc;
  memcpy(&get_proc, &sym, sizeof(sym));
  hm_status st = fill_table(get_proc);
  if (st != HM_OK) return st;
  CUresult r = hm_cu.cuInit(0);
  if (r != CUDA_SUCCESS) {
    char text[160];
    snprintf(load_error, sizeof(load_error), "cuInit failed: %s", hm_cu_error_text(r, text, sizeof(text)));
    return HM_NO_DEVICE;
  }
  int version = 0;
  hm_cu.cuDriverGetVersion(&version);
  HM_INFO(INIT, "loaded %s, driver API %d.%d", lib, version / 1000, (version % 1000) / 10);
  return HM_OK;
}

hm_status hm_cu_load(void) {
  pthread_mutex_lock(&load_lock);
  if (load_status == HM_STATUS_COUNT) {
    load_status = load_locked();
    if (load_status != HM_OK) {
      if (driver_handle) dlclose(driver_handle);
      driver_handle = NULL;
      memset(&hm_cu, 0, sizeof(hm_cu));
    }
  }
  hm_status st = load_status;
  pthread_mutex_unlock(&load_lock);
  if (st != HM_OK) HM_FAIL(st, "CUDA driver unavailable: %s", load_error);
  return HM_OK;
}

void hm_cu_unload(void) {
  pthread_mutex_lock(&load_lock);
  if (driver_handle) dlclose(driver_handle);
  driver_handle = NULL;
  memset(&hm_cu, 0, sizeof(hm_cu));
  load_status = HM_STATUS_COUNT;
  pthread_mutex_unlock(&load_lock);
}

const char *hm_cu_error_text(CUresult result, char *buf, size_t len) {
  const char *name = NULL, *text = NULL;
  if (hm_cu.cuGetErrorName) hm_cu.cuGetErrorName(result, &name);
  if (hm_cu.cuGetErrorString) hm_cu.cuGetErrorString(result, &text);
  snprintf(buf, len, "%s (%s)", name ? name : "CUDA error", text ? text : "no description");
  if (name == NULL) snprintf(buf, len, "CUresult %d", (int)result);
  return buf;
}

hm_status hm_cu_fail(CUresult result, const char *call, const char *file, int line) {
  char text[160];
  hm_status st = result == CUDA_ERROR_OUT_OF_MEMORY ? HM_OUT_OF_MEMORY : HM_CUDA;
  return hm_error_set(st, file, line, "%s failed: %s", call, hm_cu_error_text(result, text, sizeof(text)));
}
