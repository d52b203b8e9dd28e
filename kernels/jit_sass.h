/* SPDX-License-Identifier: Apache-2.0 */
/* Warp-switch hints written into the FFMA runs of a Hopper cubin (jit_sass.c). */
#ifndef HM_KERNELS_JIT_SASS_H
#define HM_KERNELS_JIT_SASS_H

#include <stddef.h>

#include "humming.h"

/* Runs of at least this many FFMAs are hinted; shorter ones are not a fold. */
#define HM_SASS_FFMA_RUN_MIN 16

/*
 * In every run of at least HM_SASS_FFMA_RUN_MIN consecutive register FFMAs of each .text
 * section of an sm_90 cubin, the first half's FFMAs that keep an operand in the reuse cache
 * give it up and let the scheduler switch warps after them. Only scheduling hints change: the
 * result of every instruction stays the same. *hinted is how many FFMAs changed. A cubin that
 * is not a valid CUDA ELF image fails with HM_CORRUPT, unchanged.
 */
hm_status hm_sass_yield_ffma(void *cubin, size_t size, int *hinted);

#endif
