/* SPDX-License-Identifier: Apache-2.0 */
/* The hm_layer struct and the backend halves of its API (layer_host.c, layer_cuda.c). */
#ifndef HM_LAYER_INTERNAL_H
#define HM_LAYER_INTERNAL_H

#include "engine.h"
#include "kernels/gemm_launch.h"
#include "kernels/gemm_select.h"
#include "quant.h"

#define HM_LAYER_TYPES 4 /* one kernel table per hm_gemm_type */

/* Kernels of one GEMM type by M interval, compiled together. */
typedef struct hm_layer_table {
  bool built;
  hm_gemm_plan plan;
  hm_kernel *kernels[HM_GEMM_PLAN_MAX];
} hm_layer_table;

/* What the CUDA backend keeps: transformed weights, workspace, kernel tables. */
typedef struct hm_layer_device {
  void *weight, *scales, *zeros, *bias, *global_scale;
  void *workspace;
  size_t workspace_bytes;
  hm_layer_table tables[HM_LAYER_TYPES];
} hm_layer_device;

struct hm_layer {
  hm_engine *engine;
  hm_layer_config cfg;
  hm_host_weights host; /* canonical weights once loaded or quantized */
  void *host_bias;      /* (E, N) in cfg.out, or NULL */
  bool loaded;
  bool transformed;
  hm_layer_device dev;
};

/* The base kernel config (no tuning) of the layer for a GEMM type on its device. */
hm_status hm_layer_gemm_base(const hm_layer *l, hm_gemm_type type, hm_gemm_config *out);
/* CUDA: checks that kernels exist for the layer (support matrix, shapes). */
hm_status hm_layer_cuda_check(const hm_layer *l);
/* CUDA: uploads and transforms the weights, builds the kernel tables of the layer's types. */
hm_status hm_layer_cuda_transform(hm_layer *l, hm_stream *stream);
hm_status hm_layer_cuda_forward(hm_layer *l, const hm_gemm_args *args, hm_stream *stream);
/* Frees device memory; keeps kernels (owned by the JIT). */
void hm_layer_cuda_release(hm_layer *l);
/* Host: the reference GEMM on the canonical weights. */
hm_status hm_layer_host_forward(hm_layer *l, const hm_gemm_args *args);

#endif
