/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The W8A8 GEMMs, mma.sync (kernels/gemm_w8a8_kernel.cuh) and wgmma on sm_90a
 * (kernels/gemm_w8a8_wgmma.cuh): int8 x int8 with per-channel weight scales, fp8 e4m3 x
 * e4m3 with per-channel or 128x128 block weight scales, both with per-token or 1x128
 * activation scales; W4A8 on the mma.sync one: int4 x int8 per channel, mxfp4 (e2m1 with
 * e8m0 scales per 32) and nvfp4 (e2m1 with e4m3 scales per 16 and a global scale) x fp8
 * e4m3; f16 accumulation on the mma.sync one (compute.f16_acc: per-channel fp8, mxfp4 or
 * nvfp4 weights, per-token scales). Their configs are hm_gemm_configs
 * whose act is 8-bit; the weight-only config code (gemm_config.c, gemm_gen.c,
 * gemm_select.c) hands them here for what differs: the layer's scale layout, legality,
 * shared memory, kernel name.
 */
#ifndef HM_GEMM_CONFIG_W8A8_H
#define HM_GEMM_CONFIG_W8A8_H

#include "kernels/gemm_config.h"
#include "kernels/hm_w4a8_codes.cuh"

/* Whether the config's activations are 8-bit, so that the W8A8 kernel runs it. */
bool hm_gemm_is_w8a8(const hm_gemm_layer_part *l);
/* W4A8 (4-bit weights the W8A8 mma.sync kernel widens): HM_W4_INT4 for i4 weights, HM_W4_E2M1
 * (mxfp4, group 32) or HM_W4_NVFP4 (group 16) for f4e2m1 ones, with 8-bit activations;
 * HM_W4_NONE otherwise (hm_w4a8_codes.cuh). */
int hm_gemm_w4a8_format(const hm_gemm_layer_part *l);
/* Whether W4A8 e2m1 weights for this arch take the f16 codes: sm_90, the arch without 8-bit
 * mma.sync that has fp8 conversions, where widening them straight into f16 operands ran
 * 1.03x (gate_up) and 1.01x (down) the fp8 operands' rate at 1-16 tokens (docs/PERF.md,
 * twenty-second session). The transform and the kernels of a layer both ask, so the
 * weights' layout and the kernels' agree. */
bool hm_w4a8_f16_codes(hm_dtype weight, hm_dtype act, int arch);
/* Fills group, group_n, act_scale and w4_f16 of out->layer from the public config's scheme. */
hm_status hm_gemm_w8a8_from_layer(const hm_layer_config *lc, hm_gemm_config *out);
/* The layer part's legality: types, scale layouts, arch, shape. */
hm_status hm_gemm_w8a8_check_layer(const hm_gemm_config *cfg);
/* Whether f16 accumulation suits the layer part: fp8 activations with per-token scales and
 * per-channel fp8, mxfp4 or nvfp4 weights (each layer config with fp16_accumulate, on every
 * backend). */
hm_status hm_gemm_f16_acc_check(const hm_gemm_layer_part *l);
/* What the W8A8 kernel adds to the common tuning rules (gemm_config.c check_tuning). */
hm_status hm_gemm_w8a8_check_tuning(const hm_gemm_config *cfg);
/* Bytes of one wgmma pipeline stage before alignment (mirrors hm_w8wg_traits). */
size_t hm_gemm_w8a8_wgmma_stage_bytes(const hm_gemm_config *cfg);
/* Dynamic shared memory (mirrors hm_w8_traits::smem_bytes). */
size_t hm_gemm_w8a8_smem_bytes(const hm_gemm_config *cfg);
/* Reshapes a weight-only default tuning into a legal W8A8 one (warp grid, bk). */
void hm_gemm_w8a8_fit(const hm_gemm_config *base, hm_gemm_tuning *t);
/* The part of a kernel name the weight-only one lacks ("_b128x128_ag128"); "" otherwise. */
void hm_gemm_w8a8_name_tag(const hm_gemm_layer_part *l, char *buf, size_t len);

#endif
