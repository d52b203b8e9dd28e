/* SPDX-License-Identifier: Apache-2.0 */
/* The GPU-less driver table of hm_fake_cuda.h. */
#include "hm_fake_cuda.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "cuda_driver.h"

#define FAKE_CONTEXT ((CUcontext)0x1000)

static CUresult ctx_set_current(CUcontext c) {
  return c ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}
static CUresult device_get(CUdevice *d, int ordinal) {
  *d = ordinal;
  return CUDA_SUCCESS;
}
static CUresult retain(CUcontext *c, CUdevice d) {
  (void)d;
  *c = FAKE_CONTEXT;
  return CUDA_SUCCESS;
}
static CUresult release(CUdevice d) {
  (void)d;
  return CUDA_SUCCESS;
}
static CUresult load(CUmodule *m, const void *image) {
  static uintptr_t modules;
  (void)image;
  *m = (CUmodule)(0x2000 + ++modules);
  return CUDA_SUCCESS;
}
static CUresult unload(CUmodule m) {
  (void)m;
  return CUDA_SUCCESS;
}
static CUresult get_function(CUfunction *f, CUmodule m, const char *name) {
  (void)name;
  *f = (CUfunction)((uintptr_t)m + 0x100);
  return CUDA_SUCCESS;
}
static CUresult get_attr(int *v, CUfunction_attribute a, CUfunction f) {
  (void)f;
  *v = a == CU_FUNC_ATTRIBUTE_NUM_REGS ? 40 : a == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? 1024 : 0;
  return CUDA_SUCCESS;
}
static CUresult set_attr(CUfunction f, CUfunction_attribute a, int v) {
  (void)f, (void)v;
  return a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
static CUresult error_name(CUresult r, const char **s) {
  *s = r == CUDA_ERROR_INVALID_IMAGE ? "CUDA_ERROR_INVALID_IMAGE" : "CUDA_ERROR";
  return CUDA_SUCCESS;
}
static CUresult error_string(CUresult r, const char **s) {
  (void)r;
  *s = "fake";
  return CUDA_SUCCESS;
}

void hm_fake_cuda_install(void) {
  memset(&hm_cu, 0, sizeof(hm_cu));
  hm_cu.cuCtxSetCurrent = ctx_set_current;
  hm_cu.cuDeviceGet = device_get;
  hm_cu.cuDevicePrimaryCtxRetain = retain;
  hm_cu.cuDevicePrimaryCtxRelease = release;
  hm_cu.cuModuleLoadData = load;
  hm_cu.cuModuleUnload = unload;
  hm_cu.cuModuleGetFunction = get_function;
  hm_cu.cuFuncGetAttribute = get_attr;
  hm_cu.cuFuncSetAttribute = set_attr;
  hm_cu.cuGetErrorName = error_name;
  hm_cu.cuGetErrorString = error_string;
}

hm_engine hm_fake_cuda_engine(int arch) {
  hm_engine e;
  memset(&e, 0, sizeof(e));
  e.kind = HM_BACKEND_CUDA;
  e.ops = &hm_backend_host_ops; /* memory and streams on the host */
  e.device = 0;
  e.rank = -1;
  e.arch = arch;
  e.sm_count = 132;
  e.backend_state = FAKE_CONTEXT;
  snprintf(e.device_name, sizeof(e.device_name), "fake sm_%d", arch);
  return e;
}
