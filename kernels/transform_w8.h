/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU transform of W8A8 weights (kernels/transform_w8.cuh): int8 or fp8 e4m3 codes
 * into the m16n8k32 fragment units of the W8A8 kernel, scales into f32. transform.c hands
 * descriptors with 8-bit activations here; N is padded to 64 and K to 32 with zero codes.
 */
#ifndef HM_TRANSFORM_W8_H
#define HM_TRANSFORM_W8_H

#include "kernels/transform.h"

/* Whether d is a W8A8 layer's (8-bit activations). */
bool hm_transform_is_w8(const hm_transform_desc *d);
hm_status hm_transform_w8_sizes_of(const hm_transform_desc *d, hm_transform_sizes *out);
hm_status hm_transform_w8_gen(const hm_transform_desc *d, hm_gemm_source *out);
hm_status hm_transform_w8_run(hm_engine *engine, const hm_transform_desc *d, const hm_transform_buffers *b,
                              hm_stream *stream);

#endif
