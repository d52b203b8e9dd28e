/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU transform of canonical weights (engine/quant.h) into the order the GEMM
 * mainloop reads (kernels/hm_dequant.cuh): codes into per-lane fragment units of
 * 16x64, scales into the activation type, zero points into bytes, all per 64 columns.
 * N is padded to 64 and K to 16; the pad holds finite values that meet zeros of A.
 */
#ifndef HM_TRANSFORM_H
#define HM_TRANSFORM_H

#include <stdint.h>

#include "humming.h"
#include "kernels/gemm_gen.h"

typedef struct hm_transform_desc {
  hm_dtype weight;  /* U1..U8, I4, I8, or F16/BF16 */
  hm_dtype scale;   /* F16, BF16, F32 (quantized weights) */
  hm_dtype act;     /* F16, BF16: the type scales are converted to; F8E4M3, I8: W8A8 (transform_w8.h) */
  int group;        /* 0 = per channel */
  int group_n;      /* W8A8 block scales: rows of a block (group its columns); 0 otherwise */
  bool zero_point;
  int64_t n, k, experts;
  int arch;
  bool w4_f16; /* W4A8 e2m1: the f16 codes (hm_w4a8_codes.cuh; hm_w4a8_f16_codes) */
} hm_transform_desc;

typedef struct hm_transform_sizes {
  size_t weight_bytes, scale_bytes, zero_bytes; /* 0 where absent */
  size_t in_weight_bytes, in_scale_bytes, in_zero_bytes; /* canonical arrays */
} hm_transform_sizes;

/* Byte sizes of the canonical inputs and the transformed outputs. */
/* The transform of a layer's weights for a GPU of the given arch. */
hm_transform_desc hm_transform_desc_of(const hm_layer_config *lc, int arch);
hm_status hm_transform_sizes_of(const hm_transform_desc *d, hm_transform_sizes *out);

/* Device buffers of one transform; inputs canonical, outputs sized by hm_transform_sizes_of. */
typedef struct hm_transform_buffers {
  const void *in_weight, *in_scales, *in_zeros;
  void *weight, *scales, *zeros;
} hm_transform_buffers;

/* Generates the transform kernel of d (one module for its three parts). */
hm_status hm_transform_gen(const hm_transform_desc *d, hm_gemm_source *out);

/* What the generated source of each transform family (transform.c, transform_w8.c,
 * transform_w4a8.c) names: its generator, the device header it includes, the kernel's
 * parameter struct (with its host size, which the source asserts the device agrees on)
 * and the device function the kernel calls. */
typedef struct hm_transform_template {
  const char *generator, *header, *params_type;
  size_t params_size;
  const char *run;
} hm_transform_template;

/* The source of the kernel named out->name: t's run with template arguments targs, for arch. */
hm_status hm_transform_source(const hm_transform_template *t, const char *targs, int arch,
                              hm_gemm_source *out);

/* The template argument of a scale type in the transform kernels: f16 0, bf16 1, f32 2. */
int hm_transform_scale_code(hm_dtype scale);

/* Generates and compiles (once, through the JIT cache) the transform kernel of d. */
hm_status hm_transform_kernel(hm_engine *engine, const hm_transform_desc *d, hm_kernel **out);

/* Compiles (once) and runs the transform kernels on stream. */
/* Launches a transform kernel over total items: 256-thread blocks striding over them, at
 * most 16 blocks an SM; params is the kernel's one argument (a struct by value). */
hm_status hm_transform_launch(hm_kernel *k, void *params, int64_t total, int sm_count, hm_stream *stream);
hm_status hm_transform_run(hm_engine *engine, const hm_transform_desc *d, const hm_transform_buffers *b,
                           hm_stream *stream);

#endif
