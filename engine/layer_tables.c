/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Which kernel a layer runs at which M: its plans, one per GEMM type, from the source
 * HUMMING_GEMM_PLAN (or the caller) names, made at transform on every backend so that
 * block_m, the CUDA kernel tables and the plan a test inspects on the host all agree.
 */
#include <string.h>

#include "check.h"
#include "layer_internal.h"
#include "log.h"

/* The block_m of layers no kernel takes: the host reference accepts any. */
#define HOST_ONLY_BLOCK_M 16

hm_status hm_layer_set_plan_source(hm_layer *l, hm_plan_source source) {
  HM_CHECK_NOT_NULL(l);
  if ((unsigned)source >= HM_PLAN_SOURCE_COUNT)
    HM_FAIL(HM_INVALID_ARGUMENT, "GEMM plan source %d", (int)source);
  if (l->transformed)
    HM_FAIL(HM_INVALID_ARGUMENT, "GEMM plan source %s set after transform: set it before hm_layer_transform",
            hm_plan_source_name(source));
  l->plan_source = source;
  for (int t = 0; t < HM_LAYER_TYPES; t++) l->planned[t] = l->dev.tables[t].built = false;
  return HM_OK;
}

static hm_status make_plan(const hm_layer *l, hm_gemm_type type, hm_layer_plan *out) {
  int arch = 0;
  HM_CHECK(hm_heuristics_arch(l->engine, &arch));
  return hm_heuristics_layer_plan(l->engine, &l->cfg, type, arch, l->plan_source, out);
}

hm_status hm_layer_plan_get(hm_layer *l, hm_gemm_type type, const hm_layer_plan **out) {
  HM_CHECK_NOT_NULL(l);
  HM_CHECK_NOT_NULL(out);
  if ((unsigned)type >= HM_LAYER_TYPES) HM_FAIL(HM_INVALID_ARGUMENT, "GEMM type %d unknown", (int)type);
  if (!l->planned[type]) {
    hm_status st = make_plan(l, type, &l->plans[type]);
    /* The host runs every scheme through its reference; only a CUDA layer needs kernels. */
    if (st == HM_UNSUPPORTED && l->engine->kind == HM_BACKEND_HOST) {
      HM_INFO(GEMM, "layer N=%lld K=%lld E=%lld: no %s GEMM kernel (%s); the host reference runs it",
              (long long)l->cfg.n, (long long)l->cfg.k, (long long)l->cfg.experts, hm_gemm_type_name(type),
              hm_last_error());
      memset(&l->plans[type], 0, sizeof(l->plans[type]));
    } else if (st != HM_OK) {
      return st;
    }
    l->planned[type] = true;
  }
  *out = &l->plans[type];
  return HM_OK;
}

hm_status hm_layer_make_plans(hm_layer *l) {
  static const hm_gemm_type dense[] = {HM_GEMM_DENSE};
  static const hm_gemm_type moe[] = {HM_GEMM_INDEXED, HM_GEMM_GROUPED_CONTIGUOUS, HM_GEMM_GROUPED_MASKED};
  const bool is_dense = l->cfg.experts == 1;
  const hm_gemm_type *types = is_dense ? dense : moe;
  const int count = is_dense ? 1 : (int)HM_ARRAY_SIZE(moe);
  for (int i = 0; i < count; i++) {
    const hm_layer_plan *p = NULL;
    HM_CHECK(hm_layer_plan_get(l, types[i], &p));
  }
  return HM_OK;
}

int hm_layer_plan_entry(const hm_gemm_plan *plan, hm_gemm_type type, int64_t valid_m, int block_m) {
  if (plan->count == 0) return -1;
  const int i = hm_gemm_plan_pick(plan, valid_m);
  if (type != HM_GEMM_INDEXED) return i;
  for (int j = i; j >= 0; j--)
    if (block_m > 0 && block_m % plan->cfg[j].tuning.bm == 0) return j;
  return -1;
}

hm_status hm_layer_entry_of(const hm_layer *l, const hm_gemm_args *args, int *out) {
  HM_CHECK_NOT_NULL(l);
  HM_CHECK_NOT_NULL(args);
  HM_CHECK_NOT_NULL(out);
  if ((unsigned)args->type >= HM_LAYER_TYPES)
    HM_FAIL(HM_INVALID_ARGUMENT, "GEMM type %d unknown", (int)args->type);
  if (!l->planned[args->type])
    HM_FAIL(HM_NOT_READY, "no %s plan before the layer is transformed", hm_gemm_type_name(args->type));
  const hm_gemm_plan *plan = &l->plans[args->type].plan;
  if (plan->count == 0)
    HM_FAIL(HM_UNSUPPORTED, "no %s GEMM kernel takes this layer", hm_gemm_type_name(args->type));
  *out = hm_layer_plan_entry(plan, args->type, hm_gemm_valid_m(args, l->cfg.experts), args->block_m);
  if (*out < 0)
    HM_FAIL(HM_INVALID_ARGUMENT,
            "indexed forward: block_m=%d is not a multiple of any kernel's bm (use "
            "hm_layer_block_m)",
            args->block_m);
  return HM_OK;
}

hm_status hm_layer_kernel_config(const hm_layer *l, const hm_gemm_args *args, hm_gemm_config *cfg,
                                 hm_plan_source *source) {
  HM_CHECK_NOT_NULL(cfg);
  int i = 0;
  HM_CHECK(hm_layer_entry_of(l, args, &i));
  *cfg = l->plans[args->type].plan.cfg[i];
  if (source) *source = l->plans[args->type].source[i];
  return HM_OK;
}

hm_status hm_layer_kernel_of(const hm_layer *l, const hm_gemm_args *args, hm_kernel **out) {
  HM_CHECK_NOT_NULL(out);
  int i = 0;
  HM_CHECK(hm_layer_entry_of(l, args, &i));
  *out = l->dev.tables[args->type].kernels[i];
  if (*out == NULL) HM_FAIL(HM_NOT_READY, "the %s kernel table is not built", hm_gemm_type_name(args->type));
  return HM_OK;
}

int hm_layer_block_m(const hm_layer *l, int64_t valid_m) {
  if (l == NULL) return 0;
  hm_layer_plan fresh;
  const hm_layer_plan *p = &l->plans[HM_GEMM_INDEXED];
  if (!l->planned[HM_GEMM_INDEXED]) {
    /* Before transform: the plan transform will make, made here and not kept (l is const). */
    if (make_plan(l, HM_GEMM_INDEXED, &fresh) != HM_OK) return HOST_ONLY_BLOCK_M;
    p = &fresh;
  }
  if (p->plan.count == 0) return HOST_ONLY_BLOCK_M;
  return p->plan.cfg[hm_gemm_plan_pick(&p->plan, valid_m)].tuning.bm;
}
