/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The top-k weighted combine: y[t] = sum_j w[t,j] * out[row_of[t,j]] (+ shared[t], or the
 * appended expert's row with weight 1),
 * an f32 sum in j order with fused multiply-adds and one bf16 rounding, so the host
 * loop and kernels/moe_combine.cuh agree bit for bit on the same inputs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "kernels/moe_combine.cuh"
#include "moe_internal.h"
#include "numfmt.h"

static hm_status check_args(const hm_moe_combine_args *a) {
  HM_CHECK_NOT_NULL(a);
  if (a->tokens < 0) HM_FAIL(HM_INVALID_ARGUMENT, "combine tokens = %lld is negative", (long long)a->tokens);
  if (a->hidden < 1 || a->hidden > INT32_MAX)
    HM_FAIL(HM_INVALID_ARGUMENT, "combine hidden = %lld is outside [1, 2^31)", (long long)a->hidden);
  if (a->top_k < 1 || a->top_k > HM_MOE_MAX_TOP_K)
    HM_FAIL(HM_INVALID_ARGUMENT, "combine top_k = %d is outside [1, %d]", a->top_k, HM_MOE_MAX_TOP_K);
  if (a->tokens == 0) return HM_OK;
  HM_CHECK_NOT_NULL(a->expert_out);
  HM_CHECK_NOT_NULL(a->row_of);
  HM_CHECK_NOT_NULL(a->topk_weights);
  HM_CHECK_NOT_NULL(a->y);
  return HM_OK;
}

static void add_row(float *acc, const uint16_t *row, int64_t hidden, float w) {
  for (int64_t c = 0; c < hidden; c++) acc[c] = fmaf(w, hm_bf16_to_f32(row[c]), acc[c]);
}

static hm_status combine_host(const hm_moe_combine_args *a, bool appended) {
  float *acc = malloc((size_t)a->hidden * sizeof(float));
  if (acc == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "combine row of %lld", (long long)a->hidden);
  const uint16_t *out = a->expert_out;
  int slots = a->top_k + appended;
  for (int64_t t = 0; t < a->tokens; t++) {
    for (int64_t c = 0; c < a->hidden; c++) acc[c] = 0.0f;
    for (int j = 0; j < slots; j++) {
      int32_t row = a->row_of[t * slots + j];
      float w = j < a->top_k ? a->topk_weights[t * a->top_k + j] : 1.0f;
      if (row >= 0) add_row(acc, out + (int64_t)row * a->hidden, a->hidden, w);
    }
    if (a->shared) add_row(acc, (const uint16_t *)a->shared + t * a->hidden, a->hidden, 1.0f);
    uint16_t *y = (uint16_t *)a->y + t * a->hidden;
    for (int64_t c = 0; c < a->hidden; c++) y[c] = hm_bf16_from_f32(acc[c]);
  }
  free(acc);
  return HM_OK;
}

hm_status hm_moe_combine_kernel(hm_moe_exec *x, hm_kernel **slot, int64_t hidden, int top_k, bool shared,
                                bool appended, hm_kernel **out) {
  char defines[224];
  snprintf(defines, sizeof(defines),
           "#define HM_COMBINE_HIDDEN %lld\n#define HM_COMBINE_TOP_K %d\n#define HM_COMBINE_SHARED %d\n"
           "#define HM_COMBINE_APPENDED %d\n",
           (long long)hidden, top_k, shared, appended);
  return hm_moe_kernel_get(x, slot, "hm_moe_combine", defines, "moe_combine.cuh", out);
}

static hm_status combine_cuda(hm_moe_exec *x, hm_kernel **slot, const hm_moe_combine_args *a, bool appended) {
  hm_kernel *k = NULL;
  HM_CHECK(hm_moe_combine_kernel(x, slot, a->hidden, a->top_k, a->shared != NULL, appended, &k));
  struct hm_moe_combine_params p = {.expert_out = a->expert_out,
                                    .row_of = a->row_of,
                                    .topk_weights = a->topk_weights,
                                    .shared = a->shared,
                                    .y = a->y,
                                    .tokens = a->tokens};
  unsigned column_blocks = (unsigned)((a->hidden + HM_COMBINE_COLUMNS - 1) / HM_COMBINE_COLUMNS);
  return hm_moe_kernel_launch(x, k, a->tokens, column_blocks, HM_COMBINE_THREADS, &p);
}

hm_status hm_moe_combine_run(hm_moe_exec *x, hm_kernel **slot, const hm_moe_combine_args *a, bool appended) {
  HM_CHECK(check_args(a));
  if (appended && a->shared != NULL)
    HM_FAIL(HM_INVALID_ARGUMENT, "combine: a shared buffer and an appended shared expert both given");
  if (a->tokens == 0) return HM_OK;
  if (!hm_moe_on_host(x)) return combine_cuda(x, slot, a, appended);
  HM_CHECK(combine_host(a, appended));
  x->launches++;
  return HM_OK;
}

hm_status hm_moe_combine(hm_engine *engine, const hm_moe_combine_args *args, hm_stream *stream) {
  HM_CHECK_NOT_NULL(engine);
  hm_moe_exec x = {.engine = engine, .stream = stream};
  return hm_moe_combine_run(&x, NULL, args, false);
}
