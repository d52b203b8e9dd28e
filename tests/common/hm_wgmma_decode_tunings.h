/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The weight-only wgmma decode tilings: 8 or 16 tokens as the wgmma N against 64 weight
 * columns a warpgroup. The NVRTC test compiles them (tests/unit/test_gemm_wgmma_nvrtc.c) and
 * the device test runs them (tests/gpu/test_gemm_wgmma.c), so that the two cannot drift apart.
 */
#ifndef HM_WGMMA_DECODE_TUNINGS_H
#define HM_WGMMA_DECODE_TUNINGS_H

#include "kernels/gemm_config.h"

/* bm bn bk warps_m warps_n warps_k stages stream_k min_iters ctas_per_sm mma ws */
static const hm_gemm_tuning hm_wgmma_decode_tunings[] = {
    {16, 64, 256, 1, 4, 1, 6, true, 4, 2, HM_MMA_WGMMA, false},  /* N = 16, Stream-K, 2 CTAs an SM */
    {8, 64, 256, 1, 4, 1, 6, false, 0, 2, HM_MMA_WGMMA, false},  /* N = 8, data-parallel */
    {16, 128, 256, 1, 8, 1, 4, true, 2, 1, HM_MMA_WGMMA, false}, /* two warpgroups along columns */
    {32, 64, 256, 2, 4, 1, 4, true, 4, 2, HM_MMA_WGMMA, false},  /* N = 16 on two token warpgroups */
    {16, 64, 512, 1, 4, 1, 3, true, 4, 2, HM_MMA_WGMMA, false},  /* k-tiles of 512 */
};

#endif
