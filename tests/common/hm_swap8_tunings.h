/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The swapped 8-row tunings of the W8A8 mma.sync kernel that the device tests force
 * (tests/gpu/test_gemm_w8a8.c, test_gemm_w4a8.c) and the NVRTC tests compile and check
 * for every W8A8 and W4A8 format, so that the two cannot drift apart. Each bk is at most
 * 128, which scales that change along K need, and each fits sm_89's shared memory. The
 * decode default itself (gemm_select.c) runs in the tests of each layer's own plan.
 */
#ifndef HM_SWAP8_TUNINGS_H
#define HM_SWAP8_TUNINGS_H

#include "kernels/gemm_config.h"

/* bm bn bk warps_m warps_n warps_k stages stream_k min_iters ctas_per_sm mma ws */
static const hm_gemm_tuning hm_swap8_tunings[] = {
    {8, 128, 128, 1, 2, 2, 4, true, 4, 1, HM_MMA_SYNC, false}, /* the decode default's shape at half its bn */
    {8, 128, 64, 1, 1, 2, 3, false, 0, 2, HM_MMA_SYNC, false}, /* two units a warp, bk 64, data-parallel */
    {8, 64, 128, 1, 1, 4, 2, true, 1, 1, HM_MMA_SYNC, false},  /* four k-warps, one-iteration Stream-K */
};

#endif
