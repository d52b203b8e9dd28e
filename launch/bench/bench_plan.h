/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Kernel mode's --plan: which kernel tables the scheme under test runs with (one
 * source, or default, heuristic and tuned side by side), and the cost model's time of
 * the kernel a layer picks, to hold against the measured one.
 */
#ifndef HM_BENCH_PLAN_H
#define HM_BENCH_PLAN_H

#include "bench/bench.h"
#include "heuristics/choose_engine.h"

#define HM_BENCH_PLANS_MAX 3

typedef struct hm_bench_plans {
  int count;
  hm_plan_source source[HM_BENCH_PLANS_MAX];
  int primary;                /* the one time_us reports: the only one, or tuned */
  int dflt, heuristic, tuned; /* indices with --plan all, -1 otherwise */
  hm_device_profile profile;  /* what predictions are made on */
} hm_bench_plans;

/* The plans --plan names (HUMMING_GEMM_PLAN's when not given) and the engine's profile. */
hm_status hm_bench_plans_make(hm_bench *b, hm_bench_plans *out);
/*
 * The predicted time of the kernel layer picks for args and the source of its plan
 * entry; NaN and "-" where no kernel takes the layer (host-only schemes).
 */
void hm_bench_plan_predict(const hm_bench_plans *p, const hm_layer *layer, const hm_gemm_args *args,
                           double *predicted_us, const char **source);

#endif
