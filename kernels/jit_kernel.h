/* SPDX-License-Identifier: Apache-2.0 */
/* The loaded kernel record, shared by loading (jit_kernel.c) and launching (jit_launch.c). */
#ifndef HM_JIT_KERNEL_H
#define HM_JIT_KERNEL_H

#include <cuda.h>
#include <pthread.h>

#include "kernels/jit.h"

struct hm_kernel {
  struct hm_kernel *next;
  CUcontext ctx;
  char key[65];
  char name[208];
  CUmodule module;
  CUfunction function;
  hm_kernel_meta meta;
  int regs, static_shared, max_threads;
  pthread_mutex_t limit_lock; /* launches from several threads may raise the limit */
  size_t shared_limit;        /* dynamic shared memory the function is allowed now */
};

/* Allows the function bytes of dynamic shared memory; the caller holds limit_lock or owns k. */
hm_status hm_kernel_set_shared_limit(hm_kernel *k, size_t bytes);

#endif
