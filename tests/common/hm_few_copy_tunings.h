/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The wgmma tilings whose stage of 4-bit units takes fewer 16-byte copies than there are
 * threads: bn64 bk64 on two warpgroups. ptxas serialized their wgmmas (C7513) while those
 * copies sat between the k16 steps; the mainloop now issues them before the steps. The NVRTC
 * test compiles them (tests/unit/test_gemm_wgmma_nvrtc.c) and the device test runs them
 * (tests/gpu/test_gemm_wgmma.c), so that the two cannot drift apart.
 */
#ifndef HM_FEW_COPY_TUNINGS_H
#define HM_FEW_COPY_TUNINGS_H

#include "kernels/gemm_config.h"

/* bm bn bk warps_m warps_n warps_k stages stream_k min_iters ctas_per_sm mma ws */
static const hm_gemm_tuning hm_few_copy_tunings[] = {
    {128, 64, 64, 2, 4, 1, 5, true, 4, 1, HM_MMA_WGMMA, false}, /* the only stage count of 3-8 that tripped */
    {64, 64, 64, 2, 4, 1, 6, true, 4, 1, HM_MMA_WGMMA, false},
};

#endif
