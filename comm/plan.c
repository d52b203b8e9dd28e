/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shards of expert weights for a rank: its EP group's experts; inside them its TP slice
 * of the intermediate dimension, taken as columns of gate_up's output (gate and up
 * alike, so SiLU(g) * u stays local) and as the matching rows of down's input, whose
 * partial outputs the TP reduction sums.
 */
#include <string.h>

#include "comm.h"

static hm_status check_plan(const hm_comm_plan *plan, int64_t hidden, const void *full, const void *local) {
  HM_CHECK_NOT_NULL(plan);
  HM_CHECK_NOT_NULL(full);
  HM_CHECK_NOT_NULL(local);
  if (hidden <= 0) HM_FAIL(HM_INVALID_ARGUMENT, "hidden %lld", (long long)hidden);
  if (plan->tp < 1 || plan->local_intermediate * plan->tp != plan->intermediate)
    HM_FAIL(HM_INVALID_ARGUMENT, "plan of rank %d: intermediate %lld is not split in %d", plan->rank,
            (long long)plan->intermediate, plan->tp);
  return HM_OK;
}

hm_status hm_comm_shard_gate_up(const hm_comm_plan *plan, int64_t hidden, const float *full, float *local) {
  HM_CHECK(check_plan(plan, hidden, full, local));
  int64_t inter = plan->intermediate, li = plan->local_intermediate, i0 = plan->first_intermediate;
  size_t run = (size_t)(li * hidden) * sizeof(float);
  for (int64_t j = 0; j < plan->local_experts; j++) {
    const float *src = full + (plan->first_expert + j) * 2 * inter * hidden;
    float *dst = local + j * 2 * li * hidden;
    memcpy(dst, src + i0 * hidden, run);
    memcpy(dst + li * hidden, src + (inter + i0) * hidden, run);
  }
  return HM_OK;
}

hm_status hm_comm_shard_down(const hm_comm_plan *plan, int64_t hidden, const float *full, float *local) {
  HM_CHECK(check_plan(plan, hidden, full, local));
  int64_t inter = plan->intermediate, li = plan->local_intermediate, i0 = plan->first_intermediate;
  for (int64_t j = 0; j < plan->local_experts; j++) {
    const float *src = full + (plan->first_expert + j) * hidden * inter;
    float *dst = local + j * hidden * li;
    for (int64_t h = 0; h < hidden; h++)
      memcpy(dst + h * li, src + h * inter + i0, (size_t)li * sizeof(float));
  }
  return HM_OK;
}
