/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The row plan of the reference GEMM: every layout reduced to one list of rows per
 * expert, each naming the A row it reads, the C row it writes and its top-k weight.
 * Building the plan validates the layout's metadata, so the compute loops trust it.
 */
#ifndef HM_REF_GEMM_PLAN_H
#define HM_REF_GEMM_PLAN_H

#include <stdint.h>

#include "humming.h"

typedef struct hm_ref_plan {
  int64_t experts;
  int64_t rows;          /* rows over all experts */
  int64_t *expert_start; /* (experts + 1): plan rows of expert e are [start[e], start[e+1]) */
  int64_t *a_row;        /* (rows) */
  int64_t *c_row;        /* (rows) each C row appears at most once */
  float *row_weight;     /* (rows) top-k weight, or NULL when there is none */
} hm_ref_plan;

/* Checks args (layout, sizes, metadata) for `experts` experts and builds the plan. */
hm_status hm_ref_plan_build(const hm_gemm_args *args, int64_t experts, hm_ref_plan *plan);
/* Frees the plan's arrays; a zeroed plan is fine. */
void hm_ref_plan_free(hm_ref_plan *plan);

#endif
