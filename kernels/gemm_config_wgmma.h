/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Configs of the wgmma kernel (kernels/gemm_wgmma_kernel.cuh): which layers it takes,
 * its tile rules and its shared memory, mirrored by kernels/gemm_wgmma_traits.cuh.
 */
#ifndef HM_GEMM_CONFIG_WGMMA_H
#define HM_GEMM_CONFIG_WGMMA_H

#include "kernels/gemm_config.h"

/* Whether a wgmma kernel can serve base's layer: sm_90, 4-, 8- or 16-bit weights with
 * 16-bit activations, or W8A8 (fp8 x fp8, int8 x int8). */
bool hm_gemm_wgmma_takes(const hm_gemm_config *base);
/* The wgmma-specific rules of cfg (arch, weight format, warpgroup grid, tile, stages). */
hm_status hm_gemm_wgmma_check(const hm_gemm_config *cfg);
/* Whether a warp-specialized weight-only config stages its output tile in the ring slot of a
 * segment's last stage (gemm_ws_pipe.cuh) instead of beside the ring: where one stage holds
 * the tile and three stages with the tile beside them exceed the SM's shared memory, as
 * bm 256 x bn 128 x bk 128 do, and K has no tail. Configs that fit the other way keep it. */
bool hm_gemm_ws_c_in_ring(const hm_gemm_config *cfg);
/* Dynamic shared memory of a wgmma config, as hm_wg_traits::smem_bytes. */
size_t hm_gemm_wgmma_smem_bytes(const hm_gemm_config *cfg);
/* Accumulators per thread of a wgmma tuning. */
int hm_gemm_wgmma_acc_regs(const hm_gemm_tuning *t);
/* Registers a thread keeps sums in: the accumulators, and for W8A8 as many again (the
 * stage partial sums, or int8's s32 sums of a segment beside their f32 results). */
int hm_gemm_wgmma_sum_regs(const hm_gemm_config *cfg);
/* The most sums hm_gemm_wgmma_sum_regs may count for cfg's kernel. */
int hm_gemm_wgmma_max_sum_regs(const hm_gemm_config *cfg);

#endif
