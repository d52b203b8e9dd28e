/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Token alignment on the GPU (kernels/moe_align.cuh): one fused block for small inputs
 * (decode), else count per tile, scan, scatter. Nothing waits on the host, so the
 * alignment can be captured in a CUDA graph.
 */
#include <stdio.h>

#include "check.h"
#include "kernels/moe_align.cuh"
#include "moe_internal.h"

static int kernel_layout(hm_moe_layout layout) {
  switch (layout) {
    case HM_MOE_LAYOUT_INDEXED: return HM_ALIGN_INDEXED;
    case HM_MOE_LAYOUT_CONTIGUOUS: return HM_ALIGN_CONTIGUOUS;
    default: return HM_ALIGN_MASKED;
  }
}

static hm_status get(hm_moe_exec *x, hm_kernel **slot, const char *name, int64_t experts, hm_kernel **out) {
  char defines[64];
  snprintf(defines, sizeof(defines), "#define HM_ALIGN_E %lld\n", (long long)experts);
  return hm_moe_kernel_get(x, slot, name, defines, "moe_align.cuh", out);
}

hm_status hm_moe_align_kernels_get(hm_moe_exec *x, hm_moe_align_kernels *slots, int64_t experts) {
  hm_kernel *k = NULL;
  HM_CHECK(get(x, &slots->fused, "hm_moe_align_fused", experts, &k));
  HM_CHECK(get(x, &slots->count, "hm_moe_align_count", experts, &k));
  HM_CHECK(get(x, &slots->scan, "hm_moe_align_scan", experts, &k));
  return get(x, &slots->scatter, "hm_moe_align_scatter", experts, &k);
}

void hm_moe_align_params_make(const hm_moe_align_config *c, bool appended, const hm_moe_align_sizes *sizes,
                              const int32_t *topk_ids, const hm_moe_alignment *out, void *workspace,
                              struct hm_moe_align_params *p) {
  int32_t *ws = workspace;
  *p = (struct hm_moe_align_params){
      .topk_ids = topk_ids,
      .row_of = out->row_of,
      .expert_counts = out->expert_counts,
      .expert_offsets = out->expert_offsets,
      .num_padded = out->num_padded,
      .sorted_ids = out->sorted_ids,
      .expert_ids = out->expert_ids,
      .work_counts = ws,
      .work_offsets = ws ? ws + c->experts : NULL,
      .tile_counts = ws ? ws + (2 * c->experts + 1 + 63) / 64 * 64 : NULL,
      .n = c->tokens * c->top_k,
      .max_padded = sizes->max_padded,
      .max_blocks = sizes->max_blocks,
      .layout = kernel_layout(c->layout),
      .block_m = c->block_m,
      .max_m = (int)(c->max_m > 0 ? c->max_m : c->tokens),
      .top_k = c->top_k,
      .appended = appended,
  };
}

hm_status hm_moe_align_cuda(hm_moe_exec *x, hm_moe_align_kernels *slots, const hm_moe_align_config *c,
                            bool appended, const hm_moe_align_sizes *sizes, const int32_t *topk_ids,
                            const hm_moe_alignment *out, void *workspace) {
  hm_moe_align_kernels none = {0};
  if (slots == NULL) slots = &none;
  struct hm_moe_align_params p;
  hm_moe_align_params_make(c, appended, sizes, topk_ids, out, workspace, &p);
  int64_t n = p.n;
  hm_kernel *k = NULL;
  if (n <= HM_MOE_ALIGN_FUSED_MAX_IDS) {
    HM_CHECK(get(x, &slots->fused, "hm_moe_align_fused", c->experts, &k));
    return hm_moe_kernel_launch(x, k, 1, 1, HM_ALIGN_THREADS, &p);
  }
  int64_t tiles = (n + HM_ALIGN_THREADS - 1) / HM_ALIGN_THREADS;
  HM_CHECK(get(x, &slots->count, "hm_moe_align_count", c->experts, &k));
  HM_CHECK(hm_moe_kernel_launch(x, k, tiles, 1, HM_ALIGN_THREADS, &p));
  HM_CHECK(get(x, &slots->scan, "hm_moe_align_scan", c->experts, &k));
  HM_CHECK(hm_moe_kernel_launch(x, k, 1, 1, HM_ALIGN_THREADS, &p));
  HM_CHECK(get(x, &slots->scatter, "hm_moe_align_scatter", c->experts, &k));
  return hm_moe_kernel_launch(x, k, tiles, 1, HM_ALIGN_THREADS, &p);
}
