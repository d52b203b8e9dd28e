/* SPDX-License-Identifier: Apache-2.0 */
/* The hm_layer struct and the backend halves of its API (layer_host.c, layer_cuda.c). */
#ifndef HM_LAYER_INTERNAL_H
#define HM_LAYER_INTERNAL_H

#include "engine.h"
#include "heuristics/choose_engine.h"
#include "kernels/gemm_launch.h"
#include "kernels/gemm_select.h"
#include "quant.h"

#define HM_LAYER_TYPES 4 /* one kernel table per hm_gemm_type */

/* Kernels of one GEMM type, one per entry of the layer's plan of that type, compiled together. */
typedef struct hm_layer_table {
  bool built;
  hm_kernel *kernels[HM_GEMM_PLAN_MAX];
} hm_layer_table;

/* What the CUDA backend keeps: transformed weights, workspace, kernel tables. */
typedef struct hm_layer_device {
  void *weight, *scales, *zeros, *bias, *global_scale;
  size_t weight_bytes;
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
  hm_plan_source plan_source;          /* where the kernel tables come from */
  bool planned[HM_LAYER_TYPES];        /* plans[t] is made; plan.count 0: no kernel takes the layer (host) */
  hm_layer_plan plans[HM_LAYER_TYPES]; /* by GEMM type */
  hm_layer_device dev;
};

/* Installs fresh host weights and bias (or NULL); the layer owns them from here on. */
void hm_layer_install(hm_layer *l, hm_host_weights *w, void *bias);
/* HM_INVALID_ARGUMENT when bias is given to a layer without one, or missing for one with. */
hm_status hm_layer_check_bias(const hm_layer *l, const void *bias);
/* The base kernel config (no tuning) of the layer for a GEMM type on its device. */
hm_status hm_layer_gemm_base(const hm_layer *l, hm_gemm_type type, hm_gemm_config *out);
/* Sets where the kernel tables come from (create reads HUMMING_GEMM_PLAN); before transform only. */
hm_status hm_layer_set_plan_source(hm_layer *l, hm_plan_source source);
/* Makes the plans of every GEMM type the layer runs: dense, or the three MoE layouts. */
hm_status hm_layer_make_plans(hm_layer *l);
/* The plan of a GEMM type, made on first use. */
hm_status hm_layer_plan_get(hm_layer *l, hm_gemm_type type, const hm_layer_plan **out);
/*
 * The plan entry a forward of valid_m rows runs: the one serving valid_m, or for
 * indexed the nearest below it whose bm divides block_m; -1 when none does.
 */
int hm_layer_plan_entry(const hm_gemm_plan *plan, hm_gemm_type type, int64_t valid_m, int block_m);
/* The plan entry a forward with args runs; HM_NOT_READY before the plan is made,
 * HM_INVALID_ARGUMENT for an indexed block_m no kernel's bm divides. */
hm_status hm_layer_entry_of(const hm_layer *l, const hm_gemm_args *args, int *out);
/* The kernel config a forward with args runs and its source; HM_NOT_READY before the plan is made. */
hm_status hm_layer_kernel_config(const hm_layer *l, const hm_gemm_args *args, hm_gemm_config *cfg,
                                 hm_plan_source *source);
/* The loaded kernel a forward with args runs (CUDA, after transform). */
hm_status hm_layer_kernel_of(const hm_layer *l, const hm_gemm_args *args, hm_kernel **out);
/* CUDA: checks that kernels exist for the layer (support matrix, shapes). */
hm_status hm_layer_cuda_check(const hm_layer *l);
/* The layer's device operands for a GEMM launch (no next GEMM's weights). */
hm_gemm_operands hm_layer_operands(const hm_layer *l);
/* CUDA: uploads and transforms the weights, builds the kernel tables of the layer's types. */
hm_status hm_layer_cuda_transform(hm_layer *l, hm_stream *stream);
hm_status hm_layer_cuda_forward(hm_layer *l, const hm_gemm_args *args, hm_stream *stream);
/* Frees device memory; keeps kernels (owned by the JIT). */
void hm_layer_cuda_release(hm_layer *l);
/* Host: the reference GEMM on the canonical weights. */
hm_status hm_layer_host_forward(hm_layer *l, const hm_gemm_args *args);

#endif
