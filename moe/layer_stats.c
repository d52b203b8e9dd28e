/* SPDX-License-Identifier: Apache-2.0 */
/* Names, per-stage timing with events, and the stats of the last forward. */
#include "check.h"
#include "layer_internal.h"

const char *hm_moe_layout_name(hm_moe_layout layout) {
  switch (layout) {
    case HM_MOE_LAYOUT_AUTO: return "auto";
    case HM_MOE_LAYOUT_INDEXED: return "indexed";
    case HM_MOE_LAYOUT_CONTIGUOUS: return "contiguous";
    case HM_MOE_LAYOUT_MASKED: return "masked";
  }
  return "invalid";
}

const char *hm_moe_stage_name(hm_moe_stage stage) {
  static const char *const names[HM_MOE_STAGE_COUNT] = {"router", "align", "permute", "gemm1",
                                                        "act",    "gemm2", "shared",  "combine"};
  return stage >= 0 && stage < HM_MOE_STAGE_COUNT ? names[stage] : "invalid";
}

hm_status hm_moe_layer_set_profiling(hm_moe_layer *l, bool on) {
  HM_CHECK_NOT_NULL(l);
  for (int i = 0; on && i <= HM_MOE_STAGE_COUNT; i++)
    if (l->events[i] == NULL) HM_CHECK(hm_event_create(l->engine, &l->events[i]));
  l->profiling = on;
  return HM_OK;
}

/* Stage times from the events of the last forward; waits for its end. */
static hm_status read_times(hm_moe_layer *l) {
  hm_moe_stats *s = &l->stats;
  for (int i = 0; i < HM_MOE_STAGE_COUNT; i++) {
    float ms = 0.0f;
    HM_CHECK(hm_event_elapsed_ms(l->events[i], l->events[i + 1], &ms));
    s->stage_us[i] = ms * 1000.0f;
  }
  float total_ms = 0.0f;
  HM_CHECK(hm_event_elapsed_ms(l->events[0], l->events[HM_MOE_STAGE_COUNT], &total_ms));
  s->total_us = total_ms * 1000.0f;
  return HM_OK;
}

hm_status hm_moe_layer_stats(hm_moe_layer *l, hm_moe_stats *out) {
  HM_CHECK_NOT_NULL(l);
  HM_CHECK_NOT_NULL(out);
  if (l->stats.timed && l->stats.total_us == 0.0f) HM_CHECK(read_times(l));
  *out = l->stats;
  return HM_OK;
}
