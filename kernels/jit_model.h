/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kernels a model needs on one arch, as `humming-moe precompile` compiles them:
 * every GEMM of its layers (routed experts in the three MoE layouts, shared experts and
 * dense MLP layers as dense GEMMs), each with the kernel table the layers will run,
 * generated exactly as the layers generate them at run time so the cache keys match.
 */
#ifndef HM_JIT_MODEL_H
#define HM_JIT_MODEL_H

#include "kernels/gemm_gen.h"
#include "kernels/gemm_select.h"

/* The kernel table of one layer and GEMM type on arch, as a layer would plan it. */
typedef hm_status (*hm_model_plan_fn)(void *ctx, const hm_layer_config *lc, hm_gemm_type type, int arch,
                                      hm_gemm_plan *out);

typedef struct hm_model_kernel_request {
  const char *model; /* a preset name (engine/model_presets.h) */
  const char *quant; /* a quantization scheme name (hm_quant_scheme_parse) */
  int arch;          /* 80, 89, 90, ... */
  int tp, ep;        /* tensor- and expert-parallel ranks; shapes are those of one rank */
  /* The layers' plan source (the heuristics live above this module); NULL: the fixed
   * table, hm_gemm_plan_make, which is what HUMMING_GEMM_PLAN=default runs. */
  hm_model_plan_fn plan;
  void *plan_ctx;
} hm_model_kernel_request;

typedef struct hm_model_kernels {
  int count;
  hm_gemm_source *items; /* distinct kernels; items[i].src is what to compile */
} hm_model_kernels;

hm_status hm_model_kernels_make(const hm_model_kernel_request *req, hm_model_kernels *out);
void hm_model_kernels_free(hm_model_kernels *k);

#endif
