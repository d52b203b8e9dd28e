/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Token alignment: checks, array sizes, and the choice between the host version
 * (align_host.c) and the GPU one (align_cuda.c, kernels/moe_align.cuh).
 */
#include "check.h"
#include "moe_internal.h"

/* Largest block_m a GEMM kernel pads to. */
#define HM_MOE_MAX_BLOCK_M 1024

static int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

static hm_status check_config(const hm_moe_align_config *c) {
  HM_CHECK_NOT_NULL(c);
  if (c->layout != HM_MOE_LAYOUT_INDEXED && c->layout != HM_MOE_LAYOUT_CONTIGUOUS &&
      c->layout != HM_MOE_LAYOUT_MASKED)
    HM_FAIL(HM_INVALID_ARGUMENT, "alignment layout %d is not indexed, contiguous or masked", (int)c->layout);
  if (c->tokens < 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "alignment tokens = %lld is negative", (long long)c->tokens);
  if (c->experts < 1 || c->experts > HM_MOE_MAX_EXPERTS)
    HM_FAIL(HM_INVALID_ARGUMENT, "alignment experts = %lld is outside [1, %d]", (long long)c->experts,
            HM_MOE_MAX_EXPERTS);
  if (c->top_k < 1 || c->top_k > HM_MOE_MAX_TOP_K)
    HM_FAIL(HM_INVALID_ARGUMENT, "alignment top_k = %d is outside [1, %d]", c->top_k, HM_MOE_MAX_TOP_K);
  if (c->layout != HM_MOE_LAYOUT_MASKED && (c->block_m < 1 || c->block_m > HM_MOE_MAX_BLOCK_M))
    HM_FAIL(HM_INVALID_ARGUMENT, "alignment block_m = %d is outside [1, %d]", c->block_m, HM_MOE_MAX_BLOCK_M);
  if (c->max_m < 0) HM_FAIL(HM_INVALID_ARGUMENT, "alignment max_m = %lld is negative", (long long)c->max_m);
  if (c->tokens * c->top_k >= INT32_MAX)
    HM_FAIL(HM_INVALID_ARGUMENT, "tokens = %lld times top_k = %d does not fit int32 row ids",
            (long long)c->tokens, c->top_k);
  return HM_OK;
}

hm_status hm_moe_align_get_sizes(const hm_moe_align_config *c, hm_moe_align_sizes *out) {
  HM_CHECK_NOT_NULL(out);
  HM_CHECK(check_config(c));
  int64_t ids = c->tokens * c->top_k;
  hm_moe_align_sizes s = {0};
  if (c->layout == HM_MOE_LAYOUT_MASKED) {
    int64_t max_m = c->max_m > 0 ? c->max_m : c->tokens;
    s.rows = c->experts * max_m;
  } else {
    /* Each expert with rows pads at most block_m - 1, and at most min(E, ids) have rows. */
    int64_t busy = ids < c->experts ? ids : c->experts;
    int64_t padded = round_up(ids + busy * (c->block_m - 1), c->block_m);
    s.rows = c->layout == HM_MOE_LAYOUT_INDEXED ? ids : padded;
    if (c->layout == HM_MOE_LAYOUT_INDEXED) {
      s.max_padded = padded;
      s.max_blocks = padded / c->block_m;
    }
    if (padded > INT32_MAX)
      HM_FAIL(HM_INVALID_ARGUMENT, "%lld padded rows do not fit int32 row indices", (long long)padded);
  }
  if (s.rows > INT32_MAX)
    HM_FAIL(HM_INVALID_ARGUMENT, "%lld expert-ordered rows do not fit int32 row indices", (long long)s.rows);
  /* counts [E] and offsets [E+1], then per-tile counts when one block is not enough. */
  int64_t words = round_up(2 * c->experts + 1, 64);
  if (ids > HM_MOE_ALIGN_FUSED_MAX_IDS) words += (ids + 255) / 256 * c->experts;
  s.workspace_bytes = (size_t)words * sizeof(int32_t);
  *out = s;
  return HM_OK;
}

hm_status hm_moe_align_run(hm_moe_exec *x, hm_moe_align_kernels *slots, const hm_moe_align_config *c,
                           bool appended, const int32_t *topk_ids, const hm_moe_alignment *out,
                           void *workspace) {
  hm_moe_align_sizes sizes;
  HM_CHECK(hm_moe_align_get_sizes(c, &sizes));
  HM_CHECK_NOT_NULL(out);
  if (appended && (c->experts < 2 || c->top_k < 2))
    HM_FAIL(HM_INVALID_ARGUMENT,
            "an appended expert needs experts = %lld and top_k = %d to count it and one more",
            (long long)c->experts, c->top_k);
  if (c->tokens > 0) HM_CHECK_NOT_NULL(topk_ids);
  if (hm_moe_on_host(x)) {
    HM_CHECK(hm_moe_align_host(c, appended, &sizes, topk_ids, out));
    x->launches++;
    return HM_OK;
  }
  HM_CHECK_NOT_NULL(workspace);
  return hm_moe_align_cuda(x, slots, c, appended, &sizes, topk_ids, out, workspace);
}

hm_status hm_moe_align(hm_engine *engine, const hm_moe_align_config *config, const int32_t *topk_ids,
                       const hm_moe_alignment *out, void *workspace, hm_stream *stream) {
  HM_CHECK_NOT_NULL(engine);
  hm_moe_exec x = {.engine = engine, .stream = stream};
  return hm_moe_align_run(&x, NULL, config, false, topk_ids, out, workspace);
}
