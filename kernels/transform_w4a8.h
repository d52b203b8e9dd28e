/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU transform of W4A8 weights (kernels/transform_w4a8.cuh): int4 or e2m1 codes into
 * the 4-bit units the W8A8 mma.sync kernel widens, int4 channel scales into f32 / 16,
 * mxfp4 e8m0 and nvfp4 e4m3 scales into per-unit byte blocks. transform_w8.c hands it descriptors with
 * 4-bit weights and 8-bit activations; N is padded to 64 and K to 32 with zero codes.
 */
#ifndef HM_TRANSFORM_W4A8_H
#define HM_TRANSFORM_W4A8_H

#include "kernels/transform.h"

/* Whether d is a W4A8 layer's (i4 or f4e2m1 weights, 8-bit activations). */
bool hm_transform_is_w4a8(const hm_transform_desc *d);
hm_status hm_transform_w4a8_sizes_of(const hm_transform_desc *d, hm_transform_sizes *out);
hm_status hm_transform_w4a8_gen(const hm_transform_desc *d, hm_gemm_source *out);
hm_status hm_transform_w4a8_run(hm_engine *engine, const hm_transform_desc *d, const hm_transform_buffers *b,
                                hm_stream *stream);

#endif
