/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA driver, reached only through this table. libcuda.so.1 is opened with dlopen
 * and its entry points fetched with cuGetProcAddress, so every binary starts on a
 * machine without a driver; tests replace entries to inject driver failures.
 */
#ifndef HM_CUDA_DRIVER_H
#define HM_CUDA_DRIVER_H

#include <cuda.h>

#include "check.h"

#define HM_CU_FUNCTIONS(X)                                                              \
  X(cuInit)                                                                             \
  X(cuDriverGetVersion)                                                                 \
  X(cuGetErrorName)                                                                     \
  X(cuGetErrorString)                                                                   \
  X(cuDeviceGetCount)                                                                   \
  X(cuDeviceGet)                                                                        \
  X(cuDeviceGetName)                                                                    \
  X(cuDeviceGetAttribute)                                                               \
  X(cuDeviceTotalMem)                                                                   \
  X(cuDeviceGetPCIBusId)                                                                \
  X(cuDevicePrimaryCtxRetain)                                                           \
  X(cuDevicePrimaryCtxRelease)                                                          \
  X(cuCtxSetCurrent)                                                                    \
  X(cuCtxGetCurrent)                                                                    \
  X(cuCtxSynchronize)                                                                   \
  X(cuMemAlloc)                                                                         \
  X(cuMemFree)                                                                          \
  X(cuMemAllocHost)                                                                     \
  X(cuMemFreeHost)                                                                      \
  X(cuMemGetInfo)                                                                       \
  X(cuMemcpyHtoD)                                                                       \
  X(cuMemcpyDtoH)                                                                       \
  X(cuMemcpyAsync)                                                                      \
  X(cuMemcpyHtoDAsync)                                                                  \
  X(cuMemcpyDtoHAsync)                                                                  \
  X(cuMemcpyDtoDAsync)                                                                  \
  X(cuMemsetD8Async)                                                                    \
  X(cuMemsetD32Async)                                                                   \
  X(cuStreamCreate)                                                                     \
  X(cuStreamDestroy)                                                                    \
  X(cuStreamSynchronize)                                                                \
  X(cuStreamWaitEvent)                                                                  \
  X(cuStreamBeginCapture)                                                               \
  X(cuStreamEndCapture)                                                                 \
  X(cuEventCreate)                                                                      \
  X(cuEventRecord)                                                                      \
  X(cuEventSynchronize)                                                                 \
  X(cuEventElapsedTime)                                                                 \
  X(cuEventDestroy)                                                                     \
  X(cuGraphInstantiateWithFlags)                                                               \
  X(cuGraphLaunch)                                                                      \
  X(cuGraphExecDestroy)                                                                 \
  X(cuGraphDestroy)                                                                     \
  X(cuModuleLoadData)                                                                   \
  X(cuModuleUnload)                                                                     \
  X(cuModuleGetFunction)                                                                \
  X(cuModuleGetGlobal)                                                                  \
  X(cuFuncGetAttribute)                                                                 \
  X(cuFuncSetAttribute)                                                                 \
  X(cuLaunchKernel)                                                                     \
  X(cuLaunchKernelEx)                                                                   \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor)                                        \
  X(cuTensorMapEncodeTiled)

struct hm_cu_table {
#define HM_CU_FIELD_(name) __typeof__(&name) name;
  HM_CU_FUNCTIONS(HM_CU_FIELD_)
#undef HM_CU_FIELD_
};

/* Filled by hm_cu_load(); entries are NULL until then. */
extern struct hm_cu_table hm_cu;

/*
 * Opens the driver (HUMMING_LIBCUDA) and fills hm_cu, once per process.
 * HM_NO_DEVICE with a reason when there is no driver or it is too old.
 */
hm_status hm_cu_load(void);
/* Closes the driver and clears the table (hm_shutdown). */
void hm_cu_unload(void);
/* "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" for a result code. */
const char *hm_cu_error_text(CUresult result, char *buf, size_t len);
/* Records a failed driver call; returns HM_OUT_OF_MEMORY or HM_CUDA. */
hm_status hm_cu_fail(CUresult result, const char *call, const char *file, int line);

/* Calls hm_cu.<call> and returns a recorded HM_CUDA failure if it fails. */
#define HM_CU_CHECK(call)                                                               \
  do {                                                                                  \
    CUresult hm_cu_result_ = hm_cu.call;                                                \
    if (hm_cu_result_ != CUDA_SUCCESS) return hm_cu_fail(hm_cu_result_, #call, __FILE__, __LINE__); \
  } while (0)

#define HM_CU_CHECK_GOTO(call, label)                                                   \
  do {                                                                                  \
    CUresult hm_cu_result_ = hm_cu.call;                                                \
    if (hm_cu_result_ != CUDA_SUCCESS) {                                                \
      ret = hm_cu_fail(hm_cu_result_, #call, __FILE__, __LINE__);                       \
      goto label;                                                                       \
    }                                                                                   \
  } while (0)

#endif
