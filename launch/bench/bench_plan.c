/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel mode's plan sources and predictions (see bench_plan.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_plan.h"
#include "check.h"
#include "layer_internal.h"
#include "params.h"

hm_status hm_bench_plans_make(hm_bench *b, hm_bench_plans *out) {
  memset(out, 0, sizeof(*out));
  out->dflt = out->heuristic = out->tuned = -1;
  HM_CHECK(hm_device_profile_for_engine(b->engine, &out->profile));
  if (strcmp(b->o.plan_name, "all") == 0) {
    const hm_plan_source all[] = {HM_PLAN_DEFAULT, HM_PLAN_HEURISTIC, HM_PLAN_TUNED};
    memcpy(out->source, all, sizeof(all));
    out->count = HM_BENCH_PLANS_MAX;
    out->dflt = 0;
    out->heuristic = 1;
    out->primary = out->tuned = 2;
    return HM_OK;
  }
  out->count = 1;
  if (b->o.plan_name[0] == '\0') return hm_plan_source_from_env(&out->source[0]);
  HM_CHECK(hm_plan_source_parse(b->o.plan_name, &out->source[0]));
  /* A layer reads the pinned kernel where the library documents it: HUMMING_GEMM_PLAN. */
  if (out->source[0] == HM_PLAN_PINNED) {
    if (setenv("HUMMING_GEMM_PLAN", b->o.plan_name, 1) != 0)
      HM_FAIL(HM_SYSTEM, "--plan %s: setenv HUMMING_GEMM_PLAN failed", b->o.plan_name);
    hm_params_reload();
  }
  return HM_OK;
}

void hm_bench_plan_predict(const hm_bench_plans *p, const hm_layer *layer, const hm_gemm_args *args,
                           double *predicted_us, const char **source) {
  hm_gemm_config cfg;
  hm_plan_source from;
  hm_choose_cost cost;
  *predicted_us = NAN;
  *source = "-";
  if (hm_layer_kernel_config(layer, args, &cfg, &from) != HM_OK) return;
  *source = hm_plan_source_name(from);
  if (hm_choose_cost_of(&layer->cfg, &cfg, hm_gemm_valid_m(args, layer->cfg.experts), &p->profile, &cost) ==
      HM_OK)
    *predicted_us = cost.predicted_us;
}
