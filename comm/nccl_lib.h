/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL, reached only through this table. libnccl.so.2 (HUMMING_LIBNCCL) is opened with
 * dlopen on first use, so binaries start where NCCL is missing; tests replace entries
 * to inject failures and hangs without a GPU.
 */
#ifndef HM_NCCL_LIB_H
#define HM_NCCL_LIB_H

#include <nccl.h>

#include "check.h"

#define HM_NCCL_FUNCTIONS(X) \
  X(ncclGetVersion)          \
  X(ncclGetUniqueId)         \
  X(ncclCommInitRankConfig)  \
  X(ncclCommSplit)           \
  X(ncclCommFinalize)        \
  X(ncclCommDestroy)         \
  X(ncclCommAbort)           \
  X(ncclCommGetAsyncError)   \
  X(ncclGetErrorString)      \
  X(ncclGetLastError)        \
  X(ncclGroupStart)          \
  X(ncclGroupEnd)            \
  X(ncclSend)                \
  X(ncclRecv)                \
  X(ncclAllReduce)           \
  X(ncclReduceScatter)

struct hm_nccl_table {
#define HM_NCCL_FIELD_(name) __typeof__(&name) name;
  HM_NCCL_FUNCTIONS(HM_NCCL_FIELD_)
#undef HM_NCCL_FIELD_
};

/* Filled by hm_nccl_load(); entries are NULL until then. */
extern struct hm_nccl_table hm_nccl;

/* The oldest NCCL with everything above (ncclCommSplit, non-blocking communicators). */
#define HM_NCCL_MIN_VERSION 21800

/* Opens NCCL once per process; HM_UNSUPPORTED naming the library and the reason otherwise. */
hm_status hm_nccl_load(void);
/* Closes NCCL and clears the table (hm_shutdown, tests). */
void hm_nccl_unload(void);
/* Records a failed NCCL call with NCCL's own last-error text; HM_REMOTE for ncclRemoteError. */
hm_status hm_nccl_fail(ncclResult_t result, ncclComm_t comm, const char *call, const char *file, int line);

#endif
