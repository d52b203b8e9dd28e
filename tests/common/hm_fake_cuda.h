/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A CUDA driver that needs no GPU: contexts, module loads and function lookups succeed
 * and do nothing, so that hm_kernel_get compiles real sources with NVRTC and "loads" the
 * cubins on the CPU. Tests that count calls override entries of hm_cu after installing.
 */
#ifndef HM_FAKE_CUDA_H
#define HM_FAKE_CUDA_H

#include "engine.h"

/* Replaces the whole driver table (hm_shutdown clears it again). */
void hm_fake_cuda_install(void);
/* A CUDA engine of device 0 at sm_<arch> on the fake driver's context; its memory and
 * streams are the host backend's. */
hm_engine hm_fake_cuda_engine(int arch);

#endif
